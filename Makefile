# The two commands a newcomer needs: `make demo` and `make test`. Everything else is set up by them.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test protos lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found; set PYTHON=/path/to/python3.11+"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py beam_agents/_protos

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check beam_agents replay_tui tests bench
	$(BIN)/mypy beam_agents replay_tui

bench: $(STAMP)
	$(BIN)/python bench/trace_scan.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
