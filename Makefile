# Two commands for a fresh machine with Python 3.11+:  make dev  |  make test
PYTHON ?= python3
VENV   ?= .venv
# Test processes (pytest-xdist), each on its own copy of the migrated database. The suite
# waits on real processes and servers much of the time: 4 on 2 cores beats 2 and 3.
TEST_WORKERS ?= 4
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: dev test lint typecheck bench clean install

# uv (a PyPI package) resolves and installs the same set as pip in a fraction of the time
# (issue 15: 13 s against 35 s with pip here, warm caches); pip only installs uv, and
# installs everything itself when uv cannot (no wheel of uv for the platform, say).
# --compile-bytecode as pip does: without the .pyc files every test process compiled its
# imports again (the suite took 2.5 min more CPU).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	( $(BIN)/python -m pip install --quiet uv && \
	  $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e '.[dev]' ) || \
	  { echo "uv failed: installing with pip instead" >&2; $(BIN)/python -m pip install --quiet -e '.[dev]'; }
	touch $(STAMP)

install: $(STAMP)

## Run the whole system (API + every workload) on the embedded PostgreSQL.
dev: $(STAMP)
	$(BIN)/reminders dev $(ARGS)

## Run the test suite against real PostgreSQL (DATABASE_URL, else an embedded server),
## TEST_WORKERS processes in parallel (TEST_WORKERS=0: one process).
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

## Every benchmark, then one table of their figures against issue 15's targets.
BENCH_OUT ?= .bench
bench: $(STAMP)
	mkdir -p $(BENCH_OUT)
	PYTHONPATH=. $(BIN)/python bench/claim_throughput.py
	$(BIN)/python bench/next_occurrence.py
	PYTHONPATH=. $(BIN)/python bench/end_to_end.py --json $(BENCH_OUT)/end_to_end.json
	PYTHONPATH=. $(BIN)/python bench/mutations.py
	PYTHONPATH=. $(BIN)/python bench/api_load.py --repeat 2 --json $(BENCH_OUT)/api_load.json
	PYTHONPATH=. $(BIN)/python bench/statement_cost.py
	PYTHONPATH=. $(BIN)/python bench/app_cpu.py
	PYTHONPATH=. $(BIN)/python bench/latency.py --json $(BENCH_OUT)/latency.json
	bash bench/first_run.sh
	$(BIN)/python bench/summary.py $(BENCH_OUT)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
