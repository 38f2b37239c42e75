# Two entry points (see README): `make run` (main job) and `make test` (the suite, what CI runs).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-v6
EXAMPLES := docs/examples/intelrt-gemma2-eager docs/examples/intelrt-acme

.PHONY: install run check test lint unit docs conformance clean

$(STAMP): pyproject.toml plugins/xpu/pyproject.toml plugins/hpu/pyproject.toml
	@echo "make install [1/4]: a virtual environment in $(VENV)"
	$(PYTHON) -m venv $(VENV)
	@echo "make install [2/4]: pip (25.1 or later installs dependency groups: --group dev)"
	$(PY) -m pip install -q --upgrade pip
	@echo "make install [3/4]: torch 2.13.0, the CPU build (the largest download)"
	# the CPU build of torch first: a bare torch requirement would pull a multi-GB CUDA build
	$(PY) -m pip install --progress-bar on torch==2.13.0
	@echo "make install [4/4]: intelrt, intelrt-xpu, intelrt-hpu (editable), their extras and the dev group"
	# Not the kernels extra: the range transformers accepts (>=0.18.2,<0.19) has no release on PyPI
	# yet. The tests simulate that version's install (docs/backends/fidelity.md) over the module of
	# the last release, 0.17.2, which they import.
	$(PY) -m pip install --progress-bar on -e ".[bitsandbytes,torchao,autoround,compressed-tensors,inc,train,serve,ray,vision,audio]" -e plugins/xpu -e plugins/hpu \
		kernels==0.17.2 --group dev
	# earlier versions of this Makefile installed the example plugins here; they are for the tests only
	$(PY) -m pip uninstall -q -y intelrt-acme intelrt-gemma2-eager 2>/dev/null || true
	@echo "make install: done ($(VENV); rerun after editing a pyproject.toml)"
	touch $(STAMP)

# The example plugins of docs/plugins.md are never installed into .venv (every plan would list
# them): tests/integration/test_examples.py installs them into a directory of its own, and `conformance`
# into a temporary one.
install: $(STAMP)

# The lifecycle on the embedded tiny model: plan, load, LoRA fine-tune on the bundled text, save,
# reload, generate (`intelrt run` alone is load + generate).
run: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/intelrt train --demo

lint: $(STAMP)
	@echo "== test: ruff"
	$(VENV)/bin/ruff check core plugins tests benchmarks docs/examples docs/reference.py docs_build
	@echo "== test: mypy"
	$(VENV)/bin/mypy

# The fast tier for the inner loop: ruff and the contract tests (plans under simulation, the host,
# options, CLI parsing, the docs' checks) — no subprocesses, training or compiles.
check: $(STAMP)
	@echo "== check: ruff"
	$(VENV)/bin/ruff check core plugins tests benchmarks docs/examples docs/reference.py docs_build
	@echo "== check: the contract tests (tests/contract)"
	HF_HUB_OFFLINE=1 $(PY) -m pytest tests/contract $(PYTEST_ARGS)

# Two pytest-xdist workers, a test file each at a time (--dist loadfile: a file's module fixtures
# and its order stay in one process): the integration tier runs its tiny models on one torch thread,
# so one worker per core of the 2-core CI machine. PYTEST_WORKERS=0 runs in this process.
PYTEST_WORKERS ?= 2

unit: $(STAMP)
	@echo "== test: both tiers (tests/contract, tests/integration), $(PYTEST_WORKERS) workers"
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

# The docs site, warnings as errors (broken links, pages missing from the nav), into a temp dir.
docs: $(STAMP)
	@echo "== test: the docs site (mkdocs build --strict)"
	@out=$$(mktemp -d); NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d $$out/site > $$out/log 2>&1; rc=$$?; \
		grep -v '^INFO' $$out/log; rm -rf $$out; exit $$rc

# The plugin-author conformance suite as plugin authors run it (the unit suite runs it too).
conformance: $(STAMP)
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; cp -r $(EXAMPLES) $$tmp/ && \
	$(PY) -m pip install -q --no-deps --no-build-isolation --target $$tmp/plugins $(addprefix $$tmp/,$(notdir $(EXAMPLES))) && \
	HF_HUB_OFFLINE=1 PYTHONPATH=$$tmp/plugins $(PY) -m pytest -q --pyargs intelrt.testing.conformance \
		--intelrt-plugin xpu --intelrt-plugin hpu --intelrt-plugin gemma2_eager --intelrt-plugin acme \
		--intelrt-scenario intelrt_acme.testing:scenarios

test: lint unit docs

clean:
	rm -rf $(VENV)
