"""Runtime: plan → loaded model. Applies the plan's environment, loads with ``from_pretrained`` and
the plan's choices, compiles, and returns :class:`~intelrt.runtime.loaded.Loaded` (generate,
embed, classify, train)."""
