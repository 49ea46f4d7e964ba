# The two commands a newcomer needs: `make demo` and `make test`. Everything else is set up by them.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test protos lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "make: $(PYTHON) not found; set PYTHON=/path/to/python3.11+"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# README command 1: the example pipeline on Beam's DirectRunner, its incidents replayed,
# then the replay TUI on the one that diverged. DEMO_HEADLESS=1 replays headless only.
demo: $(STAMP)
	$(BIN)/python scripts/demo.py

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py beam_agents/_protos

test: $(STAMP)
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check beam_agents replay_tui tests bench examples scripts
	$(BIN)/mypy beam_agents replay_tui examples scripts/demo.py

bench: $(STAMP)
	$(BIN)/python bench/trace_scan.py
	$(BIN)/python bench/pipeline_overhead.py
	$(BIN)/python bench/replay_cli.py
	$(BIN)/python bench/tui_open.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
