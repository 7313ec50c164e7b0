"""Print Markdown tables from race_check.py JSON reports (bench/results/README.md uses them).

Usage: python3 bench/race/summarize.py race-*.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _bad(t: dict) -> str:
    return (f"{t['bad']} of {t['trials']} ({t['wrong']} wrong, {t['crashed']} crashed, "
            f"{t['hung']} hung)")


def _path(r: dict) -> str:
    return "tensor cores" if r.get("geometry", {}).get("use_tensor_cores") else "CUDA cores"


def race_table(reports: list) -> str:
    rows = ["| FlashInfer | decode path | patch | scenario | split-KV (A, B) | pinned: bad | "
            "as installed: bad | max err installed | max err pinned |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in reports:
        if r.get("unavailable"):
            rows.append(f"| {r.get('flashinfer_version', '?')} | {_path(r)} | | could not run: "
                        f"{r['unavailable'][-160:]} | | | | | |")
            continue
        for name, modes in r.get("scenarios", {}).items():
            inst, pin = modes.get("installed"), modes.get("pinned")
            split = r.get("split_kv", {}).get(name)
            rows.append(
                f"| {r['flashinfer_version']} | {_path(r)} | {r['patch'].get('status')} | {name} | "
                f"{split} | "
                f"{_bad(pin) if pin else '-'} | {_bad(inst) if inst else '-'} | "
                f"{inst['max_error']:.3g} | {pin['max_error']:.3g} |"
                if inst and pin else f"| {r['flashinfer_version']} | | | {name} | | | | | |")
    return "\n".join(rows)


def _med(s: dict) -> str:
    return f"{s['median']:.1f} ({s['p10']:.1f}-{s['p90']:.1f})"


def bench_table(reports: list) -> str:
    rows = ["| FlashInfer | decode path | batch | step | host us pinned | host us installed | "
            "GPU us pinned | GPU us installed | ratio host | ratio GPU |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in reports:
        bench = (r.get("bench") or {}).get("batches") or {}
        for batch, steps in bench.items():
            for step, modes in steps.items():
                pin, inst = modes["pinned"], modes["installed"]
                ratio = modes.get("ratio_installed_over_pinned", {})
                gp = _med(pin["gpu_us"]) if "gpu_us" in pin else "-"
                gi = _med(inst["gpu_us"]) if "gpu_us" in inst else "-"
                rg = f"{ratio['gpu_us']:.3f}" if "gpu_us" in ratio else "-"
                rows.append(
                    f"| {r['flashinfer_version']} | {_path(r)} | {batch} | {step} | "
                    f"{_med(pin['host_us'])} | {_med(inst['host_us'])} | {gp} | {gi} | "
                    f"{ratio.get('host_us', 0):.3f} | {rg} |")
    return "\n".join(rows)


def main(paths: list) -> int:
    reports = [json.loads(Path(p).read_text()) for p in paths]
    for r in reports:
        print(r.get("summary", ""))
    print()
    print(race_table(reports))
    print()
    print("Times: median (p10-p90) in microseconds; ratio = as installed / pinned (medians).")
    print()
    print(bench_table(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
