"""Helpers for the health checks: kernel log windows and the patcher's start line (pure; tested
in tests/test_health_filters.py)."""

from datetime import datetime


def _line_epoch(line):
    """Seconds since the epoch of a `dmesg --time-format=iso` line, or None when it has none
    (`2026-11-30T00:01:02,123456+00:00 message`)."""
    stamp = line.split(" ", 1)[0].replace(",", ".")
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def kernel_lines_since(lines, since_epoch):
    """The kernel-log lines written at or after `since_epoch` (seconds, int or text). Lines with no
    readable time are kept only when the whole log has none (then nothing can be dated)."""
    since = float(since_epoch)
    dated = [(_line_epoch(line), line) for line in lines or []]
    if all(at is None for at, _ in dated):
        return [line for _, line in dated]
    return [line for at, line in dated if at is not None and at >= since]


def xid_lines(lines):
    """The NVIDIA driver's Xid lines (`NVRM: Xid (PCI:...): 31, ...`)."""
    return [line for line in lines or [] if "NVRM: Xid" in line]


def patch_at_start(line):
    """The outcome install.sh printed at the container's start (`fi-pinq: patched decode.py (2
    allocations) flashinfer 0.7.2.post1`): {"status": ..., "line": ...}, or {} when there is
    none."""
    line = (line or "").strip()
    if not line.startswith("fi-pinq: "):
        return {}
    status = line[len("fi-pinq: "):].split(" ", 1)[0].rstrip(":")
    if status == "FAILED":
        status = "failed"
    return {"status": status, "line": line}


class FilterModule:
    def filters(self):
        return {
            "vllm_dual_fast_kernel_lines_since": kernel_lines_since,
            "vllm_dual_fast_xid_lines": xid_lines,
            "vllm_dual_fast_patch_at_start": patch_at_start,
        }
