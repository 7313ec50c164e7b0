"""The health check's verdict and its parts: the kernel-log window, the patcher's start line, the
checks every release must pass and the canary's gates, and health_verdict, which turns what the
checks returned into the report (files/schemas/health-report.schema.json), its failures and the
run's outcome (files/schemas/outcome.schema.json), in one call (pure; tested in
tests/unit/test_health_filters.py, tests/unit/test_role_filters.py and
tests/unit/test_health_report.py)."""

import base64
import json
import posixpath
import re

from ansible.module_utils.vllm_dual_fast_domain.envelope import engine_start_facts
from ansible.module_utils.vllm_dual_fast_domain.p2p import p2p_report

# The report's shape (files/schemas/health-report.schema.json); readers refuse other versions.
# 1 (no "schema_version" key): failures were lines of text. 2: failures are {check, result,
# line, advice} and every gate's result is in "judged".
REPORT_SCHEMA_VERSION = 2

# What to do first about a failed check, by its name (failures[].check).
ADVICE = {
    "switch": "a step of the switch failed (the release did not come up, or a step after health): "
              "the run's error names the step; then `docker logs vllm-dual-fast` on the rig",
    "preflight": "the rig stopped before its health check (a GPU lost, the driver gone): the "
                 "line says what; `nvidia-smi` and `journalctl -k | grep Xid` on the rig",
    "smoke": "the endpoint answered wrong or not at all: `docker logs vllm-dual-fast` on the rig",
    "kernel-xid": "a GPU fault: `journalctl -k | grep Xid` on the rig; Xid 31 at 4+ requests is "
                  "vllm#40756 (is the patch on?), 79 a card off the bus (power, riser)",
    "container-restart": "the engine died and Docker restarted it: `docker logs --since 30m "
                         "vllm-dual-fast` on the rig",
    "flashinfer-patch": "the patch is not in place: `docker logs vllm-dual-fast | grep fi-pinq`",
    "flashinfer-drift": "FlashInfer changed shape: `make upstream-watch` before this image",
    "speed": "slower than the release before: compare image and flags, or roll back",
    "mtp": "the draft head accepts less than before: compare the checkpoint and vLLM's flags",
    "race-check": "the GPU race check failed: keep the patch on, read the check's line above",
    "soak": "the engine failed under a sustained load: `docker logs vllm-dual-fast`",
    "long-prompt": "long prompts failed: apply the remedies the line names, cheapest first",
    "envelope": "the engine's KV pool is smaller than the one the rig's envelope was measured "
                "with (a new image, driver or model holds fewer sequences): run playbooks/fit.yml "
                "on this rig again",
}
# A gate that could not see: what to do is to make it see, not to tune the release.
CANNOT_JUDGE_ADVICE = {
    "speed": "the speed run gave no figures: read smoke.py's output in the report",
    "mtp": "vLLM's spec-decode counters are gone or renamed: check /metrics of this vLLM, and "
           "keep the last image whose counters the gate reads until smoke.py reads the new ones",
    "long-prompt": "the prompts' size is unknown (no /tokenize, no usage): check the engine's "
                   "API before trusting this release with long prompts",
    "kernel-xid": "the kernel log cannot be read here (an LXC or Proxmox guest, "
                  "kernel.dmesg_restrict=1, journald keeping no kernel lines): let the role "
                  "read it (run as root on the host, `sysctl kernel.dmesg_restrict=0`, or "
                  "journald's ReadKMsg=yes) before a canary can pass",
}
CHECKS = tuple(ADVICE)
# What a health report shows of the rig's envelope (fit.fit_envelope's keys)
ENVELOPE_REPORTED = ("max_num_seqs", "max_model_len", "max_num_batched_tokens",
                     "kv_cache_memory_bytes", "kv_cache_tokens", "measured_at", "report")
GATE_RESULTS = ("pass", "fail", "cannot-judge", "not-comparable", "warn", "off")
OUTCOME_STATES = ("updated", "unchanged", "rolled-back", "failed")
REASON_CHARS = 300


def failure(check, line, result="fail"):
    """One failed check as the report records it: {check, result, line, advice}. result "fail"
    (the check saw something wrong) or "cannot-judge" (it could not see)."""
    if check not in ADVICE:
        raise ValueError(f"unknown check {check!r} (one of {', '.join(CHECKS)})")
    if result not in ("fail", "cannot-judge"):
        raise ValueError(f"unknown failure result {result!r} (fail or cannot-judge)")
    advice = CANNOT_JUDGE_ADVICE.get(check, ADVICE[check]) if result == "cannot-judge" \
        else ADVICE[check]
    return {"check": check, "result": result, "line": str(line), "advice": advice}


def one_line(text, limit=REASON_CHARS):
    """Text on one line, at most `limit` characters (a reason in a state file or a table)."""
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def run_outcome(state, release="", failed_release="", previous_release="", reason="",
                previous_speed=None):
    """What one run did to a rig (files/schemas/outcome.schema.json), the one builder of
    `vllm_dual_fast_outcome`: the rollout's record and the pull script read it. Releases are
    named by their folder's name; reason is one line."""
    if state not in OUTCOME_STATES:
        raise ValueError(f"unknown outcome state {state!r} (one of {', '.join(OUTCOME_STATES)})")
    return {
        "state": state,
        "reason": one_line(reason),
        "release": posixpath.basename(str(release or "").rstrip("/")),
        "failed_release": posixpath.basename(str(failed_release or "").rstrip("/")),
        "previous_release": posixpath.basename(str(previous_release or "").rstrip("/")),
        "previous_speed": previous_speed if isinstance(previous_speed, dict) else {},
    }

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


def kernel_log(read, window):
    """What kernel_log.yml keeps of the kernel log module's read ({source, rc, stdout_lines,
    stderr, boot_id}): {lines written since the window opened, readable, source, error (what the
    reader said when it could not read)}."""
    read = read or {}
    readable = read.get("rc") == 0
    return {"lines": kernel_window_lines(read.get("stdout_lines") or [], read.get("source"),
                                         window, read.get("boot_id") or ""),
            "readable": readable, "source": read.get("source"),
            "error": "" if readable else str(read.get("stderr") or "").strip()}


def xid_lines(lines):
    """The NVIDIA driver's Xid lines (`NVRM: Xid (PCI:...): 31, ...`)."""
    return [line for line in lines or [] if "NVRM: Xid" in line]


def kernel_log_gate(kernel):
    """The kernel-log check: (result, lines). kernel: {lines, readable, source, error} as
    kernel_log.yml read it. "fail" with the Xid lines; "cannot-judge" when the log could not be
    read (dmesg refused, as on an LXC or Proxmox guest or under kernel.dmesg_restrict, and
    journald keeping no kernel lines): no Xid line seen is then not "no Xid"; else "pass"."""
    kernel = kernel or {}
    xid = xid_lines(kernel.get("lines"))
    if xid:
        return "fail", ["new kernel Xid lines: " + " | ".join(xid)]
    if str(kernel.get("readable")).lower() != "true":
        said = one_line(kernel.get("error") or "", 160) or "nothing said why"
        return "cannot-judge", [f"kernel log not readable here ({kernel.get('source') or '?'}: "
                                f"{said}): Xid lines not checked"]
    return "pass", []


# How vLLM's parser (FlexibleArgumentParser) reads a flag: `--a_b` is `--a-b`, `--flag=value`
# is `--flag value`, and `--json-flag.key value` sets one key of a JSON flag.
def serve_flag_values(args, flag, aliases=()):
    """Every value given for `flag` (or an alias: `-sc`) in a `vllm serve` argv, in order, as
    (key, value): key is '' for the whole value, else the dotted key (`--speculative-config.method
    mtp` gives ("method", "mtp"))."""
    names, args, found, index = {flag, *aliases}, [str(a) for a in args or []], [], 0
    while index < len(args):
        token = args[index]
        name, has_value, value = token.partition("=")
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        base, _, key = name.partition(".")
        if token.startswith("-") and base in names:
            if not has_value:
                value = args[index + 1] if index + 1 < len(args) else ""
                index += 1
            found.append((key, value))
        index += 1
    return found


def runs_speculative(args):
    """Whether a `vllm serve` argv turns speculative decoding (MTP) on, wherever it is given:
    the role's own --speculative-config, or the owner's extra args in any spelling vLLM takes
    (`--speculative_config=...`, `-sc`, dotted keys). The last whole value given wins."""
    on = False
    for key, value in serve_flag_values(args, "--speculative-config", ("-sc",)):
        on = True if key else value.strip() not in ("", "null", "None")
    return on


def serve_max_num_seqs(args, default):
    """--max-num-seqs as vLLM reads the argv (the last given wins: an owner's extra args after
    the role's own); `default` when not given or not a number."""
    given = serve_flag_values(args, "--max-num-seqs")
    try:
        return int(given[-1][1]) if given else int(default)
    except ValueError:
        return int(default)


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
    now/before: smoke.py's "speed" ({"c1": {"tokens_per_s", "ttft_s", "tokens_per_s_p10",
    "ttft_s_p90", ...}, "cN": {...}, "concurrency": N}), medians over rounds of distinct prompts.
    A change counts only when it is worse by more than max_drop_pct AND by more than the
    absolute floor (ttft_floor_s seconds, rate_floor_tps tokens/s) AND outside the spread the
    rounds before gave (a decode rate below their 10th percentile, a time to first token above
    their 90th, when recorded): a 50-100 ms time to first token rising by 20 ms, or a median
    that one slow request of the baseline already reached, is noise on a home rig, not a
    regression. Nothing to compare against passes."""
    found = []
    limit = float(max_drop_pct)
    for key in ("c1", "cN"):
        label = "c=1" if key == "c1" else f"c={(now or {}).get('concurrency', 'N')}"
        new, old = _figure(now, key, "tokens_per_s"), _figure(before, key, "tokens_per_s")
        low = _figure(before, key, "tokens_per_s_p10")
        if new is not None and old:
            drop = (old - new) / old * 100
            if drop > limit and old - new > float(rate_floor_tps) and (low is None or new < low):
                found.append(f"decode tokens/s at {label} fell {drop:.0f} % ({old:g} -> "
                             f"{new:g}), more than the {limit:g} % allowed")
    new_ttft, old_ttft = _figure(now, "c1", "ttft_s"), _figure(before, "c1", "ttft_s")
    high = _figure(before, "c1", "ttft_s_p90")
    if new_ttft is not None and old_ttft:
        rise = (new_ttft - old_ttft) / old_ttft * 100
        if rise > limit and new_ttft - old_ttft > float(ttft_floor_s) and (
                high is None or new_ttft > high):
            found.append(f"time to first token at c=1 rose {rise:.0f} % ({old_ttft:g} s -> "
                         f"{new_ttft:g} s), more than the {limit:g} % and "
                         f"{float(ttft_floor_s) * 1000:g} ms allowed")
    return found


SPEED_CONDITION_FIELDS = ("power.limit", "temperature.gpu", "clocks.sm",
                          "clocks_event_reasons.active", "driver_version", "enforced.power.limit")


def speed_conditions(text):
    """What the GPUs were at when a speed was measured, from `nvidia-smi --query-gpu=` the
    SPEED_CONDITION_FIELDS `--format=csv,noheader,nounits` (one line per GPU): {power_limit_w
    (set), power_limit_enforced_w (the lowest of the card's limiters: what it ran under),
    temperature_c, sm_clock_mhz, clocks_event_reasons: a list each, one per GPU;
    driver_version}. {} when nothing readable was printed (no nvidia-smi, a GPU lost)."""
    rows = [[cell.strip() for cell in line.split(",")] for line in str(text or "").splitlines()
            if line.strip()]
    rows = [row for row in rows if len(row) == len(SPEED_CONDITION_FIELDS)]
    if not rows:
        return {}

    def number(cell):
        try:
            return float(cell)
        except ValueError:
            return None
    return {"power_limit_w": [number(r[0]) for r in rows],
            "temperature_c": [number(r[1]) for r in rows],
            "sm_clock_mhz": [number(r[2]) for r in rows],
            "clocks_event_reasons": [r[3] for r in rows],
            "driver_version": rows[0][4],
            "power_limit_enforced_w": [number(r[5]) for r in rows]}


def not_comparable(now, then):
    """Why speeds measured under conditions `now` and `then` (speed_conditions) cannot be
    compared: another power limit or another driver ('' when they can, or when either is
    unknown: a report from before the conditions were recorded is judged as before). The limit
    the cards enforced, where both say it (a lower limiter than the one set, the VBIOS or an
    out-of-band cap, slows a card as much as a lower setting); else the limit set."""
    if not now or not then:
        return ""
    key = ("power_limit_enforced_w" if now.get("power_limit_enforced_w")
           and then.get("power_limit_enforced_w") else "power_limit_w")
    limits = [round(w) for w in now.get(key) or [] if w is not None]
    before = [round(w) for w in then.get(key) or [] if w is not None]
    if limits and before and limits != before:
        return (f"power limit {'/'.join(map(str, before))} W then, "
                f"{'/'.join(map(str, limits))} W now")
    if now.get("driver_version") and then.get("driver_version") and \
            now["driver_version"] != then["driver_version"]:
        return f"driver {then['driver_version']} then, {now['driver_version']} now"
    return ""


def speed_reference(current, report, healthy_at, pinned=False):
    """The rig's speed reference once `report` passed health (kept beside `last-good` in
    speed-reference.json): {release, speed, conditions, set_at}. The stored one (`current`) is
    kept while this check's conditions are comparable with it (same power limit and driver),
    and always when the owner pinned it; else this release, just proven here under these
    conditions, becomes the reference. The canary's second speed gate compares with it, so
    releases each a little slower than the last cannot add up unseen."""
    current = current if isinstance(current, dict) else {}
    speed = ((report or {}).get("smoke") or {}).get("speed") or {}
    conditions = (report or {}).get("speed_conditions") or {}
    if current.get("speed") and (pinned or not not_comparable(conditions, current.get(
            "conditions"))):
        return current
    if _figure(speed, "c1", "tokens_per_s") is None:
        return current
    return {"release": report.get("release"), "speed": speed, "conditions": conditions,
            "set_at": healthy_at}


def speed_gate(now, before, max_drop_pct, ttft_floor_s=0.05, rate_floor_tps=1.0,
               conditions=None, reference=None, reference_drop_pct=None):
    """The canary's speed gate: (result, lines, notes). Against the release before (`before`,
    its speed with its "conditions") by max_drop_pct, and against the rig's speed reference
    (speed_reference) by reference_drop_pct. A comparison across another power limit or driver
    is not made: a note says "not comparable". "pass" with nothing to compare against (the
    first release here); "cannot-judge" when a comparable speed exists and this run gave no
    figures (a gate that cannot see must not pass); "fail" with the regressions;
    "not-comparable" when every comparison was refused; else "pass"."""
    before = before or {}
    targets = [("the last good release", before, float(max_drop_pct))]
    if reference and reference_drop_pct is not None:
        targets.append((f"the reference {reference.get('release') or '?'} (since "
                        f"{str(reference.get('set_at') or '?')[:10]})",
                        {**(reference.get("speed") or {}),
                         "conditions": reference.get("conditions")}, float(reference_drop_pct)))
    lines, notes, blind, compared = [], [], [], False
    for index, (label, then, limit) in enumerate(targets):
        if _figure(then, "c1", "tokens_per_s") is None:
            continue
        why = not_comparable(conditions, then.get("conditions"))
        if why:
            notes.append(f"not comparable with {label}: {why}")
            continue
        compared = True
        if _figure(now, "c1", "tokens_per_s") is None:
            return "cannot-judge", ["speed unmeasured: the speed run gave no decode tokens/s at "
                                    "c=1, so the release cannot be compared with the one "
                                    "before"], notes
        found = speed_regressions(now, then, limit, ttft_floor_s, rate_floor_tps)
        lines += found if index == 0 else [f"against {label}: {f}" for f in found]
        gone, unbased = figures_unjudged(now, then)
        blind += [f for f in gone if f not in blind]
        notes += [f"not compared with {label}: it has no {f}" for f in unbased]
    if lines:
        return "fail", lines, notes
    if blind:
        return "cannot-judge", [f"speed unmeasured: the speed run gave no {f}, so it cannot be "
                                "compared with the release before" for f in blind], notes
    return ("not-comparable" if notes and not compared else "pass"), [], notes


# Every figure speed_regressions compares: (level, key, what it is in a line).
COMPARED_FIGURES = (("c1", "tokens_per_s", "decode tokens/s at c=1"),
                    ("cN", "tokens_per_s", "decode tokens/s at c=N"),
                    ("c1", "ttft_s", "time to first token at c=1"))


def figures_unjudged(now, then):
    """The compared figures (COMPARED_FIGURES) that a comparison of `now` with `then` cannot
    judge: (missing now while `then` has them: the gate is blind to them, and must say so rather
    than pass; missing in `then`: nothing to compare with, said as a note)."""
    gone, unbased = [], []
    for level, key, what in COMPARED_FIGURES:
        has_now, has_then = (_figure(now, level, key) is not None,
                             _figure(then, level, key) is not None)
        if has_then and not has_now:
            gone.append(what)
        elif has_now and not has_then:
            unbased.append(what)
    return gone, unbased


def mtp_gate(now, before, floor, max_drop_pct, expected=False):
    """The canary's MTP acceptance gate: (result, lines). now/before: smoke.py's speed
    "spec_decode" ({"acceptance_rate", "mean_acceptance_length", ...} or {"unavailable"});
    acceptance below `floor` fails, and so does a drop of more than max_drop_pct against the
    release before. expected: the release runs MTP (--speculative-config). Then no counters is
    "cannot-judge": vLLM renames and removes metrics across releases, and a canary must not pass
    with MTP unmeasured. With MTP off there is nothing to judge ("off")."""
    rate = (now or {}).get("acceptance_rate")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool):
        if not expected:
            return "off", []
        why = (now or {}).get("unavailable") or "no spec-decode counters in the speed run"
        return "cannot-judge", [
            f"MTP acceptance unmeasured ({why}): the release runs MTP but vLLM's spec-decode "
            "counters were not found on /metrics (renamed or removed in this vLLM?); the MTP "
            "gate cannot pass blind"]
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
    return ("fail" if found else "pass"), found


def mtp_regressions(now, before, floor, max_drop_pct, expected=False):
    """mtp_gate's lines alone (empty: passed or nothing to judge)."""
    return mtp_gate(now, before, floor, max_drop_pct, expected)[1]


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


# A long prompt shorter than this share of the size asked for did not test what was asked.
LONG_PROMPT_MIN_SHARE = 0.9


def long_prompt_gate(run, log_lines, settings):
    """The long-prompt gate: (result, lines). "off" when it did not run; "fail" with
    long_prompt_failures' line; "cannot-judge" when the prompts' real size is unknown (the
    engine reported no usage and no /tokenize count sized them) or fell short of
    LONG_PROMPT_MIN_SHARE of the tokens asked for (memory at that size was never tried)."""
    if run is None:
        return "off", []
    found = long_prompt_failures(run, log_lines, settings)
    if found:
        return "fail", found
    lp = run.get("long_prompt") or {}
    target = lp.get("target_tokens") or lp.get("requested_tokens") or 0
    counted = [n for n in lp.get("prompt_tokens") or [] if isinstance(n, int)
               and not isinstance(n, bool)]
    if not counted and lp.get("sized_by") != "tokenize":
        return "cannot-judge", [
            f"long prompts unmeasured: the engine reported no usage and no /tokenize count "
            f"sized them ({lp.get('sized_by') or 'unsized'}), so {target} tokens may not have "
            "been reached"]
    if counted and isinstance(target, int) and min(counted) < LONG_PROMPT_MIN_SHARE * target:
        return "cannot-judge", [
            f"long prompts too short to judge: {min(counted)} of the {target} tokens asked for "
            f"({lp.get('sized_by') or 'unsized'})"]
    return "pass", []


# Worst first: what one gate says when it judged twice (the long prompts: the burst, then one at
# max_model_len).
_GATE_ORDER = ("fail", "cannot-judge", "not-comparable", "warn", "pass", "off")


def _worst_gate(*judged):
    """(result, lines) of several runs of one gate: the worst result, every run's lines."""
    result = min((r for r, _ in judged), key=_GATE_ORDER.index)
    return result, [line for _, lines in judged for line in lines]


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
    """The canary's gates, judged in one place: {"gates": what the report records, "judged":
    {gate: {result, reason}}, "failed": failure() objects, "failures": their lines (empty:
    passed)}. A gate that cannot judge fails. inputs: speed_now (smoke.py's "speed"),
    previous_report (the rig's report before the switch), previous_release (the release that
    served before), max_drop_pct, mtp_expected (the release runs MTP), race_rc, race_mode,
    race_summary, soak_s, soak_run (the soak's smoke.py JSON, None when it did not run),
    soak_stderr, conditions (speed_conditions of this check), reference (the rig's speed
    reference, speed_reference) and reference_drop_pct."""
    before, no_baseline = speed_baseline(inputs.get("previous_report"),
                                         inputs.get("previous_release"))
    before_conditions = (inputs.get("previous_report") or {}).get("speed_conditions") \
        if before else None
    speed_result, regressions, speed_notes = speed_gate(
        inputs.get("speed_now"), {**before, "conditions": before_conditions},
        inputs.get("max_drop_pct", 10), float(inputs.get("ttft_floor_ms", 50)) / 1000,
        inputs.get("rate_floor_tps", 1.0), inputs.get("conditions"), inputs.get("reference"),
        inputs.get("reference_drop_pct"))
    mtp_result, mtp = mtp_gate((inputs.get("speed_now") or {}).get("spec_decode"),
                               before.get("spec_decode"), inputs.get("mtp_floor", 0),
                               inputs.get("mtp_drop_pct", 100), bool(inputs.get("mtp_expected")))
    verdict, line = race_check_verdict(inputs.get("race_rc"), inputs.get("race_mode", "auto"),
                                       inputs.get("race_summary", ""))
    soak_run = inputs.get("soak_run")
    soak = _soak_failures(soak_run, inputs.get("soak_stderr"))
    failed = ([failure("speed", f, _failed(speed_result)) for f in regressions]
              + [failure("mtp", f, _failed(mtp_result)) for f in mtp]
              + ([failure("race-check", line)] if verdict == "fail" else [])
              + [failure("soak", f) for f in soak])
    gates = {
        "race_check": [verdict, line],
        "soak_s": inputs.get("soak_s"),
        "soak": (soak_run or {}).get("soak") or {},
        "speed_before": before,
        "speed_baseline": no_baseline or f"the previous release {inputs.get('previous_release')}",
        "speed_regressions": regressions,
        "speed_not_comparable": speed_notes,
        "speed_reference": inputs.get("reference") or {},
        "mtp_before": before.get("spec_decode") or {},
        "mtp_regressions": mtp,
    }
    judged = {
        "speed": _judged(speed_result, regressions + speed_notes, no_baseline),
        "mtp": _judged(mtp_result, mtp),
        "race_check": _judged(verdict, [line]),
        "soak": _judged("off" if soak_run is None else ("fail" if soak else "pass"), soak),
    }
    return {"gates": gates, "judged": judged, "failed": failed,
            "failures": [f["line"] for f in failed]}


def _failed(result):
    """A gate's failure result: "cannot-judge" stays so; anything else that failed is "fail"."""
    return "cannot-judge" if result == "cannot-judge" else "fail"


def _judged(result, lines, reason=""):
    """One gate's entry in the report's "judged": {result, reason} (the first line, else why)."""
    return {"result": result, "reason": one_line((list(lines or []) + [reason])[0] or "")}


def json_object(text):
    """The JSON object a tool printed, or {} when it printed none (crashed, missing, garbage)."""
    try:
        value = json.loads(text or "")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


PATCH_OK = ("patched", "already-patched", "upstream-fixed")


def health_check_failures(checks):
    """What is wrong with a serving release: failure() objects, one per failed check (empty:
    healthy). checks: smoke (smoke.py's JSON object), smoke_stderr, concurrency, kernel_log
    (lines), restarts_before / restarts_after (docker's RestartCount text), patch (patcher
    --check JSON), patch_stderr, patch_enabled, race_exposed, max_num_seqs."""
    failed = []
    smoke = checks.get("smoke") or {}
    if not smoke.get("ok"):
        why = smoke.get("failures") or [checks.get("smoke_stderr") or "no output"]
        failed.append(failure("smoke", f"smoke c={checks['concurrency']} failed: "
                              + "; ".join(why)))
    xid = [line for line in checks.get("kernel_log", []) if "NVRM: Xid" in line]
    if xid:
        failed.append(failure("kernel-xid", "new kernel Xid lines: " + " | ".join(xid)))
    before = str(checks.get("restarts_before") or "").strip()
    after = str(checks.get("restarts_after") or "").strip()
    if not after or before != after:
        went = f"from {before or 'none'} to {after or 'none'}"
        failed.append(failure("container-restart", f"container restart count went {went}"))
    failed += [failure(check, line) for check, line in _patch_failures(checks)]
    return failed


def health_failures(checks):
    """health_check_failures' lines alone (empty: healthy)."""
    return [f["line"] for f in health_check_failures(checks)]


def _patch_failures(checks):
    """The FlashInfer patch checks, (check, line) each. With the patch on, the container must be
    patched (or fixed upstream); with it off, the image's FlashInfer may still be pinned only
    while the race is not exposed (no MTP, or fewer than 4 sequences)."""
    status = (checks.get("patch") or {}).get("status")
    stderr = checks.get("patch_stderr") or ""
    if not status and re.search(r"is not running|is restarting|No such container", stderr):
        return [("flashinfer-patch", "FlashInfer patch status unknown: the container was not "
                                     "running when it was asked")]
    if not status:
        said = stderr.strip()[-200:] or "the patcher printed nothing"
        return [("flashinfer-patch", f"FlashInfer patch status unreadable: {said}")]
    if checks.get("patch_enabled", True):
        if status not in PATCH_OK:
            return [("flashinfer-drift" if status == "drift" else "flashinfer-patch",
                     f"FlashInfer patch status is {status} (expected patched or upstream-fixed)")]
        return []
    if status == "unpatched" and checks.get("race_exposed"):
        return [("flashinfer-patch",
                 "the image's FlashInfer still pins the decode plan buffer while MTP runs with"
                 f" max_num_seqs {checks.get('max_num_seqs')}: the Xid 31 race of vllm#40756;"
                 " set vllm_dual_fast_patch_enabled: true (or use an image whose FlashInfer is"
                 " fixed)")]
    if status == "drift":
        return [("flashinfer-drift", "FlashInfer's decode.py is in a shape the patcher does not "
                                     "know (drift)")]
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


def _ungated(speed_now, mtp_expected):
    """"judged" for a release whose canary gates did not run: each gate "off", but MTP that
    runs unmeasured is "cannot-judge" on every rig's verdict (shown, not failed: no gate ran)."""
    mtp_result, mtp = mtp_gate((speed_now or {}).get("spec_decode"), {}, 0, 100, mtp_expected)
    return {"speed": _judged("off", [], "no canary gate on this run"),
            "mtp": _judged("cannot-judge", mtp) if mtp_result == "cannot-judge"
            else _judged("off", [], "no canary gate on this run"),
            "race_check": _judged("off", [], "no canary gate on this run"),
            "soak": _judged("off", [], "no canary gate on this run")}


def health_report(evidence):
    """The report of one health check, built in one place (files/schemas/health-report.schema.json):
    whether the serving release is healthy, each failed check ({check, result, line, advice}),
    each gate's result, and what the checks measured. evidence: host, checked_at, serving (the
    release's manifest with dir, gates and patch_enabled), health (health.yml's input:
    baseline_report, baseline_release, long_prompt, down_since), settings (smoke_concurrency and
    the gates' thresholds), smoke_started_at, and the registered results of the checks: smoke,
    long_prompt, engine_log, soak, race_check, restarts_before, restarts_after, patch_at_start,
    patch_check (in the container), patch_check_image (a one-off container, the patch off),
    long_prompt_full (one prompt of max_model_len, after the burst), vllm_version,
    speed_conditions (nvidia-smi's SPEED_CONDITION_FIELDS after the speed run);
    kernel: {lines, readable, source, window, error}. health may hold speed_reference (the rig's
    speed-reference.json) for the canary's second speed gate."""
    serving, health = evidence["serving"], evidence.get("health") or {}
    settings, kernel = evidence.get("settings") or {}, evidence.get("kernel") or {}
    smoke_run = _register(evidence, "smoke")
    smoke = json_object(smoke_run.get("stdout"))
    patch_enabled = str(serving.get("patch_enabled")).lower() == "true"
    patch_run = _register(evidence, "patch_check" if patch_enabled else "patch_check_image")
    patch = json_object(patch_run.get("stdout"))
    # `{{.RestartCount}} {{.State.StartedAt}} {{.Image}}` of the serving container.
    after = (str(_register(evidence, "restarts_after").get("stdout") or "").split(" ")
             + ["", ""])[:3]
    at_start_line = _register(evidence, "patch_at_start").get("stdout") or ""
    at_start = patch_at_start(at_start_line)
    long_run_result = _register(evidence, "long_prompt")
    long_run = json_object(long_run_result.get("stdout")) if _ran(long_run_result) else None
    gates_on = str(serving.get("gates")).lower() == "true"
    mtp_expected = runs_speculative(serving.get("serve_args"))
    soak = _register(evidence, "soak")
    race = _register(evidence, "race_check")
    conditions = speed_conditions(_register(evidence, "speed_conditions").get("stdout"))
    canary = canary_gates({
        "speed_now": smoke.get("speed") or {},
        "previous_report": health.get("baseline_report"),
        "previous_release": health.get("baseline_release"),
        "max_drop_pct": settings.get("gate_speed_drop_pct"),
        "ttft_floor_ms": settings.get("gate_ttft_floor_ms"),
        "rate_floor_tps": settings.get("gate_speed_floor_tps"),
        "mtp_floor": settings.get("gate_mtp_acceptance_min"),
        "mtp_drop_pct": settings.get("gate_mtp_acceptance_drop_pct"),
        "mtp_expected": mtp_expected,
        "race_rc": race.get("rc"),
        "race_mode": settings.get("gate_race_check"),
        "race_summary": _race_summary(race),
        "soak_s": settings.get("gate_soak_s"),
        "soak_run": json_object(soak.get("stdout")) if _ran(soak) else None,
        "soak_stderr": soak.get("stderr") or "",
        "conditions": conditions,
        "reference": health.get("speed_reference") or {},
        "reference_drop_pct": settings.get("gate_speed_reference_drop_pct"),
    }) if gates_on else {"gates": {}, "failed": [],
                         "judged": _ungated(smoke.get("speed"), mtp_expected)}
    full_result = _register(evidence, "long_prompt_full")
    full_run = json_object(full_result.get("stdout")) if _ran(full_result) else None
    log_lines = _register(evidence, "engine_log").get("stdout_lines")
    # The prompt at max_model_len runs only after the burst passed: an out-of-memory line in the
    # log is then its own, not the burst's.
    long_result, long_lines = _worst_gate(
        long_prompt_gate(long_run, log_lines if full_run is None else [],
                         health.get("long_prompt") or {}),
        long_prompt_gate(full_run, log_lines, health.get("long_prompt") or {}))
    failures = health_check_failures({
        "smoke": smoke, "smoke_stderr": smoke_run.get("stderr") or "",
        "concurrency": settings.get("smoke_concurrency"),
        "kernel_log": kernel.get("lines") or [],
        "restarts_before": _register(evidence, "restarts_before").get("stdout") or "",
        "restarts_after": after[0], "patch": patch,
        "patch_stderr": patch_run.get("stderr") or "",
        "patch_enabled": patch_enabled,
        "race_exposed": str(serving.get("race_exposed")).lower() == "true",
        "max_num_seqs": serving.get("max_num_seqs"),
    }) + [failure("long-prompt", line, _failed(long_result)) for line in long_lines] \
        + canary["failed"]
    running_image, release_image = after[2].strip(), str(serving.get("image_id") or "")
    if running_image and release_image and running_image != release_image:
        failures.append(failure("switch", f"the container runs image {running_image[:19]}, not "
                                f"the release's {release_image[:19]}: what serves is not what "
                                "this release names"))
    # A canary must see its headline risk: a kernel log it cannot read fails it. Elsewhere the
    # blind check is shown in "judged" (and on the verdict) without failing the rig.
    kernel_result, kernel_lines = kernel_log_gate(kernel)
    if kernel_result == "cannot-judge" and gates_on:
        failures += [failure("kernel-xid", line, "cannot-judge") for line in kernel_lines]
    pool = engine_start_facts("\n".join(log_lines or []))
    envelope = settings.get("envelope") or {}
    envelope_result, envelope_lines = envelope_gate(envelope, pool)
    if envelope_result == "fail":
        failures += [failure("envelope", line) for line in envelope_lines]
    version = _register(evidence, "vllm_version")
    window = kernel.get("window") or {}
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "host": evidence.get("host"),
        "release": posixpath.basename(serving.get("dir") or ""),
        "image": serving.get("image"),
        # What runs: the serving container's own image, read from it (the manifest's id when it
        # could not be read); a container on another image than the release's fails "switch".
        "image_id": after[2].strip() or serving.get("image_id") or "",
        "release_image_id": serving.get("image_id") or "",
        "image_digest": serving.get("image_digest") or "",
        "model_commit": serving.get("model_commit") or "",
        "vllm_version": str(version.get("stdout") or "").strip() if version.get("rc") == 0 else "",
        "model": serving.get("model"),
        "served_model_name": serving.get("served_model_name"),
        "checked_at": evidence.get("checked_at"),
        "healthy": not failures,
        "failures": failures,
        "judged": {**canary["judged"], "long_prompt": _judged(long_result, long_lines),
                   "kernel_xid": _judged(kernel_result, kernel_lines),
                   "envelope": _judged(envelope_result, envelope_lines)},
        "smoke": smoke,
        "speed_conditions": conditions,
        "health_wait_s": (smoke.get("health") or {}).get("waited_s"),
        "downtime_s": _downtime_s(health, evidence.get("smoke_started_at") or 0, smoke),
        "mtp": (smoke.get("speed") or {}).get("spec_decode") or {},
        "long_prompt": (long_run or {}).get("long_prompt") or {},
        "long_prompt_full": (full_run or {}).get("long_prompt") or {},
        "kernel_xid_lines": xid_lines(kernel.get("lines") or []),
        "kernel_log_readable": bool(kernel.get("readable")),
        "kernel_log_since": int(float(window.get("since_epoch") or 0)),
        "kernel_log_source": kernel.get("source"),
        "restart_count": after[0],
        "container_started_at": after[1],
        "patch_status": at_start.get("status") or patch.get("status") or "unknown",
        "patch_at_start": at_start_line,
        "patch_enabled": patch_enabled,
        "patch_report": patch,
        "canary": gates_on,
        "gates": canary["gates"],
        "previous_speed": speed_baseline(health.get("baseline_report"),
                                         health.get("baseline_release"))[0],
        "upgrades": upgrades_state(evidence.get("upgrade_guard"), evidence.get("driver_holds")),
        # What the engine said of its KV pool at a start this check saw (None: none seen), and
        # the rig's envelope (playbooks/fit.yml; {}: not fitted).
        "kv_pool": {key: pool.get(key) for key in ("kv_cache_tokens", "max_concurrency",
                                                   "concurrency_for_tokens")},
        "envelope": {key: envelope.get(key) for key in ENVELOPE_REPORTED if key in envelope},
        # The last P2P check (p2p_check.yml): its decision and arms, {} when none was kept.
        "p2p": p2p_report(evidence.get("p2p_check")),
        # The LAN bind over TLS: where, and the certificate clients pin (empty on loopback).
        "lan_bind": str(evidence.get("lan_bind") or ""),
        "tls_fingerprint_sha256": str(evidence.get("tls_fingerprint") or ""),
    }


def envelope_gate(envelope, pool):
    """The envelope gate: (result, lines). envelope: the rig's, as playbooks/fit.yml wrote it in
    its host_vars ({} or none: not fitted, "off"); pool: engine_start_facts of this check's
    engine log. "fail" when the engine started with a smaller KV pool than the envelope held
    its sequences in; "not-comparable" when this check saw no start (an unchanged container)."""
    measured = (envelope or {}).get("kv_cache_tokens")
    if not measured:
        return "off", []
    tokens = (pool or {}).get("kv_cache_tokens")
    if not tokens:
        return "not-comparable", ["no engine start in this check's log: the KV pool was not "
                                  "compared with the envelope's"]
    if tokens < int(measured):
        return "fail", [f"KV pool {tokens:,} tokens, under the {int(measured):,} the envelope "
                        f"({envelope.get('max_num_seqs')} sequences) was measured with (fit report "
                        f"{envelope.get('report')})"]
    return "pass", []


def upgrades_state(guard_stat, holds_slurp):
    """What keeps kernel and driver updates to maintenance runs on this rig, as read there:
    {unattended_upgrades_kept_away: the role's blacklist file is in place, held_by_role: the
    holds the role recorded (driver-holds.json), sorted}. Registered results in, so a read that
    failed says "not kept away" and "none held" rather than guessing."""
    kept_away = bool(((guard_stat or {}).get("stat") or {}).get("exists"))
    held = []
    content = (holds_slurp or {}).get("content")
    if content:
        try:
            held = json.loads(base64.b64decode(content)).get("held_by_role") or []
        except (ValueError, TypeError, AttributeError):
            held = []
    return {"unattended_upgrades_kept_away": kept_away, "held_by_role": sorted(map(str, held))}


def health_verdict(evidence):
    """health.yml's one call: {report, failures, outcome}. report: health_report(evidence);
    failures: its failed checks; outcome: what this run did if it ends here (run_outcome):
    "failed" with the failures' lines, else "updated" for a release new here (health's is_new)
    or "unchanged". The rollback files build their own outcome (rolled-back, failed, unchanged)
    with the same builder from these failures."""
    report = health_report(evidence)
    health = evidence.get("health") or {}
    previous = health.get("previous_release") or ""
    if report["failures"]:
        state = "failed"
    else:
        state = "updated" if str(health.get("is_new")).lower() == "true" else "unchanged"
    outcome = run_outcome(state, release=report["release"], previous_release=previous,
                          reason="; ".join(f["line"] for f in report["failures"]),
                          failed_release=report["release"] if report["failures"] else "",
                          previous_speed=speed_baseline(health.get("baseline_report"),
                                                        previous)[0])
    return {"report": report, "failures": report["failures"], "outcome": outcome}


def stopped_report(report, host, release, because, checked_at, check="switch"):
    """The report of a release that a run could not judge or that failed after its check:
    report-failed.json of a switch (check "switch": the release did not come up, or a step
    after health failed), or report.json of a read-only check that stopped in preflight (check
    "preflight": a GPU lost). The release's own health report is kept when it is this
    release's, marked unhealthy with `because` unless it names failures already; else a report
    of the failure alone: {schema_version, host, release, checked_at, healthy: false,
    failures}."""
    release = posixpath.basename(str(release or "").rstrip("/"))
    why = [failure(check, one_line(because or "unknown failure", 1000))]
    if isinstance(report, dict) and report.get("release") == release and check == "switch":
        return {**report, "healthy": False, "failures": report.get("failures") or why}
    return {"schema_version": REPORT_SCHEMA_VERSION, "host": host, "release": release,
            "checked_at": checked_at, "healthy": False, "failures": why}
