"""The verdict a rig owner reads first: a few lines from a health report (pure; tested in
tests/integration/test_summary.py). The JSON report stays complete in its file; these lines name it.
Also importable as a plain module (scripts/rig-summary.py prints a saved report's verdict)."""

# The report shapes this reads (files/schemas/health-report.schema.json): 1, written before the
# key existed, had failures as lines of text; 2 has them as {check, result, line, advice}. Any
# other version is shown as unknown, never read as one of these.
KNOWN_REPORT_VERSIONS = (1, 2)
WIDTH = 160


def _clip(text, width=WIDTH):
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[:width - 1] + "…"


def report_version(report):
    """The report's schema version: 1 when it has none (written before the key existed), else
    what it says (an int, or the value as found when it is not one)."""
    version = report.get("schema_version", 1)
    return version if isinstance(version, int) and not isinstance(version, bool) else str(version)


def failure_lines(failures):
    """One line per failure: "FAILED line -> advice" ("CANNOT JUDGE ..." for a gate that could
    not see), read by field from a version 2 failure; a version 1 failure, a line of text, is
    shown as it is, with no advice (nothing is guessed from its words)."""
    lines = []
    for item in failures or []:
        if isinstance(item, dict):
            head = "CANNOT JUDGE" if item.get("result") == "cannot-judge" else "FAILED"
            advice = item.get("advice") or ""
            lines.append(f"  {head} [{item.get('check', '?')}] " + _clip(item.get("line", ""))
                         + (f" -> {advice}" if advice else ""))
        else:
            lines.append("  FAILED " + _clip(item))
    return lines


def _short_id(report):
    """' (sha256:0123456789ab)': what runs, the repo digest after a pull, else the image id;
    '' for a report from before releases were named by them."""
    named = report.get("image_digest") or report.get("image_id") or ""
    return f" ({str(named)[:19]})" if named else ""


def _rate(level):
    value = (level or {}).get("tokens_per_s") if isinstance(level, dict) else None
    return f"{float(value):.1f}" if isinstance(value, (int, float)) else None


def speed_line(speed, before=None):
    """'speed: c=1 48.2 tok/s (was 47.9), c=4 150.3 tok/s (was 149.0)', or None without figures."""
    speed = speed if isinstance(speed, dict) else {}
    before = before if isinstance(before, dict) else {}
    parts = []
    for key, label in (("c1", "c=1"), ("cN", f"c={speed.get('concurrency', 'N')}")):
        now = _rate(speed.get(key))
        if now is None:
            continue
        was = _rate(before.get(key))
        parts.append(f"{label} {now} tok/s" + (f" (was {was})" if was else ""))
    return "speed: " + ", ".join(parts) if parts else None


def p2p_line(p2p):
    """The verdict's line of the P2P check: the path NCCL takes and why."""
    paths = {"p2p": "NCCL's own path (peer access where offered)",
             "no-p2p": "peer path off (NCCL_P2P_DISABLE=1)"}
    path = paths.get(p2p.get("arm"), "NO PATH (must not serve)")
    arms = ", ".join(f"{name} {arm.get('result')}"
                     for name, arm in (p2p.get("arms") or {}).items() if isinstance(arm, dict))
    measured = "" if p2p.get("measured") else ", not measured"
    return f"P2P check: {path}{measured}: {_clip(p2p.get('why') or '?', 120)}" + (
        f" [{arms}]" if arms else "")


def envelope_line(envelope, pool):
    """The verdict's line of the rig's envelope (playbooks/fit.yml) and the pool this check saw."""
    seen = (pool or {}).get("kv_cache_tokens")
    return (f"envelope: {envelope.get('max_num_seqs')} sequences x "
            f"{envelope.get('max_model_len') or 0:,} tokens, measured in a KV pool of "
            f"{envelope.get('kv_cache_tokens') or 0:,} tokens ({envelope.get('report')}); "
            + (f"this start's pool: {seen:,} tokens" if seen else "no start seen in this check"))


def verdict_lines(report, report_path=""):
    """The verdict of one health report, first line first: healthy or not, the release, image,
    vLLM and FlashInfer, the patch, speed against the last good release, Xid lines, each failed
    check with what to do, and where the full report is."""
    report = report if isinstance(report, dict) else {}
    version = report_version(report)
    if version not in KNOWN_REPORT_VERSIONS:
        return [f"{report.get('host', '?')}: report of unknown schema version {version} - not "
                "read (a newer role wrote it?)"] + ([f"  full report: {report_path}"]
                                                    if report_path else [])
    healthy = str(report.get("healthy")).lower() == "true"
    failures = report.get("failures") or []
    patch = report.get("patch_report") if isinstance(report.get("patch_report"), dict) else {}
    gates = report.get("gates") if isinstance(report.get("gates"), dict) else {}
    failed = f", {len(failures)} check{'s' if len(failures) != 1 else ''} failed"
    head = (f"{report.get('host', '?')}: {'HEALTHY' if healthy else 'UNHEALTHY'}"
            f" - release {report.get('release') or '?'}" + ("" if healthy else failed))
    lines = [head,
             f"  image {report.get('image') or '?'}{_short_id(report)}, "
             f"vLLM {report.get('vllm_version') or '?'}, "
             f"FlashInfer {patch.get('flashinfer_version') or '?'}, "
             f"patch {report.get('patch_status') or 'unknown'}"]
    if report.get("model_commit"):
        lines.append(f"  model {report.get('model') or '?'} at commit "
                     f"{str(report['model_commit'])[:12]}")
    speed = speed_line((report.get("smoke") or {}).get("speed"),
                       report.get("previous_speed") or gates.get("speed_before"))
    if speed:
        lines.append("  " + speed)
    extra = []
    mtp = report.get("mtp") if isinstance(report.get("mtp"), dict) else {}
    if isinstance(mtp.get("mean_acceptance_length"), (int, float)):
        rate = mtp.get("acceptance_rate")
        extra.append(f"MTP {mtp['mean_acceptance_length']:.2f} tokens per step"
                     + (f" ({rate * 100:.0f} % of drafts accepted)"
                        if isinstance(rate, (int, float)) else ""))
    long_prompt = report.get("long_prompt") if isinstance(report.get("long_prompt"), dict) else {}
    if long_prompt:
        # A request that failed has no usage: null among the counts.
        tokens = [n for n in long_prompt.get("prompt_tokens") or [] if isinstance(n, int)]
        size = min(tokens) if tokens else long_prompt.get("target_tokens") or "?"
        extra.append(f"long prompts: {long_prompt.get('concurrency', '?')} at once of "
                     f"{size}+ tokens "
                     + ("answered" if long_prompt.get("ok") else "FAILED"))
    if isinstance(report.get("downtime_s"), (int, float)):
        extra.append(f"switch downtime {report['downtime_s']:g} s")
    if extra:
        lines.append("  " + "; ".join(extra))
    if report.get("lan_bind"):
        lines.append(f"  LAN: TLS only on {report['lan_bind']}, certificate SHA-256 "
                     f"{report.get('tls_fingerprint_sha256') or 'NOT READ'} (clients pin it)")
    p2p = report.get("p2p") if isinstance(report.get("p2p"), dict) else {}
    if p2p:
        lines.append("  " + p2p_line(p2p))
    envelope = report.get("envelope") if isinstance(report.get("envelope"), dict) else {}
    if envelope:
        lines.append("  " + envelope_line(envelope, report.get("kv_pool")))
    xid = report.get("kernel_xid_lines") or []
    if xid:
        lines.append(f"  kernel: {len(xid)} Xid line{'s' if len(xid) != 1 else ''}, first: "
                     + _clip(xid[0], 100))
    elif str(report.get("kernel_log_readable")).lower() == "false":
        lines.append("  kernel: log not readable here, Xid lines not checked")
    else:
        lines.append("  kernel: no Xid line during the check")
    judged = report.get("judged") if isinstance(report.get("judged"), dict) else {}
    failed_checks = {f.get("check") for f in failures if isinstance(f, dict)}
    for gate, said in sorted(judged.items()):
        # A gate that could not see and failed nothing (no canary ran it) is still said.
        if (isinstance(said, dict) and said.get("result") == "cannot-judge"
                and gate.replace("_", "-") not in failed_checks):
            lines.append(f"  cannot judge {gate.replace('_', ' ')}: " + _clip(said.get("reason")))
    lines += failure_lines(failures)
    if report_path:
        lines.append(f"  full report: {report_path}")
    return lines


class FilterModule:
    def filters(self):
        return {"vllm_dual_fast_verdict_lines": verdict_lines}
