#!/usr/bin/env python3
"""The rig's own metrics for node_exporter's textfile collector: GPU telemetry, Xid counts and the
last health verdict, in Prometheus' text format.

    python3 rig_metrics.py --out /var/lib/prometheus/node-exporter/vllm-dual-fast.prom \
        [--report /var/lib/vllm-dual-fast/report.json] [--last-good /opt/vllm-dual-fast/last-good]
        [--model-cache /opt/vllm-dual-fast/hf-cache] [--power-limit-target-w 300]
        [--expected-gpus 2] [--state-dir /var/lib/vllm-dual-fast]
    python3 rig_metrics.py --print ...      (the metrics on stdout, nothing written)

What it reads, each on its own (one that fails leaves its metrics out and says so in
vdf_rig_metrics_source_up{source=...}; the others are still written):
  nvidia     `nvidia-smi --query-gpu=<QUERY> --format=csv,noheader,nounits`, one row per GPU.
  kernel     the kernel log of this boot, as the health check reads it: journald's kernel lines
             (`journalctl _TRANSPORT=kernel --boot=0 ...`) when journald keeps them, else the
             ring buffer (`dmesg`); `NVRM: Xid (PCI:<bus>): <code>, ...` lines counted by bus and
             code. The counts start again at each boot (a counter reset, which rate() and
             increase() handle); the codes in XID_WATCHED are written as 0 from the start, so
             their first Xid is an increase a rule can see.
  report     the rig's last health report (files/schemas/health-report.schema.json).
  last_good  the last good release's verdict.json (its report's MTP acceptance: what a live
             acceptance is compared with).
  model_cache  the free and total bytes of the file system that holds the model cache.
  driver     nvidia-smi's exit status as the driver's state (ok, missing, not_loaded, mismatch:
             exit 18, NVML newer than the loaded module; unreachable: any other failure, 15
             a GPU off the bus) and how many GPUs it lists, against --expected-gpus.
  boot       this boot's id (/proc/sys/kernel/random/boot_id) and time (/proc/stat btime): the
             Xid series carry the boot_id, and each (bus, code) the time of its newest line
             (journald's wall clock; dmesg's boot-relative stamp plus the boot's start), so an
             alert asks "an Xid in the last 10 minutes" of the log itself, not of a counter that
             a scrape gap or a journal vacuum makes jump.
  kernels    whether the running kernel and the one that boots next (the newest installed:
             GRUB's default entry) have an nvidia module (their modules.dep), a reboot waiting
             (/run/reboot-required), the kernel packages on hold (dpkg's status) and since when
             kernel updates wait on them (the last maintenance run, else the role's holds record,
             in --state-dir).

Every metric it writes is in METRICS (name -> type, help): the alert rules and the dashboard name
only those (tests/integration/test_rig_metrics.py). The file is written whole: a temporary file
in the same folder, then a rename, as node_exporter's documentation asks, so a scrape never
reads half.
Exit codes: 0 written (even with a source down: that is a metric), 2 bad usage, 1 unexpected.
Standard library only: it runs on any rig.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

QUERY = ("index,pci.bus_id,temperature.gpu,power.draw,power.limit,enforced.power.limit,clocks.sm,"
         "pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,"
         "memory.used,utilization.gpu,clocks_event_reasons.active")

# nvidia-smi field -> (metric, factor to the metric's base unit)
GPU_FIELDS = {
    "temperature.gpu": ("vdf_gpu_temperature_celsius", 1),
    "power.draw": ("vdf_gpu_power_draw_watts", 1),
    "power.limit": ("vdf_gpu_power_limit_watts", 1),
    "enforced.power.limit": ("vdf_gpu_power_limit_enforced_watts", 1),
    "clocks.sm": ("vdf_gpu_sm_clock_hertz", 1e6),
    "pcie.link.gen.current": ("vdf_gpu_pcie_link_gen", 1),
    "pcie.link.gen.max": ("vdf_gpu_pcie_link_gen_max", 1),
    "pcie.link.width.current": ("vdf_gpu_pcie_link_width", 1),
    "pcie.link.width.max": ("vdf_gpu_pcie_link_width_max", 1),
    "memory.used": ("vdf_gpu_memory_used_bytes", 1024 * 1024),
    "utilization.gpu": ("vdf_gpu_utilization_ratio", 0.01),
}

# NVML's clocks event reason bits (nvml.h, nvmlClocksEventReason*), by the name a rule uses.
CLOCK_EVENT_REASONS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}

# Xid codes written as 0 before their first line: 31 (this project's crash, vllm#40756), 79
# (fallen off the bus), 13/43 (application faults), 48/63/64/94/95 (ECC and row remapping),
# 62/119/120 (GSP and firmware), 92 (high single-bit ECC), 74 (NVLink).
XID_WATCHED = (13, 31, 43, 48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120)

METRICS = {
    "vdf_gpu_temperature_celsius": ("gauge", "GPU core temperature (nvidia-smi temperature.gpu)."),
    "vdf_gpu_power_draw_watts": ("gauge", "GPU power draw (nvidia-smi power.draw)."),
    "vdf_gpu_power_limit_watts": ("gauge", "GPU power limit set (nvidia-smi power.limit)."),
    "vdf_gpu_power_limit_enforced_watts": (
        "gauge", "GPU power limit the card enforces: the lowest of its limiters, the one set "
                 "among them (nvidia-smi enforced.power.limit)."),
    "vdf_gpu_power_limit_target_watts": (
        "gauge", "The power limit the role sets on every GPU (vllm_dual_fast_power_limit_watts); "
                 "absent when the role leaves the limit alone."),
    "vdf_gpu_sm_clock_hertz": ("gauge", "SM clock (nvidia-smi clocks.sm)."),
    "vdf_gpu_pcie_link_gen": (
        "gauge", "PCIe generation the link runs at now; an idle GPU trains down to save power "
                 "(nvidia-smi pcie.link.gen.current)."),
    "vdf_gpu_pcie_link_gen_max": (
        "gauge", "Highest PCIe generation this GPU and slot support "
                 "(nvidia-smi pcie.link.gen.max)."),
    "vdf_gpu_pcie_link_width": (
        "gauge", "PCIe lanes in use now (nvidia-smi pcie.link.width.current)."),
    "vdf_gpu_pcie_link_width_max": (
        "gauge", "Most PCIe lanes this GPU and slot support (nvidia-smi pcie.link.width.max)."),
    "vdf_gpu_memory_used_bytes": ("gauge", "GPU memory in use (nvidia-smi memory.used)."),
    "vdf_gpu_utilization_ratio": (
        "gauge", "GPU busy fraction, 0 to 1 (nvidia-smi utilization.gpu)."),
    "vdf_gpu_clocks_event_active": (
        "gauge", "1 when this reason holds the clocks down now (nvidia-smi "
                 "clocks_event_reasons.active, one series per NVML reason)."),
    "vdf_gpu_xid_total": (
        "counter", "NVRM Xid lines in this boot's kernel log, by GPU bus, Xid code and boot_id; "
                   "each boot's series start at 0."),
    "vdf_gpu_xid_last_timestamp_seconds": (
        "gauge", "When this boot's kernel log last had this Xid code on this bus (epoch)."),
    "vdf_nvidia_driver_state": (
        "gauge", "1 for the driver's state as nvidia-smi answers (ok, missing, not_loaded, "
                 "mismatch, unreachable), 0 for the others."),
    "vdf_gpus_listed": ("gauge", "GPUs nvidia-smi lists now (0 when it fails)."),
    "vdf_gpus_expected": (
        "gauge", "GPUs the rig had when the role set it up (absent when not given)."),
    "vdf_rig_boot_info": ("gauge", "Always 1: this boot's id."),
    "vdf_rig_boot_time_seconds": ("gauge", "When this boot began (epoch, /proc/stat btime)."),
    "vdf_kernel_nvidia_module": (
        "gauge", "1 when the kernel has an nvidia module (its modules.dep lists one), by "
                 "`boot`: running (this boot) or next (the newest installed kernel)."),
    "vdf_rig_reboot_required": ("gauge", "1 when /run/reboot-required is there, else 0."),
    "vdf_rig_reboot_required_since_timestamp_seconds": (
        "gauge", "When the reboot became required (the file's time, epoch); absent without one."),
    "vdf_kernel_packages_held": ("gauge", "Kernel packages (linux-*) on hold in dpkg."),
    "vdf_kernel_held_since_timestamp_seconds": (
        "gauge", "Since when kernel updates wait on the holds: the last maintenance run, else "
                 "the role's holds record (epoch); absent without a held kernel package."),
    "vdf_report_healthy": ("gauge", "1 when the rig's last health check passed, else 0."),
    "vdf_report_checked_timestamp_seconds": ("gauge", "When the last health check judged (epoch)."),
    "vdf_report_info": ("gauge", "Always 1: the last report's release, vLLM version and image."),
    "vdf_report_decode_tokens_per_second": (
        "gauge", "Decode tokens/s per request (median) of the last speed run, by concurrency."),
    "vdf_report_mtp_mean_acceptance_length": (
        "gauge", "MTP's mean accepted length per draft in the last speed run."),
    "vdf_report_switch_downtime_seconds": (
        "gauge", "Seconds from the last recreate to /health answering (absent without one)."),
    "vdf_last_good_mtp_mean_acceptance_length": (
        "gauge", "MTP's mean accepted length in the last good release's verdict."),
    "vdf_model_cache_filesystem_avail_bytes": (
        "gauge", "Bytes free to non-root users on the file system of the model cache."),
    "vdf_model_cache_filesystem_size_bytes": (
        "gauge", "Size of the file system of the model cache."),
    # Written on the monitoring host by pull_metrics.py, from the reports pull rigs upload, each
    # series labelled with its `rig` (the vdf_report_* above come with them).
    "vdf_pull_report_timestamp_seconds": (
        "gauge", "When a pull rig's newest verified news was made (epoch): its health check, or "
                 "its pull run when that run was refused or failed."),
    "vdf_pull_state": (
        "gauge", "1 for the state of a pull rig's newest verified run (applied, unchanged, "
                 "refused, failed, rolled-back), 0 for the others."),
    "vdf_pull_unverified_uploads": (
        "gauge", "Uploads that did not verify as the rig they name (listed apart in the fleet "
                 "report, counted nowhere)."),
    "vdf_rig_metrics_source_up": (
        "gauge", "1 when this run could read the source (nvidia, kernel, boot, kernels, "
                 "report, last_good, model_cache), else 0."),
    "vdf_rig_metrics_last_run_timestamp_seconds": ("gauge", "When this file was written (epoch)."),
}

_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)\b")


def _number(text):
    """nvidia-smi's value as a float, or None for [N/A], [Not Supported] and the like."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def gpu_samples(csv_text, query=QUERY):
    """(metric, labels, value) for each GPU row of `nvidia-smi --query-gpu=<query>
    --format=csv,noheader,nounits`."""
    fields = query.split(",")
    samples = []
    for line in csv_text.splitlines():
        if not line.strip():
            continue
        row = dict(zip(fields, (cell.strip() for cell in line.split(",")), strict=False))
        labels = {"gpu": row.get("index", ""), "bus_id": row.get("pci.bus_id", ""),
                  "pci": _bus_of(row.get("pci.bus_id", ""))}    # the Xid series' label
        for field, (metric, factor) in GPU_FIELDS.items():
            value = _number(row.get(field))
            if value is not None:
                samples.append((metric, labels, value * factor))
        samples += clock_event_samples(labels, row.get("clocks_event_reasons.active", ""))
    return samples


def clock_event_samples(labels, mask):
    """vdf_gpu_clocks_event_active, one series per NVML reason, from nvidia-smi's bit mask
    (0x0000000000000004); none when `mask` is not one ([N/A], [Not Supported])."""
    if not re.fullmatch(r"0x[0-9A-Fa-f]+", str(mask)):
        return []
    return [("vdf_gpu_clocks_event_active", dict(labels, reason=reason),
             1 if int(mask, 16) & bit else 0) for reason, bit in CLOCK_EVENT_REASONS.items()]


_JOURNAL_STAMP = re.compile(r"^(\d+(?:\.\d+)?) ")
_DMESG_STAMP = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")


def line_time(line, boot_offset):
    """The epoch of a kernel log line: journald's short-unix stamp, or dmesg's seconds since
    boot plus boot_offset (wall clock minus the monotonic clock, read together); None without
    either."""
    found = _JOURNAL_STAMP.match(line)
    if found:
        return float(found[1])
    found = _DMESG_STAMP.match(line)
    return None if found is None or boot_offset is None else float(found[1]) + boot_offset


def xid_events(lines, boot_offset=None):
    """{(bus, code): (count, epoch of the newest line or None)} of the NVRM Xid lines; bus as
    the driver wrote it."""
    events = {}
    for line in lines:
        found = _XID.search(line)
        if found:
            key = (found[1].lower(), int(found[2]))
            count, newest = events.get(key, (0, None))
            at = line_time(line, boot_offset)
            newest = at if newest is None else (newest if at is None else max(newest, at))
            events[key] = (count + 1, newest)
    return events


def _bus_of(bus_id):
    """nvidia-smi's 00000000:01:00.0 as the driver's Xid lines name it: 0000:01:00."""
    found = re.fullmatch(r"(?:[0-9A-Fa-f]{4})?([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\.\d",
                         bus_id or "")
    return found[1].lower() if found else ""


def xid_samples(events, buses, boot_id=""):
    """vdf_gpu_xid_total for every watched code on every known bus (0 until seen) and for every
    code seen on any bus, labelled with the boot; vdf_gpu_xid_last_timestamp_seconds for each
    seen one whose time is known. events: xid_events'."""
    keys = {(bus, code) for bus in buses for code in XID_WATCHED} | set(events)
    samples = []
    for bus, code in sorted(keys):
        labels = {"pci": bus, "code": str(code), "boot_id": boot_id}
        count, newest = events.get((bus, code), (0, None))
        samples.append(("vdf_gpu_xid_total", labels, count))
        if newest is not None:
            samples.append(("vdf_gpu_xid_last_timestamp_seconds", labels, float(newest)))
    return samples


DRIVER_STATES = ("ok", "missing", "not_loaded", "mismatch", "unreachable")


def driver_state(returncode, listed):
    """The driver's state from nvidia-smi's exit status (None: nvidia-smi is not there): 9 is no
    driver loaded, 18 NVML's "Driver/library version mismatch" (packages upgraded, module not
    reloaded), any other failure a loaded driver that cannot reach a GPU (15: off the bus)."""
    if returncode is None:
        return "missing"
    if returncode == 0:
        return "ok" if listed else "unreachable"
    return {9: "not_loaded", 18: "mismatch"}.get(returncode, "unreachable")


def driver_samples(returncode, gpus_listed, expected=0):
    samples = [("vdf_nvidia_driver_state", {"state": state},
                1 if state == driver_state(returncode, gpus_listed) else 0)
               for state in DRIVER_STATES]
    samples.append(("vdf_gpus_listed", {}, gpus_listed))
    if expected:
        samples.append(("vdf_gpus_expected", {}, expected))
    return samples


def boot_samples(boot_id, boot_time):
    return [("vdf_rig_boot_info", {"boot_id": boot_id}, 1),
            ("vdf_rig_boot_time_seconds", {}, float(boot_time))]


def read_boot(proc="/proc"):
    """(boot id, boot time epoch) of this boot."""
    with open(os.path.join(proc, "sys/kernel/random/boot_id")) as f:
        boot_id = f.read().strip()
    with open(os.path.join(proc, "stat")) as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return boot_id, btime


def _version_key(version):
    """A kernel release ordered as dpkg orders them, near enough: numbers as numbers."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.findall(r"\d+|[A-Za-z]+", version)]


def has_nvidia_module(modules_dir):
    """Whether modules.dep in modules_dir lists an nvidia module (DKMS' updates/dkms/nvidia.ko,
    Canonical's precompiled kernel/nvidia-*/nvidia.ko, compressed or not)."""
    try:
        with open(os.path.join(modules_dir, "modules.dep")) as f:
            return any(re.search(r"(^|/)nvidia\.ko(\.[a-z]+)?:", line) for line in f)
    except OSError:
        return False


def held_kernel_packages(status_text):
    """Names of the linux-* packages dpkg's status marks `hold`."""
    held = []
    for stanza in status_text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines()
                      if ": " in line and not line.startswith(" "))
        if fields.get("Package", "").startswith("linux-") and \
                fields.get("Status", "").startswith("hold "):
            held.append(fields["Package"])
    return held


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def kernel_samples(root="/", running=None, state_dir=None):
    """The running and the next kernel's nvidia module, a reboot waiting, the kernel packages
    on hold and since when updates wait on them. root: the file system read (tests: a folder)."""
    running = running or os.uname().release
    boot = os.path.join(root, "boot")
    installed = [name[len("vmlinuz-"):] for name in (os.listdir(boot) if os.path.isdir(boot)
                                                     else []) if name.startswith("vmlinuz-")]
    modules = os.path.join(root, "lib/modules")
    samples = [("vdf_kernel_nvidia_module", {"boot": "running", "kernel": running},
                1 if has_nvidia_module(os.path.join(modules, running)) else 0)]
    if installed:
        nxt = max(installed, key=_version_key)
        samples.append(("vdf_kernel_nvidia_module", {"boot": "next", "kernel": nxt},
                        1 if has_nvidia_module(os.path.join(modules, nxt)) else 0))
    since = _mtime(os.path.join(root, "run/reboot-required"))
    samples.append(("vdf_rig_reboot_required", {}, 0 if since is None else 1))
    if since is not None:
        samples.append(("vdf_rig_reboot_required_since_timestamp_seconds", {}, float(int(since))))
    try:
        with open(os.path.join(root, "var/lib/dpkg/status"), encoding="utf-8",
                  errors="replace") as f:
            held = held_kernel_packages(f.read())
    except OSError:
        held = []
    samples.append(("vdf_kernel_packages_held", {}, len(held)))
    if held and state_dir:
        waits = _mtime(os.path.join(state_dir, "maintenance.json")) or \
            _mtime(os.path.join(state_dir, "driver-holds.json"))
        if waits is not None:
            samples.append(("vdf_kernel_held_since_timestamp_seconds", {}, float(int(waits))))
    return samples


def _epoch(iso):
    """Epoch seconds of an ISO 8601 time; one without an offset is UTC (as the reports write)."""
    try:
        when = datetime.fromisoformat(str(iso).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def report_samples(report):
    """The verdict's figures from a health report (schema version 2)."""
    samples = [("vdf_report_healthy", {}, 1 if report.get("healthy") else 0),
               ("vdf_report_info", {"release": str(report.get("release", "")),
                                    "vllm_version": str(report.get("vllm_version", "")),
                                    "image": str(report.get("image", ""))}, 1)]
    checked = _epoch(report.get("checked_at", ""))
    if checked is not None:
        samples.append(("vdf_report_checked_timestamp_seconds", {}, checked))
    speed = (report.get("smoke") or {}).get("speed") or {}
    for key, concurrency in (("c1", 1), ("cN", speed.get("concurrency"))):
        rate = _number((speed.get(key) or {}).get("tokens_per_s"))
        if rate is not None and concurrency:
            samples.append(("vdf_report_decode_tokens_per_second",
                            {"concurrency": str(concurrency)}, rate))
    acceptance = _number((report.get("mtp") or {}).get("mean_acceptance_length"))
    if acceptance is not None:
        samples.append(("vdf_report_mtp_mean_acceptance_length", {}, acceptance))
    downtime = _number(report.get("downtime_s"))
    if downtime is not None:
        samples.append(("vdf_report_switch_downtime_seconds", {}, downtime))
    return samples


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _format(value):
    return repr(float(value)) if isinstance(value, float) and not value.is_integer() \
        else str(int(value))


def exposition(samples):
    """Prometheus text format: HELP and TYPE once per metric, in METRICS order."""
    out = []
    for metric, (kind, text) in METRICS.items():
        rows = [(labels, value) for name, labels, value in samples if name == metric]
        if not rows:
            continue
        out += [f"# HELP {metric} {text}", f"# TYPE {metric} {kind}"]
        for labels, value in rows:
            inner = ",".join(f'{key}="{_escape(val)}"' for key, val in labels.items())
            out.append(f"{metric}{{{inner}}} {_format(value)}" if inner
                       else f"{metric} {_format(value)}")
    return "\n".join(out) + "\n"


def write_atomic(path, text):
    """Writes `text` to `path` whole: a temporary file beside it, then a rename."""
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(prefix=".vdf-metrics-", dir=folder)
    try:
        with os.fdopen(handle, "w") as f:
            f.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _run_status(argv):
    """(exit status, stdout) of argv; (None, None) when it cannot run."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None, None
    return done.returncode, done.stdout


def _run(argv):
    """stdout of argv, or None when it cannot run or fails."""
    code, out = _run_status(argv)
    return out if code == 0 else None


def kernel_lines():
    """This boot's kernel log lines, from journald when it keeps them, else dmesg; None when
    neither can be read. The same choice as the health check (tasks/kernel_log.yml), in one
    read of the journal: none of its lines means journald keeps no kernel lines here."""
    text = _run(["journalctl", "_TRANSPORT=kernel", "--boot=0", "--quiet", "--no-pager",
                 "--output=short-unix"])
    if not (text and text.strip()):
        text = _run(["dmesg"])
    return None if text is None else text.splitlines()


def _read_json(path):
    with open(path) as f:
        found = json.load(f)
    if not isinstance(found, dict):
        raise ValueError(f"{path}: not a JSON object")
    return found


def last_good_samples(verdict):
    """The last good release's MTP acceptance, from its verdict.json (release_verdict's)."""
    length = _number(((verdict.get("report") or {}).get("mtp") or {})
                     .get("mean_acceptance_length"))
    return [] if length is None else [("vdf_last_good_mtp_mean_acceptance_length", {}, length)]


def cache_samples(folder):
    """Free (to non-root users, as df shows) and total bytes of the model cache's file system."""
    stat = os.statvfs(folder)
    return [("vdf_model_cache_filesystem_avail_bytes", {}, float(stat.f_bavail * stat.f_frsize)),
            ("vdf_model_cache_filesystem_size_bytes", {}, float(stat.f_blocks * stat.f_frsize))]


def boot_offset():
    """Wall clock minus the monotonic clock now: what turns dmesg's seconds since boot (the
    printk clock, which stops in a suspend as CLOCK_MONOTONIC does) into an epoch."""
    return time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)


def collect(report_path=None, power_limit_target_w=0, now=None, last_good=None,
            model_cache=None, expected_gpus=0, state_dir=None):
    """Every sample of one run: the sources read now, each one's up metric, the run's time."""
    samples, up = [], {}
    code, csv_text = _run_status(
        ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"])
    up["nvidia"] = code == 0
    gpus = gpu_samples(csv_text if code == 0 else "")
    samples += gpus
    listed = len({labels["bus_id"] for _, labels, _ in gpus})
    samples += driver_samples(code, listed, expected_gpus)
    if power_limit_target_w:
        samples += [("vdf_gpu_power_limit_target_watts", labels, float(power_limit_target_w))
                    for metric, labels, _ in gpus if metric == "vdf_gpu_power_limit_watts"]
    try:
        boot_id, boot_time = read_boot()
        samples += boot_samples(boot_id, boot_time)
        up["boot"] = True
    except (OSError, ValueError, StopIteration):
        boot_id, up["boot"] = "", False
    lines = kernel_lines()
    up["kernel"] = lines is not None
    if lines is not None:
        buses = sorted({labels["pci"] for _, labels, _ in gpus} - {""})
        samples += xid_samples(xid_events(lines, boot_offset()), buses, boot_id)
    readers = (("report", report_path, lambda path: report_samples(_read_json(path))),
               ("last_good", last_good and os.path.join(last_good, "verdict.json"),
                lambda path: last_good_samples(_read_json(path))),
               ("model_cache", model_cache, cache_samples),
               ("kernels", "/", lambda root: kernel_samples(root, state_dir=state_dir)))
    for source, path, read in readers:
        if not path:
            continue
        try:
            samples += read(path)
            up[source] = True
        except (OSError, ValueError, AttributeError):
            up[source] = False
    samples += [("vdf_rig_metrics_source_up", {"source": name}, 1 if ok else 0)
                for name, ok in up.items()]
    samples.append(("vdf_rig_metrics_last_run_timestamp_seconds", {},
                    float(int(now if now is not None else time.time()))))
    return samples


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="the .prom file in node_exporter's textfile folder")
    parser.add_argument("--print", action="store_true", help="print, write nothing")
    parser.add_argument("--report", help="the rig's health report (report.json)")
    parser.add_argument("--last-good", help="the last good release's folder (the link)")
    parser.add_argument("--model-cache", help="the model cache's folder")
    parser.add_argument("--power-limit-target-w", type=float, default=0)
    parser.add_argument("--expected-gpus", type=int, default=0,
                        help="GPUs the rig had when the role set it up")
    parser.add_argument("--state-dir", help="the role's state folder (maintenance.json, "
                        "driver-holds.json)")
    args = parser.parse_args(argv)
    if not args.print and not args.out:
        parser.error("--out FILE or --print")
    text = exposition(collect(args.report, args.power_limit_target_w, last_good=args.last_good,
                              model_cache=args.model_cache, expected_gpus=args.expected_gpus,
                              state_dir=args.state_dir))
    if args.print:
        sys.stdout.write(text)
    else:
        write_atomic(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
