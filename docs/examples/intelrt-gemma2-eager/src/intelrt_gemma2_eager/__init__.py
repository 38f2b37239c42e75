"""Example intelrt plugin: eager attention for Gemma 2 on Intel GPUs (see ``plugin.py``)."""
