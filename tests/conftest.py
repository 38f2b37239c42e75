"""Suite-wide settings: offline, a clean intelrt-relevant environment, the tiny model, and each
tier's time limit per test.

Two tiers, by directory: ``tests/contract/`` (plans under simulation, the host, options, CLI parsing,
docs checks — ``make check``) and ``tests/integration/`` (subprocesses, loading, generation,
training, compile, serving, the zoo, packaging). ``make test`` runs both.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import signal
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"  # SPEC C4: no test reaches the hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: tests/interpreted/ runs only under Triton's interpreter, in the process that
#: tests/integration/test_decode_attention_kernel.py starts with TRITON_INTERPRET=1.
collect_ignore = [] if os.environ.get("TRITON_INTERPRET") == "1" else ["interpreted"]

#: Variables from the developer's shell that would change what intelrt decides (INTELRT_CACHE
#: only says where the tiny model is built, so it is kept).
_LEAKY_PREFIXES = ("INTELRT_", "ZE_", "HABANA_", "PT_HPU_", "PT_ENABLE_INT64", "CUDA_VISIBLE", "LOCAL_RANK",
                   "MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "RANK")


#: Seconds one test may take, per tier (pytest-timeout); a test that needs longer says so with its
#: own ``@pytest.mark.timeout(...)``. Both stay well below the suite's own budget (30 minutes).
TIER_TIMEOUTS = {"contract": 120, "integration": 300}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = next((t for t in TIER_TIMEOUTS if t in item.path.parts), None)
        if tier is not None and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(TIER_TIMEOUTS[tier]))


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(_LEAKY_PREFIXES) and name != "INTELRT_CACHE":
            monkeypatch.delenv(name)
    from intelrt.host.manager import reset_host

    reset_host()


@pytest.fixture(autouse=True)
def integration_on_one_torch_thread(request: pytest.FixtureRequest) -> None:
    """The integration tier's tiny models run on one torch thread, in this process (the processes
    it starts choose their own): on the 2-core CI machine, shared, a second thread spins more than
    it works (tests/integration/test_model_zoo.py: 23.8 s of CPU for 17.5 s → 16.2 s for 14.7 s on
    one thread, a third of the CPU time)."""
    if "integration" in request.node.path.parts:
        import torch

        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The embedded default model (built once into the intelrt cache)."""
    from intelrt.tiny import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def tiny_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT encoder (feature extraction)."""
    from intelrt.tiny import build_encoder

    path = tmp_path_factory.mktemp("tiny-encoder")
    build_encoder(path)
    return path


@pytest.fixture(scope="session")
def tiny_classifier(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny BERT with a 3-label sequence-classification head."""
    from intelrt.tiny import build_encoder

    path = tmp_path_factory.mktemp("tiny-classifier")
    build_encoder(path, num_labels=3)
    return path


@pytest.fixture(scope="module")
def one_torch_thread() -> Iterator[None]:
    """Train the tiny model on one thread: on a busy 2-core machine two threads thrash."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def ctrl_c_raises() -> Iterator[None]:
    """SIGINT as Python sets it up in a foreground terminal: ``KeyboardInterrupt``, in this process
    and in the processes the test starts, however the suite itself was started. A shell without job
    control starts a background job (``make test > log &``) with SIGINT ignored, and Python then
    leaves it ignored (docs.python.org/3/library/signal.html); handled here, it reaches a child as
    the default action (execve(2): "the dispositions of any signals that are being caught are reset
    to the default", ignored ones stay ignored), so its Python raises ``KeyboardInterrupt`` too."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="session")
def train_until_killed() -> ModuleType:
    """tests/scripts/train_until_killed.py as a module: its run settings and a child that hangs
    once a checkpoint is written (for SIGKILL and lock tests)."""
    spec = importlib.util.spec_from_file_location("train_until_killed",
                                                  Path(__file__).parent / "scripts" / "train_until_killed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def disk_limit() -> Iterator[Any]:
    """``set(n)``: files of this process cannot grow past ``n`` bytes (EFBIG, SIGXFSZ ignored) until the test ends."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        yield lambda n: resource.setrlimit(resource.RLIMIT_FSIZE, (n, hard))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


#: What the catalogue cases and the zoos found, gathered from the test reports (``user_properties``),
#: so that the summary is the same whether the tests ran in this process or in pytest-xdist workers:
#: fault case id → (area, outcome, risk); zoo kind → outcome → model types.
_FAULTS_SEEN: dict[str, tuple[str, str, str]] = {}
_ZOO_SEEN: dict[str, dict[str, list[str]]] = {}
_SENT: dict[tuple[str, ...], int] = {}
"""How much of each record (the catalogue's list, each zoo outcome's list) this process has put on a
report already: the records only grow, so each report carries what was appended since."""


def _new_records() -> list[list[str]]:
    modules = __import__("sys").modules
    found: list[list[str]] = []
    checked = getattr(modules.get("faults"), "CHECKED", None) or []
    found += [["fault", case.id, case.area, case.outcome, case.risk] for case, _ in checked[_SENT.get(("fault",), 0):]]
    _SENT[("fault",)] = len(checked)
    for name in ("test_model_zoo", "test_task_zoo"):
        for kind, outcomes in (getattr(modules.get(name), "SUMMARY", None) or {}).items():
            for result, models in outcomes.items():
                key = ("zoo", name, kind, result)
                found += [["zoo", kind, result, model] for model in models[_SENT.get(key, 0):]]
                _SENT[key] = len(models)
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Put on the test's report the catalogue cases (tests/faults.py ``CHECKED``) and zoo outcomes
    (the zoo modules' ``SUMMARY``) recorded since the last report, as plain values a worker can send."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when == "call":
        report.user_properties += [("intelrt_summary", record) for record in _new_records()]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Gather what :func:`pytest_runtest_makereport` put on the reports (in the controller, under xdist)."""
    for name, value in report.user_properties:
        if name != "intelrt_summary":
            continue
        if value[0] == "fault":
            _FAULTS_SEEN[value[1]] = (value[2], value[3], value[4])
        else:
            _ZOO_SEEN.setdefault(value[1], {}).setdefault(value[2], []).append(value[3])


def _fault_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fault catalogue's counts (tests/faults.py), when catalogue cases ran: per outcome, area and risk,
    and what the output scan found (every checked case passed it: tracebacks without -v, 0)."""
    if not _FAULTS_SEEN:
        return
    from collections import Counter

    import faults

    cases = list(_FAULTS_SEEN.values())
    terminalreporter.section("fault catalogue (docs/reliability.md)")
    outcomes = Counter(outcome for _, outcome, _ in cases)
    terminalreporter.write_line(f"{len(cases)} cases passed: " + ", ".join(f"{o} {n}" for o, n in sorted(outcomes.items()))
                                + "; tracebacks without -v 0")
    areas = Counter((area, outcome) for area, outcome, _ in cases)
    for area in faults.AREAS:
        if any(a == area for a, _ in areas):
            terminalreporter.write_line(f"  {area:<9} " + ", ".join(f"{o} {areas[(area, o)]}" for o in faults.OUTCOMES
                                                                  if areas[(area, o)]))
    risks = Counter(risk for _, _, risk in cases)
    terminalreporter.write_line("guarding against: " + ", ".join(f"{r} {risks[r]}" for r in faults.RISKS if risks[r])
                                + " (each 0 left: every case passed)")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The model zoos' counts (tests/integration/test_model_zoo.py, tests/integration/test_task_zoo.py), when they
    ran; the fault catalogue's."""
    _fault_summary(terminalreporter)
    if not _ZOO_SEEN:
        return
    terminalreporter.section("model zoo: intelrt against plain transformers")
    for kind, outcomes in _ZOO_SEEN.items():
        counts = ", ".join(f"{outcome} {len(names)}" for outcome, names in sorted(outcomes.items()))
        terminalreporter.write_line(f"{kind}: {counts}")
        for outcome in ("differs", "fails"):
            if outcomes.get(outcome):
                terminalreporter.write_line(f"  {outcome}: {', '.join(sorted(outcomes[outcome]))}")
