"""Stand-in for ``habana_frameworks.torch.hpex.kernels``: ``FusedSDPA`` (Gaudi's fused scaled-dot-product attention).

The other kernels of the real package (fused RoPE, CTC loss, FP8 SDPA …) are not simulated: code
that imports them gets ``ImportError``, as Optimum Habana's modeling code expects of a stack without them.
"""

from .FusedSDPA import FusedSDPA  # noqa: F401
