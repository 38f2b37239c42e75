"""The ``intelrt`` command line: plugins | doctor | plan | run | train | launch | bench."""

from .app import console_script, main

__all__ = ["console_script", "main"]
