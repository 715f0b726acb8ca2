# fold-inspector: `make test` sets up everything it needs and runs the whole suite.

SHELL := /bin/bash
.DELETE_ON_ERROR:
.DEFAULT_GOAL := setup

# The Pythons fold-inspector supports (pyproject.toml's requires-python), newest first: make takes the first
# that runs and fits, then python3 if it fits. A name on PATH is not enough: a pyenv shim is there for every
# version pyenv has, and fails when that version is not selected. PYTHON=/path/to/python overrides.
PYTHON_FITS := import sys; sys.exit(not (3, 10) <= sys.version_info[:2] < (3, 14))
PYTHON_CANDIDATES := python3.13 python3.12 python3.11 python3.10 python3
ifeq ($(origin PYTHON),undefined)
PYTHON := $(shell for py in $(PYTHON_CANDIDATES); do $$py -c '$(PYTHON_FITS)' >/dev/null 2>&1 && { echo $$py; break; }; done)
endif
# A second environment sits beside the first with its own VENV and LOCK, e.g. the oldest executorch on the
# newest Python, as CI checks it (.ci/run keeps that venv outside the clone, in a cache folder named by the
# lock's hash, so a machine builds it once):
#   make check VENV=.venv-oldest PYTHON=python3.13 LOCK=constraints/oldest-executorch.txt
VENV ?= .venv
# The lock (constraints/, written by `make lock`) the venv is installed with: every package at the version the
# docs' figures and the tests were measured with. Empty: constraints/pyX.Y.txt for the venv's Python X.Y if
# there is one; else the newest releases within pyproject.toml's ranges, with torch pinned (below).
LOCK ?=
# Extra pip options, e.g. PIP_ARGS='--extra-index-url https://download.pytorch.org/whl/cpu' for PyTorch's own
# CPU build of torch where pip would otherwise take PyPI's CUDA one (about 3.5 GB with its nvidia-* libraries).
PIP_ARGS ?=
# Without a lock torch is still pinned: the newest torch within the range could be a CUDA build, where this
# exact release has a CPU wheel on this machine's disk (a local version, 2.13.0+cpu, which ==2.13.0 takes first).
TORCH_PIN := torch==2.13.0
VENV_PYTHON := $(VENV)/bin/python
STAMP := $(VENV)/.installed

# jupyter lab exits at once as root without --allow-root.
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root,)

PYTEST_ARGS ?=
# The suite runs on every core (pytest-xdist), one test file per worker at a time so a
# file's module fixtures (a JupyterLab server, a shared analysis) are built once; each
# notebook is a group of its own (tests/conftest.py), so the notebooks spread over the cores.
TEST_WORKERS ?= auto

.PHONY: setup setup-browser demo lab lint test check bench fuzz pictures screenshot lock clean

# The venv is rebuilt only when pyproject.toml or a lock changes; the stamp is a copy of the lock it was
# installed with (tests/test_environment_pins.py checks the venv against it), or says it has none.
# pip must only ever install into the venv, never into $(PYTHON)'s own site-packages.
# pip would byte-compile the stack's ~22,000 modules one by one (about a minute); compileall does it on
# every core (about 30 s on 2). Compiled here, not left to first use: with PYTHONDONTWRITEBYTECODE set (as
# in some CI images) every process would compile everything it imports again. A module that does not
# compile (a test fixture inside a package) is skipped, as pip skips it, and so are the SyntaxWarnings of
# other packages' tests that Python 3.12 and later print while compiling.
$(STAMP): pyproject.toml $(wildcard constraints/*.txt)
	@[ -n "$(PYTHON)" ] || { found=; for py in $(PYTHON_CANDIDATES); do \
		found="$$found $$py $$($$py -c 'import sys; print(sys.version.split()[0])' 2>/dev/null || echo none),"; done; \
		echo "fold-inspector needs Python 3.10 to 3.13; found:$${found%,}. Install one, or run: make PYTHON=/path/to/python3.X" >&2; exit 1; }
	@$(PYTHON) -c '$(PYTHON_FITS)' 2>/dev/null || \
		{ echo "fold-inspector needs Python 3.10 to 3.13; '$(PYTHON)' is $$($(PYTHON) --version 2>&1 | head -n 1). Run: make PYTHON=/path/to/python3.X" >&2; exit 1; }
	@[ -z "$(LOCK)" ] || [ -f "$(LOCK)" ] || { echo "LOCK=$(LOCK): no such file; the locks are in constraints/" >&2; exit 1; }
	@[ ! -f $(VENV)/pyvenv.cfg ] || $(VENV_PYTHON) -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' || \
		{ echo "$(VENV) is not a virtual environment; remove it and run make again" >&2; exit 1; }
	@py='$(VENV_PYTHON)'; [ -f $(VENV)/pyvenv.cfg ] || py='$(PYTHON)'; \
	python=$$($$py -c 'import sys; print("%d.%d" % sys.version_info[:2])'); \
	full=$$($$py -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])'); \
	lock='$(LOCK)'; [ -n "$$lock" ] || lock=constraints/py$$python.txt; \
	if [ -f "$$lock" ]; then \
		wants=$$(sed -n 's/^# python: *//p' "$$lock"); \
		[ "$$wants" = "$$python" ] || { echo "$$lock is the lock for Python $$wants; $$py is Python $$full. Run: make VENV=.venv-$$python LOCK=... PYTHON=/path/to/python$$wants" >&2; exit 1; }; \
		least=$$(sed -n 's/^# python-min: *\([0-9.]*\).*/\1/p' "$$lock"); \
		[ -z "$$least" ] || $$py -c "import sys; sys.exit(sys.version_info[:3] < ($${least//./,}))" || \
			{ echo "$$lock needs Python $$least or later ($$(sed -n 's/^# python-min: *[0-9.]* *(\(.*\))$$/\1/p' "$$lock")); $$py is $$full. Run: make PYTHON=/path/to/a/later/python$$python" >&2; exit 1; }; \
		echo "== $(VENV): Python $$full, the locked set $$lock"; \
	else \
		echo "== $(VENV): Python $$python has no lock in constraints/: the newest releases within pyproject.toml's ranges, $(TORCH_PIN) (the docs' figures were measured with constraints/py3.11.txt)"; \
	fi; \
	test -f $(VENV)/pyvenv.cfg || { echo "+ $(PYTHON) -m venv $(VENV)"; $(PYTHON) -m venv $(VENV); } || exit 1; \
	set -x; \
	$(VENV_PYTHON) -m pip install --quiet --upgrade pip && \
	if [ -f "$$lock" ]; then \
		$(VENV_PYTHON) -m pip install --no-compile $(PIP_ARGS) -c "$$lock" -e '.[test,explorer,ray,timm]' && cp "$$lock" $@.new; \
	else \
		$(VENV_PYTHON) -m pip install --no-compile $(PIP_ARGS) '$(TORCH_PIN)' -e '.[test,explorer,ray,timm]' && echo "# no lock" > $@.new; \
	fi
	$(VENV_PYTHON) -m compileall -q -j 0 "$$($(VENV_PYTHON) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null 2>&1 || true
	mv $@.new $@

setup: $(STAMP)
	@bash scripts/ensure_system_deps.sh dot

setup-browser: setup
	@bash scripts/ensure_system_deps.sh chromium

demo: setup
	$(VENV_PYTHON) -m inspector demo --html demo-report.html

lab: setup
	$(VENV)/bin/jupyter lab $(ALLOW_ROOT) notebooks/01_quickstart.ipynb

# The linter (pyproject.toml's [tool.ruff]) over the whole tree, in about a second: `make test` and `make check`
# run it first, so CI fails on a finding before the suite starts.
lint: setup
	@$(VENV_PYTHON) -m ruff check --quiet . || { echo "ruff check found the findings above: fix each, or end its line with '# noqa: CODE - why'" >&2; exit 1; }

test: setup-browser lint
	@$(VENV_PYTHON) -m compileall -q -j 0 inspector widgets sample_models tests >/dev/null || true  # the suite's hundreds of processes read these
	$(VENV_PYTHON) -m pytest -n $(TEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The quick loop while editing: every test that needs no Arm lowering, TOSA run, browser, Ray cluster, fuzzing,
# soak or killed worker (the notebooks run the whole flow, so they are left to `make test`).
# `make test` is still the one command that runs everything, and what CI runs.
CHECK_MARKERS := not requires_tosa and not browser and not slow and not soak and not requires_ray and not crash and not fuzz
check: setup lint
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

# Write the lock of the venv's Python from what is installed in the venv (constraints/freeze.py), after a
# deliberate upgrade: e.g. make lock LOCK=constraints/py3.11.txt once the new set passes `make test`.
lock: $(STAMP)
	@lock='$(LOCK)'; [ -n "$$lock" ] || lock=constraints/py$$($(VENV_PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])').txt; \
	$(VENV_PYTHON) constraints/freeze.py > "$$lock.new" && mv "$$lock.new" "$$lock" && cp "$$lock" $(STAMP) && echo "wrote $$lock"

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts build demo-report.html *.egg-info
	find . -path ./.git -prune -o \( -name __pycache__ -o -name .ipynb_checkpoints \) -type d -prune -exec rm -rf {} +
