# Two commands do everything on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: install run test test-fast docs bench bench-scale gpu-wheels claims clean lock

install: $(STAMP)

# torch is pinned and installed first: the local CPU wheel for exactly 2.13.0 is found here;
# any looser spec would pull the CUDA build with gigabytes of extra packages.
# Every dependency comes at the exact version in requirements.lock (pyproject.toml keeps ranges for
# library users): bit-identical runs across machines need the same lock and the same CPU features.
$(STAMP): pyproject.toml requirements.lock
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[test,docs]" -c requirements.lock
	touch $(STAMP)

# refresh requirements.lock: resolve pyproject.toml's ranges in a fresh environment, pin what came
LOCKENV := .lock-venv
lock:
	rm -rf $(LOCKENV) && $(PY) -m venv $(LOCKENV)
	$(LOCKENV)/bin/python -m pip install -q --upgrade pip
	$(LOCKENV)/bin/python -m pip install -q torch==2.13.0
	$(LOCKENV)/bin/python -m pip install -q ".[test,docs]"
	{ echo "# Exact versions of every dependency of hierfl[test,docs] (make lock writes this file)."; \
	  echo "# make installs with it as constraints; torch's local build tag (+cpu) is dropped."; \
	  $(LOCKENV)/bin/python -m pip freeze --exclude hierfl | sed -e 's/^torch==\([0-9.]*\)+.*/torch==\1/'; \
	} > requirements.lock
	rm -rf $(LOCKENV)

run: install
	$(BIN)/hierfl run scenarios/quickstart.yaml --out runs/quickstart
	$(BIN)/hierfl plot runs/quickstart -o runs/quickstart/accuracy.png
	@echo "convergence plot: runs/quickstart/accuracy.png"

# the whole suite, every test, in $(TEST_WORKERS) pytest-xdist workers (each with its own Ray instance);
# a module's tests run in one worker (its module fixtures built once), a golden scenario's two runs in one
# worker (tests/conftest.py). TEST_WORKERS=0 runs it in this one process.
# Bytecode caches on, whatever the calling shell says (PYTHONDONTWRITEBYTECODE set to a non-empty string turns them
# off): the suite starts hundreds of Python processes (the workers, Ray actors, CLI runs), and without the caches
# each one compiles hierfl's modules from source again, about a second of CPU each, and each worker redoes pytest's
# assertion rewriting of every test module (about 11 of its 27 CPU seconds of collection).
TEST_WORKERS ?= 3
PYTEST_RUN := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q --dist loadscope
PYTEST  := $(PYTEST_RUN) -n $(TEST_WORKERS)
test: install
	$(PYTEST) tests

# the contributor's loop (budget: 2 minutes on 2 cores): the suite less the golden runs of the shipped
# scenarios and the tests marked slow, ray or browser; `make test` (and CI) run everything. Two workers, not
# three: without Ray a worker never waits for other processes, and each worker collects the whole suite first
# (about 16 CPU seconds: imports, and the shipped scenarios loaded for parametrisation)
FAST_MARKERS := not slow and not ray and not browser and not golden
FAST_WORKERS ?= 2
test-fast: install
	$(PYTEST_RUN) -n $(FAST_WORKERS) -m "$(FAST_MARKERS)" tests

# the documentation site, strict: a warning or a broken cross-reference fails the build
docs: install
	$(BIN)/python -m sphinx -W --keep-going -n -q -b html docs docs/_build/html
	@echo "documentation: docs/_build/html/index.html"

bench: install
	$(BIN)/python analysis/bench/emulator_overhead.py

bench-scale: install
	$(BIN)/python analysis/bench/scale.py

# the wheels analysis/bench/gpu_check.sh installs on a GPU node without a package index (CPython 3.11, 3.12)
gpu-wheels: install
	PYTHON=$(BIN)/python bash analysis/bench/gpu_wheels.sh

# every claim of analysis/claims/ (sweeps on Ray Tune), then analysis/results/claims.md
claims: install
	$(BIN)/python analysis/claims/run_all.py

clean:
	rm -rf $(VENV) $(LOCKENV) runs .pytest_cache .hypothesis
