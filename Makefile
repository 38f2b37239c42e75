# Two entry points (see README): `make run` (main job) and `make test` (the suite, what CI runs).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-v1

.PHONY: install run test lint unit clean

$(STAMP): pyproject.toml plugins/xpu/pyproject.toml plugins/hpu/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# the CPU build of torch first: a bare torch requirement would pull a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[kernels,bitsandbytes,train,dev]" -e plugins/xpu -e plugins/hpu
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/intelrt run

lint: $(STAMP)
	$(VENV)/bin/ruff check core plugins tests benchmarks
	$(VENV)/bin/mypy

unit: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest $(PYTEST_ARGS)

test: lint unit

clean:
	rm -rf $(VENV)
