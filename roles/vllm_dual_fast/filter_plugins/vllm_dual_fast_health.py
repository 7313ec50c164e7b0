"""Helpers for the health checks: the kernel-log window, the patcher's start line and the canary's
gates (pure; tested in tests/test_health_filters.py)."""

import re

# `journalctl -o short-unix`: `1796131722.468892 rig3090 kernel: message`.
_JOURNAL_STAMP = re.compile(r"^(\d+(?:\.\d+)?) ")
# dmesg's default format: `[ 1234.567890] message`, seconds on the kernel's own clock since boot.
_DMESG_STAMP = re.compile(r"^\[\s*(\d+(?:\.\d+)?)\]")


def journal_line_epoch(line):
    """Seconds since the epoch of a `journalctl -o short-unix` line (the rig's wall clock when
    journald received it), or None for a line with no stamp (a message's continuation line)."""
    found = _JOURNAL_STAMP.match(line or "")
    return float(found.group(1)) if found else None


def dmesg_line_stamp(line):
    """Seconds since boot of a default-format `dmesg` line on the kernel's printk clock, which
    does not run during a suspend (as CLOCK_MONOTONIC), or None for a line with no stamp."""
    found = _DMESG_STAMP.match(line or "")
    return float(found.group(1)) if found else None


def lines_stamped_since(lines, stamp_of, since):
    """The lines whose stamp (stamp_of(line)) is at or after `since`; a line with no stamp goes
    with the line before it (a message's continuation). When no line has a stamp nothing can be
    dated and every line is kept: an Xid line is never dropped for want of a time."""
    lines = list(lines or [])
    stamps = [stamp_of(line) for line in lines]
    if all(at is None for at in stamps):
        return lines
    kept, keep = [], False
    for line, at in zip(lines, stamps):
        if at is not None:
            keep = at >= since
        if keep:
            kept.append(line)
    return kept


def kernel_window_lines(lines, source, window, boot_id=""):
    """The kernel-log lines written since the window opened (kernel_window.yml's fact:
    since_epoch, the rig's wall clock; since_monotonic, its kernel clock; boot_id).
    source "journal": `journalctl -o short-unix` lines against since_epoch. source "dmesg":
    default-format dmesg lines against since_monotonic; when the rig booted again since the window
    opened (boot_id differs), every line of this boot was written after it."""
    window = window or {}
    if source == "journal":
        return lines_stamped_since(lines, journal_line_epoch, float(window["since_epoch"]))
    if source != "dmesg":
        raise ValueError(f"unknown kernel-log source {source!r} (journal or dmesg)")
    now_boot = (boot_id or "").strip()
    booted_again = bool(now_boot) and now_boot != str(window.get("boot_id", "")).strip()
    since = 0.0 if booted_again else float(window["since_monotonic"])
    return lines_stamped_since(lines, dmesg_line_stamp, since)


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
            "vllm_dual_fast_kernel_window_lines": kernel_window_lines,
            "vllm_dual_fast_xid_lines": xid_lines,
            "vllm_dual_fast_patch_at_start": patch_at_start,
            "vllm_dual_fast_speed_regressions": speed_regressions,
            "vllm_dual_fast_race_check_verdict": race_check_verdict,
            "vllm_dual_fast_canary_gates": canary_gates,
            "vllm_dual_fast_speed_baseline": speed_baseline,
        }
