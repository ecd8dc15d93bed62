# tally: `make demo` runs the whole pipeline locally, `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: install test demo adopt-demo bench synth deploy destroy

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# moto's server on a loopback port, the default workload, the stream runner, both query plans vs brute force.
demo: $(STAMP)
	$(BIN)/python scripts/local_pipeline.py $(DEMO_ARGS)

# Adoption on moto: a table with history, count-from, export, live stream, backfill, audit.
adopt-demo: $(STAMP)
	$(BIN)/python scripts/adopt_demo.py $(DEMO_ARGS)

# Cost and speed against the origin design, side by side; writes bench/results.json (not part of `make test`).
bench: $(STAMP)
	$(BIN)/python -m bench

# The CDK CLI pinned in package.json; `npm ci` installs exactly package-lock.json.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

CDK := npx --no-install cdk
CDK_FLAGS := --no-notices --no-version-reporting $(CDK_ARGS)

# Offline: needs neither AWS credentials nor a bootstrap stack.
synth: $(STAMP) node_modules/.package-lock.json
	$(CDK) synth $(CDK_FLAGS) --quiet

deploy: $(STAMP) node_modules/.package-lock.json
	$(CDK) deploy $(CDK_FLAGS)

# The events table is retained (README, "Tearing it down"); everything else is deleted.
destroy: $(STAMP) node_modules/.package-lock.json
	$(CDK) destroy $(CDK_FLAGS)
