# The task runner: setup, up, test, lint. Every target does its own set-up on a fresh machine
# that has only python3 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup up check test lint jstest fmt unit bench mutants lock clean

setup: $(STAMP)

$(STAMP): requirements.lock pyproject.toml services/portal/package-lock.json
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --require-hashes -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	@# The portal's browser tests: Debian's Chromium, and the pinned npm packages (package-lock.json).
	@# Only what is missing is asked for: a machine's own Node.js often carries npm and conflicts
	@# with Debian's npm package. Jobs in their images: Podman with runc (crun cannot run where
	@# cgroups are in hybrid mode). Host tasks in a sandbox: bubblewrap.
	@missing=""; command -v chromium >/dev/null || missing="chromium"; \
	  command -v npm >/dev/null || missing="$$missing npm"; \
	  command -v podman >/dev/null || missing="$$missing podman"; \
	  command -v runc >/dev/null || missing="$$missing runc"; \
	  command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	  [ -z "$$missing" ] || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; } || \
	  echo "$$missing could not be installed (needs root and apt-get); the browser and image tests will skip"
	@! command -v npm >/dev/null || npm ci --prefix services/portal --no-audit --no-fund --silent
	@touch $(STAMP)

# Tasks in the images they name where this machine has them (Podman or Docker found, the image
# here); a task whose image is not here runs on the host, sandboxed, and its log's first line
# says so (PAI_IMAGE_MISSING=host), so the examples run at once without a registry.
# PAI_IMAGE_MISSING=pull pulls instead; PAI_TASK_ENGINE=host keeps every task on the host.
up: setup
	PAI_TASK_ENGINE=$${PAI_TASK_ENGINE:-auto} PAI_IMAGE_MISSING=$${PAI_IMAGE_MISSING:-host} $(BIN)/pai up $(ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .
	$(BIN)/lint-imports
	@# The portal's JavaScript: ESLint and TypeScript's checker (services/portal/package.json).
	@if [ -x services/portal/node_modules/.bin/eslint ]; then npm --prefix services/portal run --silent lint; \
	  else echo "the portal's JavaScript checks skip: its npm packages are not installed (make setup, with npm)"; fi

# The portal's JavaScript: its pure functions under node's own test runner, where node exists.
jstest:
	@if command -v node >/dev/null; then node --test --test-reporter=spec tests/portal/js/*.test.mjs; \
	  else echo "node not found: the portal's JavaScript unit tests (tests/portal/js) skip"; fi

fmt: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

unit: setup
	$(BIN)/pytest $(ARGS)

# The edit-test loop, a minute or two on two cores: lint, types, import contracts and the tests
# that need no platform (no bus, database, service or browser): unit tests, every pure core's
# (tests/*/test_core*.py), the protocol, the failure rules, the scheduler, the import circles,
# and the portal's JavaScript unit tests (tests/portal/js, with node when it is installed).
# `make test` runs everything, and is what CI runs.
CHECK_TESTS := tests/unit tests/contracts tests/protocol tests/failures tests/scheduler \
	$(sort $(wildcard tests/*/test_core*.py)) tests/test_import_cycles.py

check: lint jstest
	$(BIN)/pytest $(CHECK_TESTS) $(ARGS)

# The whole suite on TEST_WORKERS processes (pytest-xdist), a test file at a time each: a file's
# tests keep their order and its module fixtures (one PostgreSQL database per REST module) while
# the other worker runs another file. TEST_WORKERS=0 runs everything in this one process.
TEST_WORKERS ?= 2

test: lint jstest
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile $(ARGS)

bench: setup
	$(BIN)/python -m bench $(ARGS)

# Mutation testing (not part of test): mutmut over the named modules with the tests that cover
# them, one line per module at the end (bench/mutants.py; no ARGS: the default set).
mutants: setup
	$(BIN)/python -m bench.mutants $(ARGS)

# Re-resolve the pinned dependency set after editing pyproject.toml.
lock:
	$(PYTHON) -m pip install --quiet --user uv 2>/dev/null || $(PYTHON) -m pip install --quiet uv
	$(PYTHON) -m uv pip compile pyproject.toml --extra dev --generate-hashes --python-version 3.11 \
	  --no-header -o requirements.lock

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
