# One entry point for newcomers and CI. `make test` sets everything up from a fresh machine
# (virtualenv, Docker engine, local images) and runs lint, pytest and the Molecule scenarios.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
# The newest Python on this host that the pinned tools support (ansible-core 2.19: 3.11 to 3.13).
SUPPORTED_PYTHONS := python3.13 python3.12 python3.11
PYTHON ?= $(firstword $(foreach p,$(SUPPORTED_PYTHONS),$(shell $(p) -c 'import venv' >/dev/null 2>&1 && echo $(p))))
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_ROLES_PATH := $(CURDIR)/roles
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PIP_DISABLE_PIP_VERSION_CHECK := 1
SCENARIOS ?= deploy fleet existing driver

.PHONY: setup system venv bytecode engine engine-stop images host-packages lint docs pytest molecule test demo demo-clean upstream-watch

setup: venv system

# What the machine needs besides the virtualenv (make test builds the two at once).
system: engine images host-packages

venv: $(VENV)/.installed
$(VENV)/.installed: requirements-dev.txt requirements-test.txt
	@test -n "$(PYTHON)" || { echo "make: no supported Python here: install one of $(SUPPORTED_PYTHONS) (with its venv module), or set PYTHON=" >&2; exit 1; }
	@echo "== virtualenv: $(VENV) with $$($(PYTHON) --version) (pinned tools and CPU torch; a few minutes the first time)"
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --progress-bar off -r requirements-dev.txt -r requirements-test.txt \
	  | { grep --line-buffered -E '^(Collecting|Successfully installed)' || true; } | sed -u -E 's/^/  pip: /; s/^(.{120}).+/\1/'
	touch $@

# The project's own Ansible plugins (the role's filters, the strategy, the test callbacks), compiled
# once. Ansible loads them anew in the worker it forks for each task; where the environment sets
# PYTHONDONTWRITEBYTECODE (this machine does), Python never caches them and compiled all eight
# filter files (25 ms) in each of the 61 workers of an unchanged deploy.yml: about a tenth of its
# controller CPU (bench/results/plugin-bytecode.json). A stale file is read from source instead.
# The filters import the role's domain library (module_utils), so it is compiled with them.
PLUGIN_DIRS := roles/vllm_dual_fast/filter_plugins roles/vllm_dual_fast/module_utils plugins molecule/shared
bytecode: venv
	$(VENV)/bin/python -m compileall -q $(PLUGIN_DIRS) >/dev/null

engine:
	./scripts/docker-engine.sh

# Stops the dockerd that `make engine` started (an engine it found running is left alone);
# images, volumes and caches stay, and `make engine` starts it again.
engine-stop:
	./scripts/docker-engine.sh stop

images: engine
	./scripts/build-images.sh

# Debian packages the tests run for real (nginx for the LAN proxy tests).
host-packages:
	./scripts/host-packages.sh

lint: venv
	ruff check .
	yamllint -s .
	ansible-lint --profile production
	python3 scripts/shellcheck.py

# The variable reference, docs/variables.md, from the roles' argument specs (pytest checks it).
docs: venv
	python3 scripts/variables-doc.py

# Two workers, each taking whole test files (a file's fixtures stay in one process): about 7
# minutes here instead of 11.
PYTEST_WORKERS ?= 2
pytest: venv bytecode images host-packages
	python tests/flashinfer_releases.py
	pytest -n $(PYTEST_WORKERS) --dist loadfile

molecule: venv bytecode images
	./scripts/molecule-timed.sh $(SCENARIOS)

# Setup, lint, pytest and Molecule, ending with a summary (scripts/test-all.sh).
test:
	./scripts/test-all.sh $(SCENARIOS)

# The main job on a simulated rig: provision + deploy + health, then the report.
demo: setup bytecode
	./scripts/sim-rig.sh up
	ansible-playbook site.yml -l sim
	@echo "== verdict (the whole report: reports/vdf-sim-rig.json)"
	@python3 scripts/rig-summary.py reports/vdf-sim-rig.json

demo-clean:
	./scripts/sim-rig.sh down

# Before moving a fleet's image: what the flashinfer-python and vllm releases on the package index
# that the patch registry has not checked mean for the patch (docs/operations.md, "Upstream watch").
# WATCH_ARGS: --json, --record, --from vllm=0.27.1. Exit 0 nothing new, 3 patch still needed,
# 4 drop_when met, 2 the patcher or flags check must learn first, 1 could not run.
upstream-watch: venv
	python scripts/upstream_watch.py $(WATCH_ARGS)
