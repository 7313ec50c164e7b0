# One entry point for newcomers and CI. `make test` sets everything up from a fresh machine
# (virtualenv, Docker engine, local images) and runs lint, pytest and the Molecule scenarios.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3.11
VENV := $(CURDIR)/.venv
export PATH := $(VENV)/bin:$(PATH)
export ANSIBLE_ROLES_PATH := $(CURDIR)/roles
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PIP_DISABLE_PIP_VERSION_CHECK := 1
SCENARIOS ?= default deploy driver

.PHONY: setup venv engine images lint pytest molecule test demo demo-clean

setup: venv engine images

venv: $(VENV)/.installed
$(VENV)/.installed: requirements-dev.txt requirements-test.txt
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -r requirements-dev.txt -r requirements-test.txt
	touch $@

engine:
	./scripts/docker-engine.sh

images: engine
	./scripts/build-images.sh

lint: venv
	ruff check .
	yamllint -s .
	ansible-lint --profile production

pytest: venv images
	pytest

molecule: venv images
	./scripts/molecule-timed.sh $(SCENARIOS)

test: setup lint pytest molecule

# The main job on a simulated rig: provision + deploy + health, then the report.
demo: setup
	./scripts/sim-rig.sh up
	ansible-playbook site.yml -l sim
	@echo "== health report (reports/vdf-sim-rig.json)"
	@python3 -m json.tool reports/vdf-sim-rig.json

demo-clean:
	./scripts/sim-rig.sh down
