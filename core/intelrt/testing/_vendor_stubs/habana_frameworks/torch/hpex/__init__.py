"""Stand-in for ``habana_frameworks.torch.hpex`` (Habana's fused kernels); only ``kernels.FusedSDPA`` is simulated."""
