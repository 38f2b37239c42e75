"""Stand-in for ``habana_frameworks.torch.dynamo.compile_backend``."""

from . import backends  # noqa: F401
