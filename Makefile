# fold-inspector: `make test` sets up everything it needs and runs the whole suite.

SHELL := /bin/bash
.DELETE_ON_ERROR:
.DEFAULT_GOAL := setup

# Python 3.11 is required (tosa-tools and the pinned torch wheel); fall back to
# python3 when python3.11 is not on PATH (the version check below catches a wrong one).
PYTHON ?= $(shell command -v python3.11 >/dev/null 2>&1 && echo python3.11 || echo python3)
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# jupyter lab exits at once as root without --allow-root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

PYTEST_ARGS ?=
# The suite runs on every core (pytest-xdist), one test file per worker at a time so a
# file's module fixtures (a JupyterLab server, a shared analysis) are built once; each
# notebook is a group of its own (tests/conftest.py), so the notebooks spread over the cores.
TEST_WORKERS ?= auto

.PHONY: setup setup-browser demo lab test check bench fuzz pictures screenshot clean

# The venv is rebuilt only when pyproject.toml changes. Every dependency is an
# exact pin (torch==2.13.0), so pip takes the CPU wheel and never an unpinned torch.
# pip must only ever install into the venv, never into $(PYTHON)'s own site-packages.
# pip would byte-compile the stack's ~22,000 modules one by one (about a minute); compileall does it on
# every core (about 30 s on 2). Compiled here, not left to first use: with PYTHONDONTWRITEBYTECODE set (as
# in some CI images) every process would compile everything it imports again. A module that does not
# compile (a test fixture inside a package) is skipped, as pip skips it.
$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || \
		{ echo "fold-inspector needs Python 3.11; '$(PYTHON)' is $$($(PYTHON) --version 2>&1). Run: make PYTHON=/path/to/python3.11" >&2; exit 1; }
	test -f $(VENV)/pyvenv.cfg || $(PYTHON) -m venv $(VENV)
	@$(VENV_PYTHON) -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' || \
		{ echo "$(VENV) is not a virtual environment; remove it and run make again" >&2; exit 1; }
	$(VENV_PYTHON) -m pip install --quiet --upgrade pip
	$(VENV_PYTHON) -m pip install --no-compile -e '.[test,explorer,ray,timm]'
	$(VENV_PYTHON) -m compileall -q -j 0 "$$($(VENV_PYTHON) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null || true
	touch $@

setup: $(STAMP)
	@bash scripts/ensure_system_deps.sh dot

setup-browser: setup
	@bash scripts/ensure_system_deps.sh chromium

demo: setup
	$(VENV_PYTHON) -m inspector demo --html demo-report.html

lab: setup
	$(VENV)/bin/jupyter lab $(ALLOW_ROOT) notebooks/01_quickstart.ipynb

test: setup-browser
	@$(VENV_PYTHON) -m compileall -q -j 0 inspector widgets sample_models tests >/dev/null || true  # the suite's hundreds of processes read these
	$(VENV_PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The quick loop while editing: every test that needs no Arm lowering, TOSA run, browser, Ray cluster, fuzzing,
# soak or killed worker (the notebooks run the whole flow, so they are left to `make test`).
# `make test` is still the one command that runs everything, and what CI runs.
CHECK_MARKERS := not requires_tosa and not browser and not slow and not soak and not requires_ray and not crash and not fuzz
check: setup
	$(VENV_PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadgroup -m "$(CHECK_MARKERS)" --ignore=tests/test_notebooks.py $(PYTEST_ARGS)

bench: setup
	@set -e; found=0; \
	for script in bench/bench_*.py; do \
		[ -e "$$script" ] || continue; \
		found=1; \
		echo "== $$script"; \
		$(VENV_PYTHON) "$$script"; \
	done; \
	[ "$$found" -eq 1 ] || echo "no bench/bench_*.py scripts found"

# A fuzzing campaign of the readers of untrusted input (.pt2 archives, sessions, CLI numbers, store entries) with
# a random seed, until Ctrl-C: FUZZ_SECONDS=N bounds it, FUZZ_SEED=N replays one, FUZZ_KINDS=pt2,store
# picks readers. Failing inputs are saved in tests/fuzz_corpus/, which tests/test_fuzz.py replays.
fuzz: $(STAMP)
	$(VENV_PYTHON) scripts/fuzz.py

# The README's pictures, drawn by the real tool (numbers measured on this machine).
pictures: setup
	$(VENV_PYTHON) scripts/docs_pictures.py

# The README's screenshot of the inspector in JupyterLab, taken by the real-browser test.
screenshot: setup-browser
	README_SCREENSHOT=docs/inspector-in-jupyterlab.png $(VENV_PYTHON) -m pytest -q tests/test_browser.py -k quickstart

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts build demo-report.html *.egg-info
	find . -path ./.git -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -prune -exec rm -rf {} +
