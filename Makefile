# Two commands for a new machine: `make run` (the service) and `make test` (the suite). Both set up
# a virtual environment in .venv first, reinstalling when pyproject.toml changes, with the `test` and
# `report` extras (the daemon alone, as in deploy/Dockerfile, needs neither).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)
CONFIG ?=

SYSTEM_TOOLS := promtool prometheus prometheus-alertmanager amtool chromium victoria-metrics vmagent vmalert

.PHONY: install system-deps bench-deps run demo lint test fuzz bench bench-scale soak generate clean triage-score

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test,report]'
	@rm -f $(VENV)/.installed-* && touch $@

install: $(STAMP)

# The tests run the real Prometheus tools, VictoriaMetrics (victoria-metrics, vmagent, vmalert: the scale-out
# path) and Chromium (Debian's packages); installed here where missing.
system-deps:
	@missing=""; for t in $(SYSTEM_TOOLS); do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's prometheus, prometheus-alertmanager, victoria-metrics and chromium (missing:$$missing)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      prometheus prometheus-alertmanager victoria-metrics chromium >/dev/null; \
	  else \
	    echo "make test needs:$$missing -- run: sudo apt-get install prometheus prometheus-alertmanager victoria-metrics chromium" >&2; \
	    exit 1; \
	  fi; \
	fi

# With CONFIG, or a vLLM on 127.0.0.1:8000 (its /metrics has vllm: series or /version answers; anything else
# on the port does not count): the exporter. Otherwise the demo (simulated vLLM).
run: $(STAMP)
	@if [ -n "$(CONFIG)" ]; then exec $(BIN)/vllm-headroom serve --config "$(CONFIG)"; fi; \
	if $(BIN)/python -m exporter.probe http://127.0.0.1:8000; \
	then exec $(BIN)/vllm-headroom serve; \
	else echo "starting the demo with simulated vLLM servers (CONFIG=file.yaml for real ones)"; \
	  exec $(BIN)/vllm-headroom demo; fi

demo: $(STAMP)
	$(BIN)/vllm-headroom demo

# Lint (ruff, with the settings in pyproject.toml) and types (mypy on exporter/): any finding fails `make test`.
lint: $(STAMP)
	$(BIN)/ruff check exporter tests benchmarks
	$(BIN)/ruff format --check exporter tests benchmarks
	$(BIN)/mypy

test: $(STAMP) system-deps lint
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

# Benchmarks against the peers (mtail, wrk, node_exporter from Debian); writes docs/performance.md.
bench-deps:
	@for t in mtail wrk prometheus-node-exporter; do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    --no-install-recommends mtail wrk prometheus-node-exporter >/dev/null; \
	  else echo "make bench needs:$$missing -- sudo apt-get install mtail wrk prometheus-node-exporter" >&2; exit 1; fi; \
	fi

bench: $(STAMP) bench-deps
	$(BIN)/python -m benchmarks.run

# The fleet at scale: 64 simulated nodes -> vmagent -> VictoriaMetrics -> vmalert (and Prometheus beside it);
# writes benchmarks/scale_results.json, the figures behind docs/scale.md. Run it with 16 nodes too for the slope.
bench-scale: $(STAMP) system-deps
	$(BIN)/python -m benchmarks.scale --nodes 64

# The long property-test run: 25,000 inputs per property, 10^5 in all.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=long $(BIN)/python -m pytest -q --timeout=0 tests/test_fuzz.py

# Memory over a 10-minute soak with churning DP engines and rotating logs.
soak: $(STAMP)
	$(BIN)/python -m benchmarks.soak

# Triage on the real-log corpus (tests/fixtures/real): phase and stage accuracy per split.
triage-score: $(STAMP)
	$(BIN)/python -m tests.real_corpus

generate: $(STAMP)
	$(BIN)/vllm-headroom generate --out .

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache build *.egg-info
