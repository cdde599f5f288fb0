# The two commands of the README: `make dashboard` and `make test`. Both set up what they need.
VENV  ?= .venv
PY    := $(VENV)/bin/python
# The pinned torch is the local CPU wheel on the project's machines; installing it first means no
# later requirement can pull a multi-GB CUDA build. Override on a GPU machine: make TORCH=torch
TORCH ?= torch==2.13.0

.PHONY: setup browser dashboard test

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-dev.txt pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -r requirements-dev.txt -e .
	touch $@

# Debian's Chromium for the real-browser tests (Playwright's own browser download is not used).
browser:
	@command -v chromium >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; }

dashboard: setup
	$(VENV)/bin/streamlit run app.py

test: setup browser
	$(PY) -m pytest -q
