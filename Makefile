# Two commands do everything on a fresh machine: `make run` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed

.PHONY: install native run test bench bench-scale claims clean

# the event path compiled with Cython (hierfl/_native.py): rebuilt when one of its sources changes;
# without Cython or a C compiler the run uses the same modules as Python (identical results, slower)
NATIVE_SRC := hierfl/_native.py $(addprefix hierfl/,core/aggregate.py core/dynamics.py core/engine.py core/network.py \
              core/timeseries.py driver/context.py driver/loop.py driver/transfers.py output/bounded.py \
              output/telemetry.py output/trace.py runtime/executor.py)
NATIVE  := hierfl/_native/manifest.json

install: $(STAMP) $(NATIVE)

# torch is pinned and installed first: the local CPU wheel for exactly 2.13.0 is found here;
# any looser spec would pull the CUDA build with gigabytes of extra packages.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[test,native]"
	touch $(STAMP)

$(NATIVE): $(STAMP) $(NATIVE_SRC)
	$(BIN)/hierfl native build -q || echo "hierfl: the event path stays pure Python (same results)"

native: $(STAMP)
	$(BIN)/hierfl native build

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
	rm -rf $(VENV) runs .pytest_cache .hypothesis hierfl/_native
