"""Fault catalogue: third-party plugins that misbehave — each a real distribution with an ``intelrt``
entry point, built in the test (``intelrt.testing.distributions``) and found by the real discovery.

A plugin that exits, hangs or raises at import, sets a secret, chooses a value its backend refuses
or contributes a backend torch has no device for is named (plugin and distribution) with the way
out; its secret is never printed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from faults import Catalogue, Fault, call, check, cli, error, no_secret, works

import intelrt
from intelrt.testing.distributions import install_plugin, uninstall

catalogue = Catalogue(__file__)
Install = Callable[[str, str], None]
HEADER = "from intelrt import hookimpl\nfrom intelrt.hooks.types import *\n"


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[Install]:
    installed: list[tuple[Path, str]] = []

    def install(name: str, source: str) -> None:
        module = f"intelrt_faults_{name}"
        install_plugin(tmp_path / name, distribution=f"intelrt-faults-{name}", entry_point=name, module=module,
                       source=HEADER + source)
        installed.append((tmp_path / name, module))

    yield install
    for root, module in installed:
        uninstall(root, module)


SOURCES = {
    "exits": "raise SystemExit(0)\n",
    "exits3": "raise SystemExit(3)\n",
    "slow": "import time\ntime.sleep(20)\n",
    "broken": "raise ImportError('needs libvendor.so.3')\n",
    "hookexit": "@hookimpl(tryfirst=True)\ndef intelrt_select_dtype(backend):\n    raise SystemExit(0)\n",
    "hookraise": "@hookimpl(tryfirst=True)\ndef intelrt_select_dtype(backend):\n    raise KeyError('dtype')\n",
    "hookhang": ("import threading\n_never = threading.Event()\n@hookimpl(tryfirst=True)\n"
                 "def intelrt_select_dtype(backend):\n    _never.wait(20)\n"),
    "garbage": "@hookimpl(tryfirst=True)\ndef intelrt_select_attention(backend):\n    return ('sdpa', 'because')\n",
    "apikey": ("@hookimpl\ndef intelrt_setup_env(backend):\n"
               "    return [EnvVar('VENDOR_API_KEY', 'sk-vendor-0123456789', 'the vendor runtime reads it')]\n"),
    "launchkey": ("@hookimpl\ndef intelrt_launch_env(backend, plan, nproc):\n"
                  "    return [EnvVar('RANKS_AUTH_TOKEN', 'tok-launch-98765', 'every rank needs it')]\n"),
    "badattn": ("@hookimpl(tryfirst=True)\ndef intelrt_select_attention(backend):\n"
                "    return Decision('bogus_attention', 'I like it')\n"),
    "baddtype": "@hookimpl(tryfirst=True)\ndef intelrt_select_dtype(backend):\n    return Decision('float99', 'new')\n",
    "badplace": ("@hookimpl(tryfirst=True)\ndef intelrt_select_placement(backend):\n"
                 "    return Decision({'device_map': 'nowhere'}, 'here')\n"),
    "badsetting": ("@hookimpl(tryfirst=True)\ndef intelrt_training_arguments(backend, plan, overrides):\n"
                   "    return [Setting('learning_rate', 'fast', 'I like it fast')]\n"),
    "fake": ("from intelrt.plugin import Backend\n"
             "class Fake(Backend):\n    name = device_type = 'fake'\n    priority = 1000\n"
             "    @classmethod\n    def detect(cls, env):\n"
             "        return BackendStatus('fake', 'fake', True, 'I am surely here')\n"
             "@hookimpl\ndef intelrt_backends():\n    return [Fake]\n"),
}

IMPORT = [
    error("plugins-import-exits-0-plan", "plugins", "a plugin raising SystemExit(0) at import: plan printed nothing "
          "and exited 0", "plugin 'exits'", "failed to import: SystemExit: 0", "INTELRT_DISABLE_PLUGINS=exits",
          risk="silent wrong", exit_code=1, trigger="import-time `raise SystemExit(0)`; intelrt plan",
          data=("exits", ["plan"], {})),
    error("plugins-import-exits-3-plan", "plugins", "a plugin raising SystemExit(3) at import", "plugin 'exits3'",
          "SystemExit: 3", exit_code=1, trigger="import-time `raise SystemExit(3)`; intelrt plan",
          data=("exits3", ["plan"], {})),
    works("plugins-import-exits-0-plugins", "plugins", "the same plugin, for `intelrt plugins` (listed as failed)",
          "failed", "SystemExit", risk="silent wrong", trigger="intelrt plugins", data=("exits", ["plugins"], {})),
    error("plugins-import-exits-0-doctor", "plugins", "the same plugin, for doctor (an error finding)",
          "plugin exits failed to load", risk="silent wrong", exit_code=1, trigger="intelrt doctor",
          data=("exits", ["doctor"], {})),
    error("plugins-import-hangs-plan", "plugins", "a plugin whose import never returns (no time limit before)",
          "plugin 'slow'", "did not return within 1 s", "INTELRT_HOOK_TIMEOUT", risk="hang", exit_code=1,
          trigger="import-time `time.sleep(20)`; INTELRT_HOOK_TIMEOUT=1 intelrt plan",
          data=("slow", ["plan"], {"INTELRT_HOOK_TIMEOUT": "1"})),
    works("plugins-import-hangs-plugins", "plugins", "the same, for `intelrt plugins` (listed as failed, in time)",
          "failed", "did not return within", risk="hang",
          trigger="INTELRT_HOOK_TIMEOUT=1 intelrt plugins", data=("slow", ["plugins"], {"INTELRT_HOOK_TIMEOUT": "1"})),
    error("plugins-import-raises-plan", "plugins", "a plugin whose import raises ImportError",
          "plugin 'broken'", "needs libvendor.so.3", exit_code=1, trigger="import-time ImportError; intelrt plan",
          data=("broken", ["plan"], {})),
    error("plugins-hook-exits-plan", "plugins", "a selection hook raising SystemExit", "plugin 'hookexit'",
          "raised SystemExit in intelrt_select_dtype", exit_code=1, trigger="intelrt_select_dtype raises SystemExit(0)",
          data=("hookexit", ["plan"], {})),
    error("plugins-hook-raises-plan", "plugins", "a selection hook raising KeyError", "plugin 'hookraise'",
          "raised KeyError in intelrt_select_dtype", exit_code=1, trigger="intelrt_select_dtype raises KeyError",
          data=("hookraise", ["plan"], {})),
    error("plugins-hook-hangs-plan", "plugins", "a selection hook that never returns", "plugin 'hookhang'",
          "did not return within 1 s", risk="hang", exit_code=1,
          trigger="intelrt_select_dtype waits forever; INTELRT_HOOK_TIMEOUT=1",
          data=("hookhang", ["plan"], {"INTELRT_HOOK_TIMEOUT": "1"})),
    error("plugins-hook-returns-a-tuple-plan", "plugins", "a selection hook returning a tuple, not a Decision",
          "plugin 'garbage'", "expected a Decision", exit_code=1, trigger="intelrt_select_attention returns a tuple",
          data=("garbage", ["plan"], {})),
    error("plugins-bogus-attention-plan", "plugins", "a plugin choosing an attention nobody has: blamed on the model's "
          "files when it loaded", "plugin 'badattn'", "chose attention 'bogus_attention'", "INTELRT_DISABLE_PLUGINS",
          risk="wrong culprit", exit_code=1, trigger="intelrt_select_attention → 'bogus_attention'; intelrt plan",
          data=("badattn", ["plan"], {})),
    error("plugins-bogus-attention-run", "plugins", "the same, for `intelrt run`", "plugin 'badattn'",
          "refuses", risk="wrong culprit", exit_code=1, trigger="intelrt run", data=("badattn", ["run"], {})),
    error("plugins-bogus-dtype-plan", "plugins", "a plugin choosing dtype 'float99'", "plugin 'baddtype'", "float99",
          risk="wrong culprit", exit_code=1, trigger="intelrt_select_dtype → 'float99'",
          data=("baddtype", ["plan"], {})),
    error("plugins-bogus-device-map-run", "plugins", "a plugin choosing device_map 'nowhere': blamed on the model's "
          "files", "plugin 'badplace'", "'nowhere', which is not a device this torch knows", risk="wrong culprit",
          exit_code=1, trigger="intelrt_select_placement → device_map 'nowhere'; intelrt run",
          data=("badplace", ["run", "--max-new-tokens", "2"], {})),
    error("plugins-fake-backend-wins-run", "plugins", "a plugin's backend with a device torch does not know wins the "
          "plan: blamed on the model's files", "plugin 'fake'", "contributes backend 'fake'", "--backend cpu",
          risk="wrong culprit", exit_code=1, trigger="a Backend 'fake' of priority 1000; intelrt run",
          data=("fake", ["run", "--max-new-tokens", "2"], {})),
    works("plugins-fake-backend-and-backend-cpu", "plugins", "the same machine with --backend cpu", "output:",
          trigger="intelrt run --backend cpu", data=("fake", ["run", "--backend", "cpu", "--max-new-tokens", "2"], {})),
]


@catalogue.cases(IMPORT)
def test_a_misbehaving_plugin_is_named_with_the_way_out(case: Fault, plugin: Install) -> None:
    name, argv, env = case.data
    plugin(name, SOURCES[name])
    seen = cli(*argv, env=env)
    if argv[0] == "doctor":  # the report is the result: the finding on stdout, exit status 1
        assert "error: plugin exits failed to load" in seen.stdout and seen.code == 1, seen.output
        seen.stderr += "intelrt: error: " + seen.stdout[seen.stdout.index("plugin exits failed to load"):]
        check(case, seen, verbose=False)
        return
    check(case, seen, verbose=name not in ("slow", "hookhang"))  # a hang once is enough (each costs the limit)


SECRETS = [
    works("plugins-api-key-plan", "plugins", "a *_API_KEY a plugin sets was printed by plan", "VENDOR_API_KEY=***",
          risk="leak", trigger="intelrt_setup_env → VENDOR_API_KEY=sk-…; intelrt plan", data=("apikey", ["plan"])),
    works("plugins-api-key-plan-json", "plugins", "… and by plan --json", '"VENDOR_API_KEY"', '"***"', risk="leak",
          trigger="intelrt plan --json", data=("apikey", ["plan", "--json"])),
    works("plugins-api-key-run", "plugins", "… and by run (the plan it prints first)", "VENDOR_API_KEY=***",
          risk="leak", trigger="intelrt run", data=("apikey", ["run", "--max-new-tokens", "2"])),
    works("plugins-launch-token-dry-run", "plugins", "a *_TOKEN a plugin sets for launched ranks, in launch --dry-run",
          "RANKS_AUTH_TOKEN=***", risk="leak", trigger="intelrt_launch_env → RANKS_AUTH_TOKEN; intelrt launch --dry-run",
          data=("launchkey", ["launch", "--dry-run", "{script}"])),
    works("plugins-launch-token-dry-run-json", "plugins", "… as JSON", '"RANKS_AUTH_TOKEN"', '"***"', risk="leak",
          trigger="intelrt launch --dry-run --json", data=("launchkey", ["launch", "--dry-run", "--json", "{script}"])),
]
SECRET_VALUES = {"apikey": "sk-vendor-0123456789", "launchkey": "tok-launch-98765"}


@catalogue.cases(SECRETS)
def test_a_secret_a_plugin_sets_is_never_printed(case: Fault, plugin: Install) -> None:
    name, argv = case.data
    plugin(name, SOURCES[name])
    script = str(Path(__file__).parents[1] / "scripts" / "ddp_tiny.py")
    seen = check(case, cli(*[a.format(script=script) for a in argv]))
    no_secret(seen, SECRET_VALUES[name])


@catalogue.cases(works("plugins-api-key-reaches-the-run", "plugins", "the masked variable still reaches the run "
                       "(masked only in what intelrt prints)", risk="silent wrong",
                       trigger="intelrt.setup_env() with the plugin"))
def test_a_masked_secret_is_still_set_for_the_run(case: Fault, plugin: Install, tiny_model: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    plugin("apikey", SOURCES["apikey"])
    monkeypatch.delenv("VENDOR_API_KEY", raising=False)
    seen = check(case, call(lambda: intelrt.plan(tiny_model).env_for_this_process()))
    assert seen.value.get("VENDOR_API_KEY") == SECRET_VALUES["apikey"]


@catalogue.cases(error("plugins-training-setting-of-the-wrong-type", "plugins", "a plugin's TrainingArguments setting "
                       "of the wrong type (learning_rate='fast' reached AdamW)", "plugin 'badsetting'",
                       "learning_rate='fast'", "takes a float", "INTELRT_DISABLE_PLUGINS=badsetting",
                       risk="wrong culprit", error="PluginError",
                       trigger="intelrt_training_arguments → Setting('learning_rate', 'fast'); intelrt.training_arguments(DIR)"))
def test_a_plugins_training_setting_of_the_wrong_type_names_the_plugin(case: Fault, plugin: Install,
                                                                       tmp_path: Path) -> None:
    plugin("badsetting", SOURCES["badsetting"])
    check(case, call(lambda: intelrt.training_arguments(tmp_path / "out")))
