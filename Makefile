# The two commands of the README. Both install everything first (idempotent:
# the install re-runs only when pyproject.toml or constraints.txt change).
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The real OpenID provider of the console login tests (npm oidc-provider, pinned by its lock file).
OIDC_STAMP := tests/oidc/node_modules/.installed
# The stock MCP hosts whose docs/mcp.md snippets the suite runs (npm claude-code and codex, pinned by their lock file).
HOSTS_STAMP := tests/hosts/node_modules/.installed

.PHONY: install browser serve test lint typecheck unit bench clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt sdk/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e '.[dev]' -e ./sdk
	touch $(STAMP)

$(OIDC_STAMP): tests/oidc/package.json tests/oidc/package-lock.json
	npm ci --prefix tests/oidc --no-audit --no-fund
	touch $(OIDC_STAMP)

$(HOSTS_STAMP): tests/hosts/package.json tests/hosts/package-lock.json
	npm ci --prefix tests/hosts --no-audit --no-fund
	touch $(HOSTS_STAMP)

# Debian's headless chromium and its driver, for the console's browser test (tests/e2e/test_console_browser.py).
browser:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		(apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium chromium-driver)

serve: install
	$(VENV)/bin/memesh serve

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

typecheck: install
	$(PY) -m mypy

# Two test processes (pytest-xdist), whole files each: the suite waits on servers starting more than it
# computes, and each process brings up its own session Ray when its first Ray test asks for it.
test: install $(OIDC_STAMP) $(HOSTS_STAMP) browser lint typecheck
	$(PY) -m pytest -n 2 --dist loadfile

unit: install
	$(PY) -m pytest -m "not ray and not e2e"

bench: install
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache tests/oidc/node_modules tests/hosts/node_modules
