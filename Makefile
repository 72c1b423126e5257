# Two commands on a fresh machine (each makes its own virtual environment):
#   make demo   - runs a real example end to end (a Lorenz ensemble on the backend auto chooses
#                 here, which it names; checked against numpy)
#   make test   - runs the test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python

.PHONY: demo test test-slow bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test,plot]'
	touch $@

demo: $(VENV)/.installed
	$(PY) examples/demo.py

# -n auto: one pytest worker per core; --dist loadfile keeps each file on one worker, so a
# module's fixtures (a compiled kernel, a benchmark run) are made once.
test: $(VENV)/.installed
	$(PY) -m pytest -q -n auto --dist loadfile

test-slow: $(VENV)/.installed
	$(PY) -m pytest -q -m slow

bench: $(VENV)/.installed
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
