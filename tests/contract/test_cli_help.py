"""The command line's help is complete (issue 21): every command has a description and examples,
every option and argument says what it does, and the top-level help names every command."""

from __future__ import annotations

import argparse
import re

import pytest

from intelrt.cli import main
from intelrt.cli.app import build_parser


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


COMMANDS = sorted(_commands())


def test_the_top_level_help_names_every_command_with_a_summary(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert COMMANDS == ["bench", "doctor", "launch", "plan", "plugins", "quantize", "run", "serve", "train"]
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\s+\S", text, re.M), f"`intelrt --help` does not summarise {command}"
    assert "``" not in text and "exit status: 0 success, 1" in text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_a_description_examples_and_help_for_every_option(command: str,
                                                                            capsys: pytest.CaptureFixture[str]
                                                                            ) -> None:
    parser = _commands()[command]
    assert parser.description and len(parser.description) > 60, f"intelrt {command}: no description"
    assert parser.epilog and parser.epilog.startswith("examples:"), f"intelrt {command}: no examples"
    examples = [line.strip() for line in parser.epilog.splitlines()[1:]]
    assert examples and all(re.match(rf"(\w+=\S+ )*intelrt {command}\b", e) for e in examples), examples
    for action in parser._actions:
        if action.help == argparse.SUPPRESS:
            continue  # an option of other commands, refused here with its reason
        name = "/".join(action.option_strings) or action.dest
        assert action.help and len(action.help) > 10, f"intelrt {command} {name}: no help text"
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert "examples:" in text and "--json" in text and "-v, --verbose" in text
