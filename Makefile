# Two commands for a fresh machine with Python 3.11+:  make dev  |  make test
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: dev test lint typecheck bench clean install

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## Run the whole system (API + every workload) on the embedded PostgreSQL.
dev: $(STAMP)
	$(BIN)/reminders dev $(ARGS)

## Run the test suite against real PostgreSQL (DATABASE_URL, else an embedded server).
test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python bench/claim_throughput.py
	$(BIN)/python bench/next_occurrence.py
	PYTHONPATH=. $(BIN)/python bench/end_to_end.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info
