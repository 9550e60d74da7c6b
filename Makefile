# Two commands do everything on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: install run test bench bench-scale claims clean

install: $(STAMP)

# torch is pinned and installed first: the local CPU wheel for exactly 2.13.0 is found here;
# any looser spec would pull the CUDA build with gigabytes of extra packages.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $(STAMP)

run: install
	$(BIN)/hierfl run scenarios/quickstart.yaml --out runs/quickstart
	$(BIN)/hierfl plot runs/quickstart -o runs/quickstart/accuracy.png
	@echo "convergence plot: runs/quickstart/accuracy.png"

test: install
	$(BIN)/python -m pytest -q tests

bench: install
	$(BIN)/python analysis/bench/emulator_overhead.py

bench-scale: install
	$(BIN)/python analysis/bench/scale.py

# issue 18: every claim of analysis/claims/ (sweeps on Ray Tune), then analysis/results/claims.md
claims: install
	$(BIN)/python analysis/claims/run_all.py

clean:
	rm -rf $(VENV) runs .pytest_cache .hypothesis
