# kvplan: `make install` sets up .venv with the light core, `make demo` runs the main job,
# `make test` adds everything the suite needs (torch, triton, transformers, streamlit, ray,
# playwright) and runs it. All are idempotent on a fresh clone.
#
# Two stamps because the demo (the simulator) needs none of the heavy extras: a fresh clone's
# `make install && make demo` installs simpy, numpy, scipy, pyyaml, typer, rich and tqdm only.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE_STAMP := $(VENV)/.installed-core
DEV_STAMP := $(VENV)/.installed

.PHONY: install install-dev demo test test-all bench clean

install: $(CORE_STAMP)

install-dev: $(DEV_STAMP)

$(CORE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e .
	touch $(CORE_STAMP)

$(DEV_STAMP): $(CORE_STAMP)
	$(BIN)/python -m pip install -q --upgrade pip
	# CPU machines: the CPU build of torch first, so nothing pulls a multi-GB CUDA build.
	if command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install -q torch; \
	else $(BIN)/pip install -q torch==2.13.0; fi
	$(BIN)/pip install -q -e '.[dev]'
	touch $(DEV_STAMP)

demo: install
	$(BIN)/kvplan simulate --out runs/demo

test: install-dev
	$(BIN)/python -m pytest

test-all: install-dev
	$(BIN)/python -m pytest -m "not gpu"

bench: install-dev
	$(BIN)/python benchmarks/paged_vs_contiguous.py
	$(BIN)/python benchmarks/sim_speed.py
	$(BIN)/python benchmarks/cost_model_vs_vidur.py
	$(BIN)/python benchmarks/runtime_vs_hf.py

clean:
	rm -rf $(VENV) runs .pytest_cache
