# The two commands of the README: `make dashboard` and `make test`. Both set up what they need.
VENV  ?= .venv
PY    := $(VENV)/bin/python
# The pinned torch is the local CPU wheel on the project's machines; installing it first means no
# later requirement can pull a multi-GB CUDA build. Override on a GPU machine: make TORCH=torch
TORCH ?= torch==2.13.0
# make dashboard PORT=8600 ADDRESS=0.0.0.0 (an address beyond this machine makes a class server)
PORT    ?= 8501
ADDRESS ?= 127.0.0.1

.PHONY: setup browser dashboard test test-fast test-gpu lint

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -r requirements-dev.txt
	touch $@

# Debian's Chromium for the real-browser tests (Playwright's own browser download is not used).
# As root it is installed with apt-get; anyone else is told the one command to run.
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	  else \
	    echo "The browser tests need Debian's Chromium: run 'sudo apt-get install -y chromium chromium-driver'," >&2; \
	    echo "or run 'make test-fast', which leaves the browser tests out." >&2; exit 1; \
	  fi; }

dashboard: setup
	$(VENV)/bin/gptviz dashboard --port $(PORT) --address $(ADDRESS)

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# Every test: library, AppTest, the built wheel, and a real headless Chromium. Two workers, a test
# file each at a time (a browser module shares one server); JOBS=1 runs them in one process.
JOBS ?= 2
test: setup browser
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile

# The quick loop: no browser, no wheel build, no training or benchmark runs.
test-fast: setup
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile -m "not slow and not browser"

# The tests marked `gpu` (every path and page on CUDA in float32, bfloat16 and float16), on a machine with
# a CUDA GPU: `make setup TORCH=torch` installs a CUDA build of torch, then `make test-gpu`. Where torch
# already holds CUDA (PY=python3 on a machine set up otherwise), no venv is made. Only the modules that
# hold gpu tests are collected: such a machine need not have the browser or Ray the others import.
test-gpu: $(if $(filter $(VENV)/bin/python,$(PY)),setup)
	@$(PY) -c "import torch, sys; torch.cuda.is_available() or sys.exit('make test-gpu: torch sees no CUDA GPU here')"
	$(PY) -m pytest -q -p no:cacheprovider -m gpu $$(grep -l "mark.gpu" tests/test_*.py)
