# kvplan: `make install` sets up .venv with the light core, `make demo` runs the main job,
# `make test` adds everything the suite needs (torch, triton, transformers, streamlit, ray,
# playwright) and runs it. All are idempotent on a fresh clone.
#
# Two stamps because the demo (the simulator) needs none of the heavy extras: a fresh clone's
# `make install && make demo` installs simpy, numpy, scipy, pyarrow, pyyaml, typer, rich and tqdm,
# plus mypy to compile the simulator's hot path (make native; sim/native.py), and the measured
# GPU operator tables of aiconfigurator-core (the `tables` extra; pyproject.toml says why).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
CORE_STAMP := $(VENV)/.installed-core
DEV_STAMP := $(VENV)/.installed
# The simulator's hot modules compiled with mypyc (sim/native.py): rebuilt when a source changes.
# A failed build (no C compiler) is one line, and the simulator then runs as Python.
NATIVE_STAMP := $(VENV)/.native
NATIVE_SOURCES := $(wildcard sim/policies/*.py sim/policies/*/*.py) sim/fast_decode.py \
	sim/simulation.py sim/native.py sim/native_build.py

.PHONY: install install-dev native demo test test-all bench screenshots clean

install: $(CORE_STAMP) $(NATIVE_STAMP)

install-dev: $(DEV_STAMP)

$(CORE_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[native,tables]'
	touch $(CORE_STAMP)

$(NATIVE_STAMP): $(CORE_STAMP) $(NATIVE_SOURCES)
	$(BIN)/python -m sim.native_build || true
	touch $(NATIVE_STAMP)

native: $(CORE_STAMP)
	$(BIN)/python -m sim.native_build
	touch $(NATIVE_STAMP)

$(DEV_STAMP): $(CORE_STAMP)
	$(BIN)/python -m pip install -q --upgrade pip
	# CPU machines: the CPU build of torch first, so nothing pulls a multi-GB CUDA build.
	if command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install -q torch; \
	else $(BIN)/pip install -q torch==2.13.0; fi
	$(BIN)/pip install -q -e '.[dev]'
	touch $(DEV_STAMP)

demo: install
	$(BIN)/kvplan simulate --out runs/demo

test: install-dev $(NATIVE_STAMP)
	$(BIN)/python -m pytest

test-all: install-dev $(NATIVE_STAMP)
	$(BIN)/python -m pytest -m "not gpu"

bench: install-dev $(NATIVE_STAMP)
	$(BIN)/python benchmarks/paged_vs_contiguous.py
	$(BIN)/python benchmarks/sim_speed.py
	$(BIN)/python benchmarks/cost_model_vs_vidur.py
	$(BIN)/python benchmarks/runtime_vs_hf.py

# The dashboard's pages in headless Chromium (apt-get install chromium), saved to docs/img.
screenshots: install-dev $(NATIVE_STAMP)
	KVPLAN_SCREENSHOT_DIR=docs/img $(BIN)/python -m pytest tests/dashboard/test_browser.py -q -k every_page

clean:
	test ! -x $(BIN)/python || $(BIN)/python -m sim.native_build clean
	rm -rf $(VENV) runs .pytest_cache build/mypyc
