# The two commands a newcomer needs: `make demo` and `make test`. Everything else is set up by them.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install peers demo test fuzz protos lint bench clean

# "major.minor" of a Python, empty if it does not run.
py_version = $(shell $(1) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
WANT_PY := $(call py_version,$(PYTHON))
HAVE_PY := $(if $(wildcard $(BIN)/python),$(or $(call py_version,$(BIN)/python),broken))

# A .venv made by another Python (an older one, or one since removed, so that its
# python no longer runs) is rebuilt with $(PYTHON) instead of failing the same way forever.
ifneq ($(HAVE_PY),)
ifneq ($(WANT_PY),)
ifneq ($(HAVE_PY),$(WANT_PY))
$(info make: $(VENV) was built with Python $(HAVE_PY), not $(PYTHON) ($(WANT_PY)): rebuilding it)
$(shell rm -rf $(VENV))
endif
endif
endif

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -n "$(WANT_PY)" || { echo "make: $(PYTHON) not found; set PYTHON=/path/to/python3.11+"; exit 2; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "make: $(PYTHON) is Python $(WANT_PY); beam-agents needs 3.11 or newer: set PYTHON=/path/to/python3.11+ (then make clean if make still fails)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[all]' --group dev
	touch $(STAMP)

# README command 1: the example pipeline on Beam's DirectRunner, its incidents replayed,
# then the replay TUI on the one that diverged. DEMO_HEADLESS=1 replays headless only.
demo: $(STAMP)
	$(BIN)/python scripts/demo.py

protos: $(STAMP)
	$(BIN)/python scripts/gen_protos.py beam_agents/_protos

# The test peers that are built rather than started (each its own venv under .peers/; a
# no-op once built): built before the suite, so a slow build on a loaded machine is not cut
# short by the suite's per-test timeout.
peers: $(STAMP)
	$(BIN)/python scripts/peers/bigquery_emulator.py ensure --root .peers/bigquery >/dev/null
	$(BIN)/python scripts/peers/phoenix.py ensure --root .peers/phoenix >/dev/null

test: peers
	$(BIN)/python -m pytest -q

# A long run of the replay property (tests/replay/test_replay_property.py): random agent programs
# through a real RunAgent pipeline, every traced activation replayed. FUZZ_EXAMPLES sets its size.
# Then atheris on every input loader and the CLI (fuzz/run.py): FUZZ_RUNS mutations per target,
# each run under 10 s and 500 MB RSS or it is a finding (saved under fuzz/findings/).
FUZZ_EXAMPLES ?= 200
FUZZ_RUNS ?= 100000
fuzz: $(STAMP)
	BEAM_AGENTS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider \
		tests/replay/test_replay_property.py
	$(BIN)/python fuzz/run.py --runs $(FUZZ_RUNS)

lint: $(STAMP)
	$(BIN)/ruff check beam_agents replay_tui tests bench examples scripts fuzz
	$(BIN)/mypy beam_agents replay_tui examples scripts/demo.py fuzz/targets.py

bench: $(STAMP)
	$(BIN)/python bench/trace_scan.py
	$(BIN)/python bench/pipeline_overhead.py
	$(BIN)/python bench/replay_cli.py
	$(BIN)/python bench/tui_open.py
	$(BIN)/python bench/tui_open.py --cli
	$(BIN)/python bench/ls_scan.py
	$(BIN)/python bench/bulk_replay.py
	$(BIN)/python bench/ecosystem.py
	$(BIN)/python bench/reference_run.py
	$(BIN)/python bench/bisect_revisions.py
	$(BIN)/python bench/doctor.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
