# Two entry points that do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint schemas bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

# The install compiles relay run's output copier (hatch_build.py): again when its source changes.
BUILT := pyproject.toml hatch_build.py relay/session/native/copier.c

$(VENV)/.installed: $(BIN)/python $(BUILT)
	$(BIN)/python -m pip install -q -e '.[semantic]'
	touch $@

$(VENV)/.installed-test: $(BIN)/python $(BUILT)
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	@$(BIN)/python -m compileall -q relay
	@bash hooks-examples/demo.sh $(BIN)/relay

lint: $(VENV)/.installed-test
	$(BIN)/ruff check relay tests
	$(BIN)/mypy

# The suite mostly waits on real processes (hosts, PTYs, servers, a browser): three workers
# per core (six) keep both cores busy while others wait, and hold their share of the CPU
# beside other work (on two cores with a busy process beside: 7 min 40 s with six, 8 min
# 41 s with four; 2 workers left half the CPU idle); an idle worker takes tests queued for
# another (worksteal: 7 min 48 s, 8 min 43 s without). `pytest` alone runs it in one process.
# relay's own modules are compiled first, as a user's install has them: relay is installed
# editable and this machine (and CI) sets PYTHONDONTWRITEBYTECODE, so every relay process
# the suite starts would otherwise compile what it imports, each time.
test: lint
	$(BIN)/python -m compileall -q relay
	$(BIN)/python -m pytest -n 6 --dist worksteal --durations=25

schemas: $(VENV)/.installed
	$(BIN)/python -m relay.protocol.schema spec/schemas

bench: $(VENV)/.installed-test
	$(BIN)/python tests/perf/bench_engine.py
	$(BIN)/python tests/perf/bench_session.py
	$(BIN)/python tests/perf/bench_screen.py
	$(BIN)/python tests/perf/bench_memory.py
	$(BIN)/python tests/perf/bench_messaging.py
	$(BIN)/python tests/perf/bench_host.py
	$(BIN)/python tests/perf/bench_mcp.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
