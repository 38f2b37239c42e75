"""intelrt plugin for Intel GPUs (torch device ``xpu``); hooks live in :mod:`intelrt_xpu.plugin`."""

__version__ = "0.1.0"
