# kvplan: `make install` sets everything up in .venv, `make demo` runs the main job,
# `make test` runs the suite. All three are idempotent on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test test-all bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# CPU machines: the CPU build of torch first, so nothing pulls a multi-GB CUDA build.
	if command -v nvidia-smi >/dev/null 2>&1; then $(BIN)/pip install -q torch; \
	else $(BIN)/pip install -q torch==2.13.0; fi
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

demo: install
	$(BIN)/kvplan simulate --out runs/demo

test: install
	$(BIN)/python -m pytest

test-all: install
	$(BIN)/python -m pytest -m "not gpu"

bench: install
	$(BIN)/python benchmarks/paged_vs_contiguous.py
	$(BIN)/python benchmarks/sim_speed.py
	$(BIN)/python benchmarks/cost_model_vs_vidur.py
	$(BIN)/python benchmarks/runtime_vs_hf.py

clean:
	rm -rf $(VENV) runs .pytest_cache
