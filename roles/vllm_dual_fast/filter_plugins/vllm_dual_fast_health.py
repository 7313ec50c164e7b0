"""The health check's verdict and its parts: the kernel-log window, the patcher's start line, the
checks every release must pass and the canary's gates, and health_report, which builds the
report (files/schemas/health-report.schema.json) from what the checks returned, in one call
(pure; tested in tests/test_health_filters.py, tests/test_role_filters.py and
tests/test_health_report.py)."""

import json
import posixpath
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


def mtp_regressions(now, before, floor, max_drop_pct, expected=False):
    """The canary's MTP acceptance gate, one line each (empty: passed). now/before: smoke.py's
    speed "spec_decode" ({"acceptance_rate", "mean_acceptance_length", ...} or {"unavailable"});
    acceptance below `floor` fails, and so does a drop of more than max_drop_pct against the
    release before. expected: the release runs MTP (--speculative-config). Then no counters is a
    gate that cannot see, and fails: vLLM renames and removes metrics across releases, and a
    canary must not pass with MTP unmeasured. With MTP off there is nothing to judge."""
    rate = (now or {}).get("acceptance_rate")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool):
        if not expected:
            return []
        why = (now or {}).get("unavailable") or "no spec-decode counters in the speed run"
        return [f"MTP acceptance unmeasured ({why}): the release runs MTP but vLLM's spec-decode "
                "counters were not found on /metrics (renamed or removed in this vLLM?); the "
                "MTP gate cannot pass blind"]
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
    max_drop_pct, mtp_expected (the release runs MTP), race_rc, race_mode, race_summary, soak_s,
    soak_run (the soak's smoke.py JSON, None when it did not run), soak_stderr."""
    before, no_baseline = speed_baseline(inputs.get("previous_report"),
                                         inputs.get("previous_release"))
    regressions = speed_regressions(inputs.get("speed_now"), before,
                                    inputs.get("max_drop_pct", 10),
                                    float(inputs.get("ttft_floor_ms", 50)) / 1000,
                                    inputs.get("rate_floor_tps", 1.0))
    mtp = mtp_regressions((inputs.get("speed_now") or {}).get("spec_decode"),
                          before.get("spec_decode"), inputs.get("mtp_floor", 0),
                          inputs.get("mtp_drop_pct", 100), bool(inputs.get("mtp_expected")))
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


def json_object(text):
    """The JSON object a tool printed, or {} when it printed none (crashed, missing, garbage)."""
    try:
        value = json.loads(text or "")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


PATCH_OK = ("patched", "already-patched", "upstream-fixed")


def health_failures(checks):
    """What is wrong with a serving release, one readable line per failed check (empty: healthy).
    checks: smoke (smoke.py's JSON object), smoke_stderr, concurrency, kernel_log (lines),
    restarts_before / restarts_after (docker's RestartCount text), patch (patcher --check JSON)."""
    failures = []
    smoke = checks.get("smoke") or {}
    if not smoke.get("ok"):
        why = smoke.get("failures") or [checks.get("smoke_stderr") or "no output"]
        failures.append(f"smoke c={checks['concurrency']} failed: " + "; ".join(why))
    xid = [line for line in checks.get("kernel_log", []) if "NVRM: Xid" in line]
    if xid:
        failures.append("new kernel Xid lines: " + " | ".join(xid))
    before = str(checks.get("restarts_before") or "").strip()
    after = str(checks.get("restarts_after") or "").strip()
    if not after or before != after:
        went = f"from {before or 'none'} to {after or 'none'}"
        failures.append(f"container restart count went {went}")
    failures += _patch_failures(checks)
    return failures


def _patch_failures(checks):
    """The FlashInfer patch checks. With the patch on, the container must be patched (or fixed
    upstream); with it off, the image's FlashInfer may still be pinned only while the race is not
    exposed (no MTP, or fewer than 4 sequences)."""
    status = (checks.get("patch") or {}).get("status")
    stderr = checks.get("patch_stderr") or ""
    if not status and re.search(r"is not running|is restarting|No such container", stderr):
        return ["FlashInfer patch status unknown: the container was not running when it was asked"]
    if not status:
        said = stderr.strip()[-200:] or "the patcher printed nothing"
        return [f"FlashInfer patch status unreadable: {said}"]
    if checks.get("patch_enabled", True):
        if status not in PATCH_OK:
            return [f"FlashInfer patch status is {status} (expected patched or upstream-fixed)"]
        return []
    if status == "unpatched" and checks.get("race_exposed"):
        return [
            "the image's FlashInfer still pins the decode plan buffer while MTP runs with"
            f" max_num_seqs {checks.get('max_num_seqs')}: the Xid 31 race of vllm#40756;"
            " set vllm_dual_fast_patch_enabled: true (or use an image whose FlashInfer is fixed)"
        ]
    if status == "drift":
        return ["FlashInfer's decode.py is in a shape the patcher does not know (drift)"]
    return []


def _register(evidence, name):
    """A registered result in the evidence ({} when the task was never reached)."""
    return evidence.get(name) or {}


def _ran(result):
    """Whether a registered command ran (a skipped task registers no stdout)."""
    return "stdout" in result


def _race_summary(race):
    """race_check's last line; a setup step that failed says why on stderr."""
    said = str(race.get("stdout") or "").strip()
    return said or str(race.get("stderr") or "").strip().split("\n")[-1]


def _downtime_s(health, smoke_started_at, smoke):
    """Seconds from `up` (the old container stopping) to /health answering; None when the
    container was not recreated."""
    down_since = health.get("down_since")
    if str(down_since if down_since is not None else "") in ("", "None"):
        return None
    waited = ((smoke.get("health") or {}).get("waited_s")) or 0
    return round(float(smoke_started_at) + float(waited) - float(down_since), 1)


def health_report(evidence):
    """The report of one health check, built in one place (files/schemas/health-report.schema.json):
    whether the serving release is healthy, each failed check in one line, and what the checks
    measured. evidence: host, checked_at, serving (the release's manifest with dir, gates and
    patch_enabled), health (health.yml's input: baseline_report, baseline_release, long_prompt,
    down_since), settings (smoke_concurrency and the gates' thresholds), smoke_started_at, and the
    registered results of the checks: smoke, long_prompt, engine_log, soak, race_check,
    restarts_before, restarts_after, patch_at_start, patch_check (in the container),
    patch_check_image (a one-off container, the patch off), vllm_version; kernel: {lines,
    readable, source, window}."""
    serving, health = evidence["serving"], evidence.get("health") or {}
    settings, kernel = evidence.get("settings") or {}, evidence.get("kernel") or {}
    smoke_run = _register(evidence, "smoke")
    smoke = json_object(smoke_run.get("stdout"))
    patch_enabled = str(serving.get("patch_enabled")).lower() == "true"
    patch_run = _register(evidence, "patch_check" if patch_enabled else "patch_check_image")
    patch = json_object(patch_run.get("stdout"))
    after = str(_register(evidence, "restarts_after").get("stdout") or "").split(" ")
    at_start_line = _register(evidence, "patch_at_start").get("stdout") or ""
    at_start = patch_at_start(at_start_line)
    long_run_result = _register(evidence, "long_prompt")
    long_run = json_object(long_run_result.get("stdout")) if _ran(long_run_result) else None
    gates_on = str(serving.get("gates")).lower() == "true"
    soak = _register(evidence, "soak")
    race = _register(evidence, "race_check")
    canary = canary_gates({
        "speed_now": smoke.get("speed") or {},
        "previous_report": health.get("baseline_report"),
        "previous_release": health.get("baseline_release"),
        "max_drop_pct": settings.get("gate_speed_drop_pct"),
        "ttft_floor_ms": settings.get("gate_ttft_floor_ms"),
        "rate_floor_tps": settings.get("gate_speed_floor_tps"),
        "mtp_floor": settings.get("gate_mtp_acceptance_min"),
        "mtp_drop_pct": settings.get("gate_mtp_acceptance_drop_pct"),
        "mtp_expected": "--speculative-config" in (serving.get("serve_args") or []),
        "race_rc": race.get("rc"),
        "race_mode": settings.get("gate_race_check"),
        "race_summary": _race_summary(race),
        "soak_s": settings.get("gate_soak_s"),
        "soak_run": json_object(soak.get("stdout")) if _ran(soak) else None,
        "soak_stderr": soak.get("stderr") or "",
    }) if gates_on else {"gates": {}, "failures": []}
    failures = health_failures({
        "smoke": smoke, "smoke_stderr": smoke_run.get("stderr") or "",
        "concurrency": settings.get("smoke_concurrency"),
        "kernel_log": kernel.get("lines") or [],
        "restarts_before": _register(evidence, "restarts_before").get("stdout") or "",
        "restarts_after": after[0], "patch": patch,
        "patch_stderr": patch_run.get("stderr") or "",
        "patch_enabled": patch_enabled,
        "race_exposed": str(serving.get("race_exposed")).lower() == "true",
        "max_num_seqs": serving.get("max_num_seqs"),
    }) + long_prompt_failures(long_run, _register(evidence, "engine_log").get("stdout_lines"),
                              health.get("long_prompt") or {}) + canary["failures"]
    version = _register(evidence, "vllm_version")
    window = kernel.get("window") or {}
    return {
        "host": evidence.get("host"),
        "release": posixpath.basename(serving.get("dir") or ""),
        "image": serving.get("image"),
        "vllm_version": str(version.get("stdout") or "").strip() if version.get("rc") == 0 else "",
        "model": serving.get("model"),
        "served_model_name": serving.get("served_model_name"),
        "checked_at": evidence.get("checked_at"),
        "healthy": not failures,
        "failures": failures,
        "smoke": smoke,
        "health_wait_s": (smoke.get("health") or {}).get("waited_s"),
        "downtime_s": _downtime_s(health, evidence.get("smoke_started_at") or 0, smoke),
        "mtp": (smoke.get("speed") or {}).get("spec_decode") or {},
        "long_prompt": (long_run or {}).get("long_prompt") or {},
        "kernel_xid_lines": xid_lines(kernel.get("lines") or []),
        "kernel_log_readable": bool(kernel.get("readable")),
        "kernel_log_since": int(float(window.get("since_epoch") or 0)),
        "kernel_log_source": kernel.get("source"),
        "restart_count": after[0],
        "container_started_at": after[-1],
        "patch_status": at_start.get("status") or patch.get("status") or "unknown",
        "patch_at_start": at_start_line,
        "patch_enabled": patch_enabled,
        "patch_report": patch,
        "canary": gates_on,
        "gates": canary["gates"],
        "previous_speed": speed_baseline(health.get("baseline_report"),
                                         health.get("baseline_release"))[0],
    }


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
            "vllm_dual_fast_json_object": json_object,
            "vllm_dual_fast_health_failures": health_failures,
            "vllm_dual_fast_health_report": health_report,
        }
