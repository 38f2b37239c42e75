"""Conformance suite for intelrt plugin authors.

Check a plugin from your own tests::

    from intelrt.testing.conformance import check_plugin

    def test_my_plugin_conforms():
        check_plugin("my_plugin").raise_for_violations()

or run it as a pytest suite (``-p intelrt.testing.fixtures`` adds the options)::

    pytest -p intelrt.testing.fixtures --pyargs intelrt.testing.conformance --intelrt-plugin my_plugin \\
        [--intelrt-scenario my_plugin.testing:scenarios] [--intelrt-model path/to/model]

Each rule in :data:`RULES` is one test per plugin, so a failure names the rule it breaks.
"""

from .checks import HEAVY_MODULES, check_plugin, installed_plugin_names
from .report import RULES, Report, Violation
from .scenarios import Scenario, default_scenarios, load_scenarios

__all__ = ["HEAVY_MODULES", "RULES", "Report", "Scenario", "Violation", "check_plugin", "default_scenarios",
           "installed_plugin_names", "load_scenarios"]
