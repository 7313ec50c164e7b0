#!/usr/bin/env python3
"""Prints the verdict of saved health reports, a few lines each (what `make demo` ends with):
    scripts/rig-summary.py reports/<host>.json [...]
The lines are the role's own (filter_plugins/vllm_dual_fast_summary.py). Exit 0 when every
report is healthy, 1 when one is not, 2 when one cannot be read (a schema version it does
not know included)."""

import json
import pathlib
import sys

FILTERS = pathlib.Path(__file__).resolve().parents[1] / "roles/vllm_dual_fast/filter_plugins"
sys.path.insert(0, str(FILTERS))
# The role's folder is not a package: imported after the path is set.
from vllm_dual_fast_summary import KNOWN_REPORT_VERSIONS, report_version, verdict_lines  # noqa: E402


def main(paths) -> int:
    status = 0
    for path in paths:
        try:
            report = json.loads(pathlib.Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            print(f"{path}: cannot read the report ({exc})", file=sys.stderr)
            return 2
        print("\n".join(verdict_lines(report, path)))
        if not isinstance(report, dict) or report_version(report) not in KNOWN_REPORT_VERSIONS:
            status = 2
        elif str(report.get("healthy")).lower() != "true" and status == 0:
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if len(sys.argv) > 1 else 2)
