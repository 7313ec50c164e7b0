"""The rig metrics collector (files/rig_metrics.py) as the rig's timer runs it, on a temporary
folder: the nvidia-smi double and the kernel-log double on its PATH, a health report, a last good
release and a model cache; and a reader of the text format it writes. For the tests of the
collector and of what reads its file (node_exporter, Prometheus)."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from kernel_log_stand_ins import install_kernel_log_tools

ROOT = Path(__file__).resolve().parents[1]
COLLECTOR = ROOT / "roles/vllm_dual_fast/files/rig_metrics.py"
SMI_DOUBLE = ROOT / "molecule/doubles/nvidia-smi-double"
_spec = importlib.util.spec_from_file_location("vdf_rig_metrics", COLLECTOR)
rig_metrics = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rig_metrics)

PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
XID_31 = "NVRM: Xid (PCI:0000:01:00): 31, pid=4242, name=python3, Ch 00000008"
XID_79 = ("NVRM: Xid (PCI:0000:02:00): 79, pid='<unknown>', name=<unknown>, "
          "GPU has fallen off the bus.")
REPORT = {
    "schema_version": 2, "host": "rig-a", "release": "0123456789abcdef", "image": "vllm:0.27.1",
    "vllm_version": "0.27.1", "checked_at": "2026-12-03T10:00:00+00:00", "healthy": True,
    "failures": [], "downtime_s": 41.5,
    "smoke": {"ok": 4, "speed": {"c1": {"tokens_per_s": 52.25}, "cN": {"tokens_per_s": 38.5},
                                 "concurrency": 4}},
    "mtp": {"mean_acceptance_length": 2.75, "acceptance_rate": 0.44},
}


class CollectorRig:
    """A rig's collector in `folder`: run(**knobs) writes <folder>/node-exporter/vllm-dual-fast.prom
    as the timer does (knobs go to the nvidia-smi double's config file) and returns its text;
    write_kernel_line(text) writes a line "into the kernel log" the doubles read."""

    def __init__(self, folder):
        folder = Path(folder)
        self.double_bin, self.real_bin = install_kernel_log_tools(folder)
        os.symlink(os.path.realpath(sys.executable), self.real_bin / "python3")
        (self.double_bin / "nvidia-smi").symlink_to(SMI_DOUBLE)
        self.base = folder
        self.folder = folder / "node-exporter"
        self.folder.mkdir()
        self.report = folder / "report.json"
        self.report.write_text(json.dumps(REPORT))
        self.last_good = folder / "releases" / "0123456789abcdef"
        self.last_good.mkdir(parents=True)
        (self.last_good / "verdict.json").write_text(json.dumps(
            {"release": "0123456789abcdef", "healthy_at": "2026-12-02T09:00:00+00:00",
             "report": dict(REPORT, mtp={"mean_acceptance_length": 3.25})}))
        (folder / "last-good").symlink_to(self.last_good)
        (folder / "hf-cache").mkdir()
        self.lines = folder / "lines"
        self.text = ""

    def run(self, env=None, args=(), **knobs):
        (self.base / "smi.json").write_text(json.dumps(knobs))
        full_env = {"PATH": f"{self.double_bin}:{self.real_bin}",
                    "DMESG_DOUBLE_LINES": str(self.lines),
                    "DMESG_DOUBLE_CONFIG": str(self.base / "dmesg.json"),
                    "NVIDIA_SMI_DOUBLE_CONFIG": str(self.base / "smi.json"),
                    "NVIDIA_SMI_DOUBLE_STATE_DIR": str(self.base / "smi-state"),
                    "NVIDIA_SMI_DOUBLE_KERNEL_DIR": str(self.base / "no-kernel-double"),
                    **(env or {})}
        done = subprocess.run(
            [sys.executable, str(COLLECTOR), "--out", str(self.folder / "vllm-dual-fast.prom"),
             "--report", str(self.report), "--power-limit-target-w", "300",
             "--last-good", str(self.base / "last-good"),
             "--model-cache", str(self.base / "hf-cache"), *args],
            env=full_env, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        self.text = (self.folder / "vllm-dual-fast.prom").read_text()
        return self.text

    def write_kernel_line(self, text, at=1796131722.0):
        with open(self.lines, "a") as f:
            f.write(f"{at:.6f} {text}\n")


def parse(text):
    """{(metric, frozenset of label pairs): value} of a text-format file (no escapes used here)."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, inner = series.partition("{")
        labels = frozenset(tuple(pair.split("=", 1)) for pair in inner.rstrip("}").split(",")
                           if pair) if inner else frozenset()
        samples[(name, frozenset((k, v.strip('"')) for k, v in labels))] = float(value)
    return samples


def value(samples, metric, **labels):
    matches = [v for (name, got), v in samples.items()
               if name == metric and set(labels.items()) <= set(got)]
    assert len(matches) == 1, (metric, labels, sorted(k for k in samples if k[0] == metric))
    return matches[0]
