#!/usr/bin/env python3
"""A Molecule scenario's configuration as Molecule reads it: the project's base
(.config/molecule/config.yml) with the scenario's molecule.yml merged over it by Molecule's own
merge (molecule.util.merge_dicts: dictionaries key by key, everything else, lists included,
replaced). Run with the virtualenv's python3, as molecule-timed.sh (which runs molecule) is.

    scripts/molecule_config.py SCENARIO phases       the test_sequence up to verify, less dependency
    scripts/molecule_config.py SCENARIO idempotence  VDF_IDEMPOTENCE_STRATEGY of its provisioner env
"""
import sys
from pathlib import Path

import yaml
from molecule.util import merge_dicts

ROOT = Path(__file__).resolve().parents[1]
BASE = Path(".config/molecule/config.yml")


def scenario_config(name, root=ROOT):
    """The scenario's configuration: the base (when there is one) with its molecule.yml over it."""
    base_file = Path(root) / BASE
    base = yaml.safe_load(base_file.read_text()) if base_file.exists() else {}
    own = yaml.safe_load((Path(root) / "molecule" / name / "molecule.yml").read_text())
    return merge_dicts(base or {}, own or {})


def phases(config):
    """The phases scripts/molecule-timed.sh runs one by one: up to verify, less dependency."""
    sequence = config["scenario"]["test_sequence"]
    upto_verify = sequence[:len(sequence) - sequence[::-1].index("verify")]
    return [p for p in upto_verify if p != "dependency"]


def main(argv):
    config = scenario_config(argv[1], Path.cwd())
    if argv[2] == "phases":
        print(" ".join(phases(config)))
    else:
        env = (config.get("provisioner") or {}).get("env") or {}
        print(env.get("VDF_IDEMPOTENCE_STRATEGY", ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
