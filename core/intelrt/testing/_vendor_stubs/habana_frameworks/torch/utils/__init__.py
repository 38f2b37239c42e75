from . import experimental, internal  # noqa: F401
