"""``python -m intelrt.cli``: the same as the ``intelrt`` command."""

from .app import console_script

if __name__ == "__main__":
    console_script()
