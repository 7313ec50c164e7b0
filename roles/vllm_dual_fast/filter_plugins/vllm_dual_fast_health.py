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


def speed_regressions(now, before, max_drop_pct):
    """How the new release is slower than the one before, one line each (empty: not slower by
    more than max_drop_pct). now/before: smoke.py's "speed" ({"c1": {"tokens_per_s", "ttft_s"},
    "cN": {...}, "concurrency": N}); nothing to compare against passes."""
    found = []
    limit = float(max_drop_pct)
    for key in ("c1", "cN"):
        label = "c=1" if key == "c1" else f"c={(now or {}).get('concurrency', 'N')}"
        new = ((now or {}).get(key) or {}).get("tokens_per_s")
        old = ((before or {}).get(key) or {}).get("tokens_per_s")
        if new is not None and old:
            drop = (float(old) - float(new)) / float(old) * 100
            if drop > limit:
                found.append(f"decode tokens/s at {label} fell {drop:.0f} % ({float(old):g} -> "
                             f"{float(new):g}), more than the {limit:g} % allowed")
    new_ttft = ((now or {}).get("c1") or {}).get("ttft_s")
    old_ttft = ((before or {}).get("c1") or {}).get("ttft_s")
    if new_ttft is not None and old_ttft:
        rise = (float(new_ttft) - float(old_ttft)) / float(old_ttft) * 100
        if rise > limit:
            found.append(f"time to first token at c=1 rose {rise:.0f} % ({float(old_ttft):g} s -> "
                         f"{float(new_ttft):g} s), more than the {limit:g} % allowed")
    return found


def race_check_verdict(rc, mode, summary=""):
    """The canary's GPU race check: ("fail" | "warn" | "pass" | "off", one line)."""
    if mode == "off":
        return "off", "race check off"
    if rc is None or str(rc) == "":
        rc = 2
    rc = int(rc)
    if rc == 0:
        return "pass", "race check: no bad trial"
    if rc == 1:
        return "fail", f"race check found bad trials: {summary}".strip()
    verdict = "fail" if mode == "required" else "warn"
    return verdict, f"race check could not run: {summary}".strip()


def canary_gate_failures(gates):
    """Failures of the canary's gates (empty: passed). gates: speed_now, speed_before,
    max_drop_pct, race_rc, race_mode, race_summary."""
    failures = speed_regressions(gates.get("speed_now"), gates.get("speed_before"),
                                 gates.get("max_drop_pct", 10))
    verdict, line = race_check_verdict(gates.get("race_rc"), gates.get("race_mode", "auto"),
                                       gates.get("race_summary", ""))
    if verdict == "fail":
        failures.append(line)
    return failures


class FilterModule:
    def filters(self):
        return {
            "vllm_dual_fast_kernel_lines_since": kernel_lines_since,
            "vllm_dual_fast_xid_lines": xid_lines,
            "vllm_dual_fast_patch_at_start": patch_at_start,
            "vllm_dual_fast_speed_regressions": speed_regressions,
            "vllm_dual_fast_race_check_verdict": race_check_verdict,
            "vllm_dual_fast_canary_gate_failures": canary_gate_failures,
        }
