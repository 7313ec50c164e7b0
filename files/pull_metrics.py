#!/usr/bin/env python3
"""Pull rigs as metrics: the reports rigs behind NAT upload become series on the monitoring host,
so a pull rig that stops reporting, or whose runs are refused or fail, alerts like a scraped rig.

    python3 pull_metrics.py --pulled DIR --rig-keys FILE --out FILE.prom [--pushing RIG ...]

Reads DIR as fleet_report.py --pulled does (each upload verified against the fleet's rig keys;
one that does not verify is counted in vdf_pull_unverified_uploads and nowhere else) and writes,
per verified rig, labelled `rig`: vdf_pull_report_timestamp_seconds (its newest news, as the fleet
report judges staleness), vdf_pull_state{state}, the last verdict's vdf_report_* series
(rig_metrics.report_samples) and the GPU telemetry the report carries (its speed_conditions:
temperature, power limit set and enforced, SM clock and clock event reasons per GPU, as of its last
speed run);
of a rig named by --pushing (its own agent writes those live) only the first two.
Names and help: rig_metrics.METRICS. Written whole (temporary file, then rename) for
node_exporter's textfile collector on the monitoring host, scraped with
honor_labels so each series keeps its rig. Without --rig-keys nothing is read as verified: every
upload counts as unverified. Exit codes: 0 written, 2 bad input, 1 unexpected.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fleet_report  # noqa: E402 (a sibling in files/, copied together)
import rig_metrics  # noqa: E402
import signed_reports  # noqa: E402

PULL_STATES = ("applied", "unchanged", "refused", "failed", "rolled-back")


def pull_state(report) -> str:
    """The pull run's state as the alerts name it; "" when the run's tag names none they know.
    release-failed is a release that failed health and was rolled back."""
    if fleet_report._pull_refused(report):
        return "refused"
    state = fleet_report._pull(report).get("state")
    if state == "release-failed":
        return "rolled-back"
    if fleet_report._pull_failed(report):
        return "failed"
    return state if state in PULL_STATES else ""


# The GPU telemetry a report carries: what the GPUs were at after its last speed run
# (health-report.schema.json, speed_conditions: one list entry per GPU).
CONDITION_METRICS = (("temperature_c", "vdf_gpu_temperature_celsius", 1),
                     ("power_limit_w", "vdf_gpu_power_limit_watts", 1),
                     ("power_limit_enforced_w", "vdf_gpu_power_limit_enforced_watts", 1),
                     ("sm_clock_mhz", "vdf_gpu_sm_clock_hertz", 1e6))


def gpu_samples(conditions):
    """vdf_gpu_* series, labelled gpu, from a report's speed_conditions ({} gives none)."""
    samples = []
    for key, metric, factor in CONDITION_METRICS:
        for index, value in enumerate((conditions or {}).get(key) or []):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                samples.append((metric, {"gpu": str(index)}, float(value) * factor))
    for index, mask in enumerate((conditions or {}).get("clocks_event_reasons") or []):
        samples += rig_metrics.clock_event_samples({"gpu": str(index)}, mask)
    return samples


def rig_samples(rig, report, pushing=False):
    """The series of one verified pull rig; one that pushes its series (its Prometheus agent
    writes them live, job vdf_rig_node) gets only its pull state and news time here, so no alert
    fires twice from the same fact."""
    labels = {"rig": rig}
    carried = [] if pushing else (rig_metrics.report_samples(report)
                                  + gpu_samples(report.get("speed_conditions")))
    samples = [(name, dict(labels, **found), value) for name, found, value in carried]
    when, _what = fleet_report.news_of(report)
    if when is not None:
        samples.append(("vdf_pull_report_timestamp_seconds", labels, when.timestamp()))
    state = pull_state(report)
    samples += [("vdf_pull_state", dict(labels, state=name), 1 if name == state else 0)
                for name in PULL_STATES]
    return samples


def pull_samples(pulled: dict, unverified: int, pushing=()):
    """Every series of a run: each verified rig's, in name order, and the unverified count.
    pushing: the rigs whose series come by push."""
    samples = []
    for rig in sorted(pulled):
        if pulled[rig].get("_verified"):
            samples += rig_samples(rig, pulled[rig], rig in set(pushing))
    return samples + [("vdf_pull_unverified_uploads", {}, unverified)]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pulled", required=True, help="the folder pull rigs upload to")
    parser.add_argument("--rig-keys", help="the fleet's list of rig keys (allowed signers)")
    parser.add_argument("--out", required=True, help="the .prom file to write")
    parser.add_argument("--pushing", action="append", default=[], metavar="RIG",
                        help="a rig that pushes its series: its report's GPU and verdict series "
                             "are left out (repeatable)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        keys, notes = None, []
        if args.rig_keys:
            keys_path, enrolled, notes = signed_reports.read_rig_keys(args.rig_keys)
            keys = (keys_path, enrolled)
        pulled, more, apart = fleet_report.load_pulled_dir(args.pulled, keys)
    except signed_reports.BadInput as exc:
        sys.stderr.write(f"pull_metrics: {exc}\n")
        return 2
    for note in notes + more + [f"{forged['file']}: not verified: {forged['why']}"
                                for forged in apart]:
        sys.stderr.write(f"pull_metrics: {note}\n")
    unverified = len(apart) + sum(1 for report in pulled.values() if not report.get("_verified"))
    rig_metrics.write_atomic(args.out, rig_metrics.exposition(
        pull_samples(pulled, unverified, args.pushing)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
