"""The plugin host: loads intelrt's built-in backends and the installed plugins, and calls their
hooks through one typed method per hook (discovery, allow/block lists, time limits, tracing,
validation)."""
