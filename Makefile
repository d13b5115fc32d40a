# Two commands for a new machine: `make run` (the service) and `make test` (the suite). Both set up
# a virtual environment in .venv first, reinstalling when pyproject.toml changes.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
CONFIG ?=

SYSTEM_TOOLS := promtool prometheus prometheus-alertmanager

.PHONY: install system-deps run test generate clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# The tests run the real Prometheus tools (Debian's packages); installed here where missing.
system-deps:
	@missing=""; for t in $(SYSTEM_TOOLS); do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's prometheus and prometheus-alertmanager (missing:$$missing)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      prometheus prometheus-alertmanager >/dev/null; \
	  else \
	    echo "make test needs:$$missing -- run: sudo apt-get install prometheus prometheus-alertmanager" >&2; exit 1; \
	  fi; \
	fi

run: $(STAMP)
	$(BIN)/vllm-headroom serve $(if $(CONFIG),--config $(CONFIG))

test: $(STAMP) system-deps
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

generate: $(STAMP)
	$(BIN)/vllm-headroom generate --out .

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build *.egg-info
