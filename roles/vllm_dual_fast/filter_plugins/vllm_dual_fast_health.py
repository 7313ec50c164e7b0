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


def _figure(speed, level, key):
    value = ((speed or {}).get(level) or {}).get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def speed_regressions(now, before, max_drop_pct, ttft_floor_s=0.05, rate_floor_tps=1.0):
    """How the new release is slower than the one before, one line each (empty: not slower).
    now/before: smoke.py's "speed" ({"c1": {"tokens_per_s", "ttft_s", ...}, "cN": {...},
    "concurrency": N}), medians over rounds of distinct prompts. A change counts only when it is
    worse by more than max_drop_pct AND by more than the absolute floor (ttft_floor_s seconds,
    rate_floor_tps tokens/s): a 50-100 ms time to first token rising by 20 ms is noise on a home
    rig, not a regression. Nothing to compare against passes."""
    found = []
    limit = float(max_drop_pct)
    for key in ("c1", "cN"):
        label = "c=1" if key == "c1" else f"c={(now or {}).get('concurrency', 'N')}"
        new, old = _figure(now, key, "tokens_per_s"), _figure(before, key, "tokens_per_s")
        if new is not None and old:
            drop = (old - new) / old * 100
            if drop > limit and old - new > float(rate_floor_tps):
                found.append(f"decode tokens/s at {label} fell {drop:.0f} % ({old:g} -> "
                             f"{new:g}), more than the {limit:g} % allowed")
    new_ttft, old_ttft = _figure(now, "c1", "ttft_s"), _figure(before, "c1", "ttft_s")
    if new_ttft is not None and old_ttft:
        rise = (new_ttft - old_ttft) / old_ttft * 100
        if rise > limit and new_ttft - old_ttft > float(ttft_floor_s):
            found.append(f"time to first token at c=1 rose {rise:.0f} % ({old_ttft:g} s -> "
                         f"{new_ttft:g} s), more than the {limit:g} % and "
                         f"{float(ttft_floor_s) * 1000:g} ms allowed")
    return found


def mtp_regressions(now, before, floor, max_drop_pct):
    """The canary's MTP acceptance gate, one line each (empty: passed). now/before: smoke.py's
    speed "spec_decode" ({"acceptance_rate", "mean_acceptance_length", ...} or {"unavailable"});
    acceptance below `floor` fails, and so does a drop of more than max_drop_pct against the
    release before. No counters (MTP off, /metrics unreadable) is no figure: nothing to judge."""
    rate = (now or {}).get("acceptance_rate")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool):
        return []
    found = []
    length = (now or {}).get("mean_acceptance_length")
    said = f"{rate:.2f}" + (f" (mean acceptance length {length:.2f})"
                            if isinstance(length, (int, float)) else "")
    if rate < float(floor):
        found.append(f"MTP acceptance {said} is below the floor {float(floor):g}: the draft "
                     "head accepts almost nothing (a checkpoint export that broke MTP?)")
    old = (before or {}).get("acceptance_rate")
    if isinstance(old, (int, float)) and not isinstance(old, bool) and old > 0:
        drop = (old - rate) / old * 100
        if drop > float(max_drop_pct):
            found.append(f"MTP acceptance fell {drop:.0f} % ({old:.2f} -> {rate:.2f}), more "
                         f"than the {float(max_drop_pct):g} % allowed")
    return found


OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError")


def long_prompt_remedies(settings):
    """What to change when long prompts run out of memory, cheapest first, each with its cost.
    settings: the release's max_num_batched_tokens, gpu_memory_utilization, max_num_seqs, w4a8."""
    s = settings or {}
    out = []
    batched = int(s.get("max_num_batched_tokens") or 0)
    if batched > 1024:
        out.append(f"vllm_dual_fast_max_num_batched_tokens: {batched // 2} (prefill in smaller "
                   "chunks: the first token of a long prompt comes later)")
    util = float(s.get("gpu_memory_utilization") or 0)
    if util > 0.6:
        out.append(f"vllm_dual_fast_gpu_memory_utilization: {util - 0.05:.2f} (fewer KV-cache "
                   "blocks: fewer long prompts held and cached at once)")
    seqs = int(s.get("max_num_seqs") or 0)
    if seqs > 1:
        out.append(f"vllm_dual_fast_max_num_seqs: {seqs - 1} (fewer requests served at once; "
                   "below 4 the FlashInfer patch is not needed)")
    if str(s.get("w4a8")).lower() == "true":
        out.append("vllm_dual_fast_w4a8: false (no int8 activations: slower prefill and decode)")
    return out


def long_prompt_failures(run, log_lines, settings):
    """The long-prompt gate, one line (empty: passed). run: smoke.py --long-prompt-tokens JSON
    (None: it did not run); log_lines: the container's log since its start, where vLLM writes a
    CUDA out-of-memory error; settings: see long_prompt_remedies. A restart or an Xid line fails
    health on its own; this names the out-of-memory cause and the remedies."""
    if run is None:
        return []
    oom = [line for line in log_lines or [] if any(m in line for m in OOM_MARKERS)]
    if run.get("ok") and not oom:
        return []
    lp = run.get("long_prompt") or {}
    tokens = lp.get("target_tokens") or lp.get("requested_tokens", "?")
    what = f"{lp.get('concurrency', '?')} concurrent prompts of {tokens} tokens"
    why = ("CUDA out of memory: " + oom[0].strip()[:160]) if oom else "; ".join(
        (run.get("failures") or ["no output"])[:2])
    remedies = long_prompt_remedies(settings)
    return [f"long prompts ({what}) failed: {why}"
            + (". Remedies, cheapest first: " + "; ".join(remedies) if oom and remedies else "")]


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
                                    inputs.get("max_drop_pct", 10),
                                    float(inputs.get("ttft_floor_ms", 50)) / 1000,
                                    inputs.get("rate_floor_tps", 1.0))
    mtp = mtp_regressions((inputs.get("speed_now") or {}).get("spec_decode"),
                          before.get("spec_decode"), inputs.get("mtp_floor", 0),
                          inputs.get("mtp_drop_pct", 100))
    verdict, line = race_check_verdict(inputs.get("race_rc"), inputs.get("race_mode", "auto"),
                                       inputs.get("race_summary", ""))
    soak_run = inputs.get("soak_run")
    failures = (regressions + mtp + ([line] if verdict == "fail" else [])
                + _soak_failures(soak_run, inputs.get("soak_stderr")))
    gates = {
        "race_check": [verdict, line],
        "soak_s": inputs.get("soak_s"),
        "soak": (soak_run or {}).get("soak") or {},
        "speed_before": before,
        "speed_baseline": no_baseline or f"the previous release {inputs.get('previous_release')}",
        "speed_regressions": regressions,
        "mtp_before": before.get("spec_decode") or {},
        "mtp_regressions": mtp,
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
            "vllm_dual_fast_long_prompt_failures": long_prompt_failures,
        }
