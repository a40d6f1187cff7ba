# `make demo` and `make test` create .venv and install teamflow on first use.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint format clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/teamflow demo

# The tests keep bytecode caches (`__pycache__/`, git-ignored) even where the environment
# sets PYTHONDONTWRITEBYTECODE (this machine's image does): without them each pytest process
# compiles the tests anew (about 5 s) and each process they start compiles teamflow anew.
test test-fast: export PYTHONDONTWRITEBYTECODE :=

# Everything, as CI runs it; the slowest 15 tests and the 15 modules that cost the most
# CPU are listed at the end. Four test processes: on this 2-core machine the same code took
# 12 min 21 s at three, 10 min 17-53 s at four and 11 min at five (docs/getting-started.md).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -n 4 --dist loadfile --no-loadscope-reorder --durations=15 --cpu-report=15

# The inner loop: everything but the slow end-to-end tests (marker `system`).
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest -n 3 --dist loadfile --no-loadscope-reorder -m "not system"

lint: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
