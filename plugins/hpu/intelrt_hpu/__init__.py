"""intelrt plugin for Intel Gaudi (torch device ``hpu``); hooks live in :mod:`intelrt_hpu.plugin`."""

__version__ = "0.1.0"
