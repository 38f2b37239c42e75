"""Example intelrt plugin: the ``acme`` backend (see ``plugin.py``; simulation in ``testing.py``)."""
