#!/usr/bin/env python3
"""Prints the role's reference `vllm serve` argv (what follows `serve`) as one JSON list.

Rendered from the role's defaults exactly as the tests render it: tests/vllm_double_fixtures.py's
role_cfg() (deploy.yml's `_cfg` over defaults/main.yml, Jinja native types) handed to the role's
filter plugin serve_args(). Needs the project's dev venv (PyYAML, Jinja2, ansible-core):

    .venv/bin/python bench/vllm_parsers/reference_argv.py [VARIABLE=YAML_VALUE ...]

Each VARIABLE=VALUE overrides one role variable, e.g. vllm_dual_fast_quantization=inc.
"""

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from vllm_double_fixtures import role_serve_args  # noqa: E402 (needs tests/ on the path)


def main(argv) -> int:
    overrides = {}
    for item in argv:
        name, sep, value = item.partition("=")
        if not sep or not name:
            print(f"usage: {Path(__file__).name} [VARIABLE=YAML_VALUE ...]", file=sys.stderr)
            return 2
        overrides[name] = yaml.safe_load(value)
    print(json.dumps(role_serve_args(**overrides)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
