"""Decoding: intelrt's fast decode loop — a static KV cache and a compiled, graph-captured step
(``engine``, ``compact``, ``forwards``, ``triton_attention``), transformers' continuous batching
(``continuous``), the path one call takes (``routing``, ``generation``) and the plan-time rules
backends answer the decode decision with (``policy``). Device choices come from the plan's decode
decision; the loop's own settings from ``DecodeTuning``. Importing this package imports no torch.
"""
