"""Fast decoding: a static-cache decode loop with a compiled, graph-captured step (issue 6).

``policy`` holds the plan-time rules (pure Python, no torch); ``options`` checks generation
keywords; ``engine`` runs the loop; ``continuous`` drives transformers' continuous batching;
``routing`` picks the path for one call and says why. Importing this package imports no torch.
"""

from __future__ import annotations

from .policy import (
    DECODE_METHODS,
    batching_value,
    decode_blockers,
    decode_compile,
    decode_graphs,
    fast_decode,
)

__all__ = ["DECODE_METHODS", "batching_value", "decode_blockers", "decode_compile", "decode_graphs", "fast_decode"]
