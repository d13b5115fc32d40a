# Two commands for a new machine: `make run` (the service) and `make test` (the suite). Both set up
# a virtual environment in .venv first, reinstalling when pyproject.toml changes.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
CONFIG ?=

.PHONY: install run test triage-example clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

run: $(STAMP)
	$(BIN)/vllm-headroom serve $(if $(CONFIG),--config $(CONFIG))

test: $(STAMP)
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
