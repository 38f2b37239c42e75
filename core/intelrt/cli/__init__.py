"""The ``intelrt`` command line: plugins | doctor | plan | run | train | launch | bench."""

from .app import main

__all__ = ["main"]
