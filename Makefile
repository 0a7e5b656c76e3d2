# Two commands set up and run everything on a fresh machine:
#   make demo   -> virtual environment, then the default experiment (GPU if there is one, else CPU twin)
#   make test   -> virtual environment, then the test suite and an NVRTC compile of every kernel
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
EXTRAS ?= test,cuda13

.PHONY: venv demo test gpu-test compile sanitize mutants clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(PY) -m cuflash demo

test: venv
	$(PY) -m pytest -q
	$(PY) -m cuflash compile --arch sm_80 --fail-on-spills
	$(PY) -m cuflash compile --arch sm_90 --fail-on-spills

compile: venv
	$(PY) -m cuflash compile --arch sm_90

# On a GPU machine whose python3 already has cupy (no virtual environment needed):
gpu-test:
	$(PYTHON) -m pytest -q -m gpu tests

sanitize:
	$(PYTHON) tests/sanitize.py

# Curated mutations, each applied to a temporary copy; fails if a test suite lets one survive
# (GPU-only mutations: $(PY) tools/mutants.py --gpu on a GPU machine).
mutants: venv
	$(PY) tools/mutants.py

clean:
	rm -rf $(VENV) build *.egg-info
