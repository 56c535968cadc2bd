# Two entry points, each doing all of its own set-up on a fresh clone (Python 3.11 + root):
#   make demo   venv + the base package + Graphviz, regenerate graphs/, run the offline group chat live (messages whole: bids are decided whole), then an offline round robin whose replies stream (simulated typing)
#   make test   venv + install + Graphviz + Chromium + PostgreSQL, then the whole test suite (python -m pytest on
#               TEST_WORKERS processes, 2 by default: pytest-xdist, each test file in one worker)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.fsmchat-installed
# the demo needs only what an offline chat imports: its own stamp, so `make demo` on a fresh clone
# installs the base package's dependencies except litellm and tiktoken (an offline run imports
# neither; pip installing them is 10-15 s of the demo's ~20; tiktoken reads litellm's copy of its
# encoding) and none of the extras;
# `make install` and `make test` install everything, litellm included, with or without this stamp
# (their pip run upgrades the same editable install in place). In the demo's venv alone, a call that
# needs litellm fails saying it is not installed and how to install it.
DEMO_STAMP := $(VENV)/.fsmchat-demo-installed
DEMO_REQUIREMENTS := import tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
	print('\n'.join(d for d in deps if not d.startswith(('litellm', 'tiktoken'))))
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test install demo-install bytecode graphviz chromium postgresql graphs docs layers bench bench-compare bench-selector bench-evals clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev,ray,ui]"
	touch $(STAMP)

install: $(STAMP)

$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	[ -f $(STAMP) ] || { $(BIN)/python -c "$(DEMO_REQUIREMENTS)" > $(VENV)/demo-requirements.txt && \
	  $(BIN)/python -m pip install -q --no-compile -r $(VENV)/demo-requirements.txt && \
	  $(BIN)/python -m pip install -q --no-compile --no-deps -e .; }
	touch $(DEMO_STAMP)

demo-install: $(DEMO_STAMP)

# fsmchat's own modules compiled once (0.3 s; a no-op when current), so no process compiles them again where
# PYTHONDONTWRITEBYTECODE is set: compiling them is 90-100 ms of every `fsmchat` process's start otherwise
bytecode:
	$(BIN)/python -m compileall -q -j 0 fsmchat examples

graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  echo "installing Graphviz (dot) with apt-get"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz >/dev/null; }

# headless Chromium and its WebDriver, for the run viewer's browser tests (tests/ui/test_ui_browser.py); when they
# cannot be installed those tests are skipped, saying why
chromium:
	@{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || { \
	  echo "installing Chromium and chromium-driver with apt-get"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver \
	    >/dev/null || echo "could not install Chromium: the browser tests will be skipped"; }

# Debian's PostgreSQL server, for the PostgresCheckpointer tests (tests/support/pg.py starts a throwaway cluster with its
# initdb and pg_ctl); when it cannot be installed those tests are skipped, saying why
postgresql:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  echo "installing PostgreSQL with apt-get"; \
	  $(SUDO) apt-get update -qq && $(SUDO) DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql \
	    >/dev/null || echo "could not install PostgreSQL: the PostgreSQL store tests will be skipped"; }

# the gallery is named in pyproject.toml ([tool.fsmchat.graphs]: built-ins + examples/*.py with build())
graphs: install graphviz
	$(BIN)/fsmchat graphs --prune

demo: demo-install graphviz bytecode
	$(BIN)/fsmchat graphs
	$(BIN)/fsmchat run examples/group_chat.py
	FSMCHAT_OFFLINE_TYPING=0.02 $(BIN)/fsmchat run examples/round_robin.py

# two workers on the 2-core CI machine: 205-280 s for the suite on a fresh clone (2,509 tests; 320-670 s when the
# machine is loaded), most of it subprocesses; tests/conftest.py keeps a file's tests, and all Ray tests, in one worker
TEST_WORKERS ?= 2
test: install graphviz chromium postgresql bytecode
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup

# the documentation site (mkdocs.yml: README, docs/*.md, the API reference) into site/, strict as in the tests
docs: install
	$(BIN)/mkdocs build --strict

# redraw docs/diagrams/layers.* from the layer contract in pyproject.toml and today's imports
layers: install graphviz
	$(BIN)/python docs/layers.py

bench: install
	$(BIN)/python bench/engine_overhead.py

# model-backed GroupChats against swarms, LangGraph and a raw aiohttp floor (bench/compare.py): the other
# libraries live in their own venv, built here from pinned versions, never in fsmchat's dependencies
COMPARE_VENV ?= .venv-compare
$(COMPARE_VENV)/.installed: bench/requirements-compare.txt
	$(PYTHON) -m venv $(COMPARE_VENV)
	$(COMPARE_VENV)/bin/python -m pip install -q -r bench/requirements-compare.txt
	touch $@

bench-compare: install $(COMPARE_VENV)/.installed
	$(BIN)/python bench/compare.py --write --venv $(COMPARE_VENV)

# selector and handoff turns against AutoGen's SelectorGroupChat and Swarm and langgraph-swarm, and the raw aiohttp
# floors (bench/selector_turn.py): the other libraries in a venv of their own, from pinned versions, as above
SELECTOR_VENV ?= .venv-selector
$(SELECTOR_VENV)/.installed: bench/requirements-selector.txt
	$(PYTHON) -m venv $(SELECTOR_VENV)
	$(SELECTOR_VENV)/bin/python -m pip install -q -r bench/requirements-selector.txt
	touch $@

bench-selector: install $(SELECTOR_VENV)/.installed
	$(BIN)/python bench/selector_turn.py --write --venv $(SELECTOR_VENV)

# an eval of 200 cases: fsmchat's Eval against pydantic-evals alone driving the same calls with a plain aiohttp client,
# inspect-ai and a raw aiohttp floor (bench/evals_cpu.py): inspect-ai in a venv of its own, from pinned versions, as above
EVALS_VENV ?= .venv-evals
$(EVALS_VENV)/.installed: bench/requirements-evals.txt
	$(PYTHON) -m venv $(EVALS_VENV)
	$(EVALS_VENV)/bin/python -m pip install -q -r bench/requirements-evals.txt
	touch $@

bench-evals: install $(EVALS_VENV)/.installed
	$(BIN)/python bench/evals_cpu.py --write --venv $(EVALS_VENV)

clean:
	rm -rf $(VENV) .venv-compare .venv-selector .venv-evals build site *.egg-info
