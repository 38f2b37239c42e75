"""Fault catalogue: the command line before anything loads — every command with a flag it does not
have, every counted flag with every kind of bad number, every plan flag of plan / run / train with
a bad value, ``--simulate`` specs, and the environment variables that steer the plugin host.

Each runs ``intelrt`` in-process (``intelrt.cli.main``); :func:`faults.check` asserts the exit
status, the one ``intelrt: error:`` paragraph naming the flag, no traceback — and the traceback
with ``-v``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from faults import Catalogue, Fault, check, cli, error, no_secret, works

from intelrt.hooks.request import REQUEST_OPTIONS

catalogue = Catalogue(__file__)
SCRIPT = str(Path(__file__).parents[1] / "scripts" / "ddp_tiny.py")

COMMANDS = {"plugins": [], "doctor": [], "plan": [], "run": [], "train": ["--data", "{data}", "--output", "{out}"],
            "launch": [SCRIPT], "bench": ["--tiny"]}
"""Each command with what it needs besides the flag under test (launch's script comes last)."""


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("cli-faults")
    data = root / "data.txt"
    data.write_text("Intel GPUs run PyTorch.\n" * 20, encoding="utf-8")
    return {"data": str(data), "out": str(root / "out")}


def _argv(command: str, flag: list[str], paths: dict[str, str]) -> list[str]:
    rest = [a.format(**paths) for a in COMMANDS[command]]
    if command == "launch":  # options go before the script: what follows it is the script's
        return [command, *flag, *rest]
    return [command, *rest, *flag]


# -- every command x a flag it does not have -----------------------------------------------------------

UNKNOWN = [error(f"cli-{c}-unknown-flag", "cli", f"`intelrt {c}` with a flag it does not have",
                 "unrecognized arguments: --no-such-flag", trigger=f"intelrt {c} --no-such-flag", data=c)
           for c in COMMANDS]
MISSING_VALUE = [error(f"cli-{c}-{flag.strip('-')}-without-value", "cli", f"`intelrt {c} {flag}` with no value",
                       f"argument {flag}: expected one argument", trigger=f"intelrt {c} {flag}", data=(c, flag))
                 for c, flag in (("doctor", "--simulate"), ("plan", "--dtype"), ("run", "--prompt"),
                                 ("train", "--epochs"), ("launch", "--nproc"), ("bench", "--requests"))]


@catalogue.cases(UNKNOWN)
def test_every_command_refuses_a_flag_it_does_not_have(case: Fault, paths: dict[str, str]) -> None:
    check(case, cli(*_argv(case.data, ["--no-such-flag"], paths)))


@catalogue.cases(MISSING_VALUE)
def test_a_flag_without_its_value_is_named(case: Fault, paths: dict[str, str]) -> None:
    command, flag = case.data
    check(case, cli(command, flag))


# -- every counted flag x every kind of bad number ------------------------------------------------------

#: (command, flag, kind): kind "count" (whole >= 1), "count0" (whole >= 0), "number" (finite > 0),
#: "seconds" (finite >= 0); bounded ones also get a value past their maximum.
COUNTED = [("run", "--max-new-tokens", "count"), ("train", "--max-steps", "count"), ("train", "--batch-size", "count"),
           ("train", "--block-size", "count"), ("train", "--save-steps", "count"), ("train", "--seed", "count0"),
           ("train", "--max-new-tokens", "count"), ("train", "--epochs", "number"),
           ("train", "--learning-rate", "number"), ("launch", "--nproc", "count"), ("launch", "--nnodes", "count"),
           ("launch", "--node-rank", "count0"), ("launch", "--hang-timeout", "seconds"),
           ("bench", "--requests", "count"), ("bench", "--new-tokens", "count"), ("bench", "--prompt-tokens", "count"),
           ("bench", "--load-repeats", "count"), ("bench", "--repeats", "count")]
BAD_NUMBERS = {
    "count": [("zero", "0", "must be >="), ("negative", "-1", "must be >="), ("word", "ten", "must be a whole number"),
              ("fraction", "1.5", "must be a whole number"), ("empty", "", "must be a whole number")],
    "count0": [("negative", "-1", "must be >= 0"), ("word", "ten", "must be a whole number"),
               ("fraction", "1.5", "must be a whole number"), ("empty", "", "must be a whole number")],
    "number": [("zero", "0", "finite number > 0"), ("negative", "-1", "finite number > 0"),
               ("nan", "nan", "finite number > 0"), ("inf", "inf", "finite number > 0"),
               ("word", "ten", "must be a number"), ("empty", "", "must be a number")],
    "seconds": [("negative", "-1", "finite number of seconds >= 0"), ("nan", "nan", "finite number of seconds"),
                ("inf", "inf", "finite number of seconds"), ("word", "ten", "must be a number of seconds"),
                ("empty", "", "must be a number of seconds")],
}
PAST_MAXIMUM = {("train", "--seed"): str(2**32), ("launch", "--nproc"): "100000"}
NUMBERS = [error(f"cli-{c}-{flag.strip('-')}-{name}", "cli", f"{flag} {value!r}: {name.replace('-', ' ')}",
                 f"argument {flag}", said, trigger=f"intelrt {c} {flag} {value!r}", data=(c, flag, value))
           for c, flag, kind in COUNTED for name, value, said in BAD_NUMBERS[kind]]
NUMBERS += [error(f"cli-{c}-{flag.strip('-')}-past-maximum", "cli", f"{flag} past its maximum", f"argument {flag}",
                  "must be <=", trigger=f"intelrt {c} {flag} {value}", data=(c, flag, value))
            for (c, flag), value in PAST_MAXIMUM.items()]


@catalogue.cases(NUMBERS)
def test_every_counted_flag_refuses_every_kind_of_bad_number(case: Fault, paths: dict[str, str]) -> None:
    command, flag, value = case.data
    check(case, cli(*_argv(command, [flag, value], paths)))


# -- every plan flag of plan / run / train x a bad value ------------------------------------------------

def _option_cases() -> Iterator[Fault]:
    for option in REQUEST_OPTIONS:
        if option.flag:
            continue
        for command in ("plan", "run", "train"):
            for name, value in (("empty", ""), ("unknown", "no-such-value")):
                if command == "run" and option.name == "sharding":
                    says: tuple[str, ...] = ("--sharding says how training spreads",)
                elif option.choices is not None:
                    says = (f"argument {option.cli_flag}: invalid choice",)
                else:
                    says = (option.name,)
                yield Fault(f"cli-{command}-{option.name.replace('_', '-')}-{name}", "cli",
                            f"`intelrt {command}` with an {name} {option.cli_flag}", "clear error", says,
                            trigger=f"intelrt {command} {option.cli_flag} {value!r}",
                            data=(command, option.cli_flag, value))


@catalogue.cases(list(_option_cases()))
def test_every_plan_flag_refuses_a_bad_value_before_loading(case: Fault, paths: dict[str, str]) -> None:
    command, flag, value = case.data
    seen = check(case, cli(*_argv(command, [flag, value], paths)))
    assert "loading" not in seen.stderr  # refused before anything loads


# -- --simulate -------------------------------------------------------------------------------------------

SPECS = [("word", "bogus", "KIND[:COUNT[:GENERATION]]"), ("empty", "", "KIND[:COUNT[:GENERATION]]"),
         ("negative", "xpu:-1", "COUNT must be a whole number"), ("huge", "xpu:100000000", "COUNT must be <= 64"),
         ("foreign-generation", "xpu:2:gaudi3", "GENERATION for xpu must be one of"),
         ("gaudi-with-a-gpu-name", "hpu:2:max1550", "GENERATION for hpu must be one of"),
         ("unknown-kind", "tpu:2", "KIND[:COUNT[:GENERATION]]")]
SIMULATE = [error(f"cli-{c}-simulate-{name}", "cli", f"`intelrt {c} --simulate` with a spec it cannot read ({name})",
                  *([said] if said else []), trigger=f"intelrt {c} --simulate {value!r}", data=(c, value))
            for c in ("doctor", "plan") for name, value, said in SPECS]
SIMULATE += [error(f"cli-launch-simulate-{name}", "cli", f"`intelrt launch --dry-run --simulate` ({name})",
                   said, trigger=f"intelrt launch --dry-run --simulate {value!r} SCRIPT", data=("launch", value))
             for name, value, said in SPECS[:4]]


@catalogue.cases(SIMULATE)
def test_simulate_specs_that_cannot_be_read_are_refused(case: Fault) -> None:
    command, value = case.data
    argv = [command, "--simulate", value] if command != "launch" else [command, "--dry-run", "--simulate", value,
                                                                          SCRIPT]
    check(case, cli(*argv))


@catalogue.cases(works("cli-plan-simulate-no-devices", "cli", "`intelrt plan --simulate xpu:0`: the Intel GPU stack "
                       "without a device", "xpu", "cpu", risk="silent wrong", trigger="intelrt plan --simulate xpu:0"))
def test_a_simulated_machine_without_devices_plans_for_the_cpu_saying_why(case: Fault) -> None:
    seen = check(case, cli("plan", "--simulate", "xpu:0", "--json"))
    import json

    assert json.loads(seen.stdout)["backend"]["name"] == "cpu"


# -- the plugin host's environment variables --------------------------------------------------------------

TIMEOUTS = [("inf", "inf", None), ("1e400", "1e400", None), ("blank", " ", None),
            ("nan", "nan", "must be a positive number of seconds"), ("negative", "-1", "must be a positive number"),
            ("zero", "0", "must be a positive number"), ("word", "soon", "is not a number of seconds")]
HOOK_TIMEOUT = [(error if said else works)(
    f"cli-{c}-hook-timeout-{name}", "plugins", f"INTELRT_HOOK_TIMEOUT={value!r} for `intelrt {c}`",
    *(["INTELRT_HOOK_TIMEOUT"] if said else []), *([said] if said else []),
    risk="wrong culprit" if name in ("inf", "1e400") else "traceback",
    trigger=f"INTELRT_HOOK_TIMEOUT={value!r} intelrt {c}", data=(c, value))
    for c in ("plan", "doctor", "plugins") for name, value, said in TIMEOUTS]


@catalogue.cases(HOOK_TIMEOUT)
def test_the_hook_time_limit_variable_is_read_as_seconds_and_inf_is_no_limit(case: Fault) -> None:
    """``inf`` (or a number past what a thread can wait) used to end in an OverflowError blamed on
    plugin 'hpu'; now it means no limit."""
    command, value = case.data
    seen = check(case, cli(command, env={"INTELRT_HOOK_TIMEOUT": value}))
    if case.outcome == "correct behaviour":
        assert "hpu" not in seen.message and "OverflowError" not in seen.output


ALLOW = [error("plugins-allow-list-names-nothing-plan", "plugins", "an allow-list naming no installed plugin, for plan",
               "INTELRT_PLUGINS names no-such-plugin", "which no installed plugin provides",
               trigger="INTELRT_PLUGINS=no-such-plugin intelrt plan", data="plan"),
         error("plugins-allow-list-names-nothing-doctor", "plugins",
               "an allow-list naming no installed plugin: doctor used to report no findings while every plan failed",
               "INTELRT_PLUGINS names no installed plugin", risk="silent wrong", exit_code=1,
               trigger="INTELRT_PLUGINS=no-such-plugin intelrt doctor", data="doctor"),
         works("plugins-allow-list-names-nothing-plugins", "plugins",
               "an allow-list naming no installed plugin, for `intelrt plugins` (which lists what is there)",
               "not allowed", trigger="INTELRT_PLUGINS=no-such-plugin intelrt plugins", data="plugins")]


@catalogue.cases(ALLOW)
def test_an_allow_list_naming_no_plugin(case: Fault) -> None:
    seen = cli(case.data, env={"INTELRT_PLUGINS": "no-such-plugin"})
    if case.data == "doctor":  # doctor's report is its result: the finding, on stdout, exit status 1
        assert seen.code == 1 and "error: INTELRT_PLUGINS names no installed plugin" in seen.stdout, seen.output
        assert "findings:\n  none" not in seen.stdout
        seen.stderr += "intelrt: error: " + seen.stdout[seen.stdout.index("INTELRT_PLUGINS names no installed"):]
        check(case, seen, verbose=False)
        return
    check(case, seen)


SECRETS = [
    works("cli-doctor-master-addr-password", "cli", "MASTER_ADDR=user:pw@host (a password without a URL scheme) "
          "was printed by doctor", "MASTER_ADDR=***@", risk="leak",
          trigger="MASTER_ADDR=trainer:Hunter2pw@node0 intelrt doctor",
          data=("doctor", {"MASTER_ADDR": "trainer:Hunter2pw@node0"}, "Hunter2pw")),
    works("cli-doctor-json-master-addr-password", "cli", "the same, as JSON", "***@node0", risk="leak",
          trigger="MASTER_ADDR=trainer:Hunter2pw@node0 intelrt doctor --json",
          data=("doctor --json", {"MASTER_ADDR": "trainer:Hunter2pw@node0"}, "Hunter2pw")),
    works("cli-plan-api-key-in-env", "cli", "a *_API_KEY in the environment, for plan", risk="leak",
          trigger="VENDOR_API_KEY=sk-live-… intelrt plan --json",
          data=("plan --json", {"VENDOR_API_KEY": "sk-live-abcdef123456"}, "sk-live-abcdef123456")),
    works("cli-doctor-proxy-password", "cli", "a proxy password in HTTPS_PROXY, for doctor", risk="leak",
          trigger="HTTPS_PROXY=http://bob:Pr0xyPass@proxy:3128 intelrt doctor",
          data=("doctor", {"HTTPS_PROXY": "http://bob:Pr0xyPass@proxy:3128"}, "Pr0xyPass")),
]


@catalogue.cases(SECRETS)
def test_secrets_in_the_environment_are_never_printed(case: Fault) -> None:
    command, env, secret = case.data
    seen = check(case, cli(*command.split(), env=env))
    no_secret(seen, secret)
