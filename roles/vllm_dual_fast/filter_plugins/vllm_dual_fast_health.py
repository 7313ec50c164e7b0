"""Helpers for the health checks: kernel log windows, the patcher's start line and the canary's
gates (pure; tested in tests/test_health_filters.py)."""

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


def speed_baseline(report, previous_release):
    """The speed the canary is compared with: (speed, "") from the report on the rig when it is
    the healthy report of the release that served just before the switch, else ({}, why not). An
    older release's report, or a failed release's, measured something else than what served."""
    report = report or {}
    if not previous_release:
        return {}, "no baseline: no release served before on this rig"
    no = f"no baseline from the previous release {previous_release}"
    if report.get("release") != previous_release:
        return {}, f"{no} (report is for {report.get('release') or 'no release'})"
    if str(report.get("healthy")).lower() != "true":
        return {}, f"{no} (its report is unhealthy)"
    speed = (report.get("smoke") or {}).get("speed") or {}
    if not (speed.get("c1") or {}).get("tokens_per_s"):
        return {}, f"{no} (its report has no speed figures)"
    return speed, ""


def _soak_failures(soak_run, stderr):
    """The soak's smoke.py run: None when it did not run (no soak, or the smoke failed before)."""
    if soak_run is None or soak_run.get("ok"):
        return []
    why = soak_run.get("failures") or [(stderr or "").strip() or "no output"]
    return ["canary soak failed: " + "; ".join(why)]


def canary_gates(inputs):
    """The canary's gates, judged in one place: {"gates": what the report records, "failures":
    one line each (empty: passed)}. inputs: speed_now (smoke.py's "speed"), previous_report (the
    rig's report before the switch), previous_release (the release that served before),
    max_drop_pct, race_rc, race_mode, race_summary, soak_s, soak_run (the soak's smoke.py JSON,
    None when it did not run), soak_stderr."""
    before, no_baseline = speed_baseline(inputs.get("previous_report"),
                                         inputs.get("previous_release"))
    regressions = speed_regressions(inputs.get("speed_now"), before,
                                    inputs.get("max_drop_pct", 10))
    verdict, line = race_check_verdict(inputs.get("race_rc"), inputs.get("race_mode", "auto"),
                                       inputs.get("race_summary", ""))
    soak_run = inputs.get("soak_run")
    failures = (regressions + ([line] if verdict == "fail" else [])
                + _soak_failures(soak_run, inputs.get("soak_stderr")))
    gates = {
        "race_check": [verdict, line],
        "soak_s": inputs.get("soak_s"),
        "soak": (soak_run or {}).get("soak") or {},
        "speed_before": before,
        "speed_baseline": no_baseline or f"the previous release {inputs.get('previous_release')}",
        "speed_regressions": regressions,
    }
    return {"gates": gates, "failures": failures}


class FilterModule:
    def filters(self):
        return {
            "vllm_dual_fast_kernel_lines_since": kernel_lines_since,
            "vllm_dual_fast_xid_lines": xid_lines,
            "vllm_dual_fast_patch_at_start": patch_at_start,
            "vllm_dual_fast_speed_regressions": speed_regressions,
            "vllm_dual_fast_race_check_verdict": race_check_verdict,
            "vllm_dual_fast_canary_gates": canary_gates,
            "vllm_dual_fast_speed_baseline": speed_baseline,
        }
