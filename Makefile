# Two entry points for a fresh machine (see README): `make demo` and `make test`.
# Both create .venv and install the package (editable, with test extras) on first use.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test venv clean
demo: $(STAMP)
	$(VENV)/bin/python -m imagesets.cli.demo

# Two workers, each taking whole test files (files share servers and built data dirs).
TEST_WORKERS ?= 2
test: $(STAMP)
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info
