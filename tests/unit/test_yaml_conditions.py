"""Every condition in the project's playbooks and task files is a string (or a boolean): a plain
YAML scalar holding ': ' (an assert like `x is match('a: b')`) parses as a mapping, which
Ansible refuses only when the task runs, minutes into a Molecule scenario."""

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
FILES = sorted(p for d in ("molecule", "playbooks", "roles") for p in (ROOT / d).rglob("*.yml")
               if "templates" not in p.parts)
KEYS = ("when", "failed_when", "changed_when", "until", "that")


def conditions(node, where=""):
    """(where, condition) for every condition key found in a parsed YAML tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in KEYS:
                for item in value if isinstance(value, list) else [value]:
                    yield f"{where}/{key}", item
            yield from conditions(value, f"{where}/{node.get('name', key)}")
    elif isinstance(node, list):
        for item in node:
            yield from conditions(item, where)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_condition_is_a_string(path):
    tree = yaml.safe_load(path.read_text())
    bad = [(where, cond) for where, cond in conditions(tree)
           if not isinstance(cond, (str, bool))]
    assert not bad, bad


def test_a_condition_with_a_colon_in_a_plain_scalar_is_caught():
    tree = yaml.safe_load("- assert:\n    that:\n      - x is match('a: b')\n")
    assert [c for _, c in conditions(tree) if not isinstance(c, (str, bool))]
