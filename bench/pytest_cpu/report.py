#!/usr/bin/env python3
"""Sums what bench/pytest_cpu/vdf_pytest_cpu.py recorded: CPU seconds in all, per test file, and the
costliest tests, with each one's share of the whole and its CPU per wall second; writes the same
to bench/results/pytest-cpu.json.

    .venv/bin/python bench/pytest_cpu/report.py [--top 25]
"""
import argparse
import collections
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "results" / "pytest-cpu"
SUMMARY = OUT.with_suffix(".json")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    rows = [json.loads(line) for path in sorted(OUT.glob("*.jsonl"))
            for line in path.read_text().splitlines()]
    if not rows:
        raise SystemExit(f"nothing recorded in {OUT}: run pytest with -p vdf_pytest_cpu "
                         "(PYTHONPATH=bench/pytest_cpu)")
    cpu = {r["test"]: r["own_cpu_s"] + r["children_cpu_s"] for r in rows}
    wall = {r["test"]: r["wall_s"] for r in rows}
    total = sum(cpu.values())
    print(f"{len(rows)} tests, {total:.0f} CPU s in all ({total / 60:.1f} core-min), "
          f"{sum(wall.values()):.0f} wall s summed over workers")
    by_file = collections.Counter()
    for test, seconds in cpu.items():
        by_file[test.split("::")[0]] += seconds
    print("\nby file (CPU s, share):")
    for name, seconds in by_file.most_common(args.top):
        print(f"  {seconds:7.1f}  {seconds / total:5.1%}  {name}")
    print("\ncostliest tests (CPU s, share, CPU per wall second):")
    costliest = sorted(cpu.items(), key=lambda item: -item[1])[:args.top]
    for test, seconds in costliest:
        per_wall = seconds / max(wall[test], 1e-3)
        print(f"  {seconds:7.1f}  {seconds / total:5.1%}  {per_wall:4.2f}  {test}")
    SUMMARY.write_text(json.dumps({
        "tests": len(rows),
        "cpu_s": round(total, 1),
        "wall_s_summed": round(sum(wall.values()), 1),
        "by_file_cpu_s": {name: round(s, 1) for name, s in by_file.most_common(args.top)},
        "costliest_cpu_s": {test: round(seconds, 1) for test, seconds in costliest},
    }, indent=1) + "\n")


if __name__ == "__main__":
    main()
