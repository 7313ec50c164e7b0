"""A rig's fit (playbooks/fit.yml, issue 46 part 1): the verdict of one candidate from its load
(files/fit_load.py), what vLLM said at its start (envelope.engine_start_facts) and the kernel log
(verdict.kernel_log_gate); the envelope kept, the rig's host_vars file of it, the fit report
(files/schemas/fit-report.schema.json) and the candidates tried when the owner names none."""

from __future__ import annotations

import json

from ansible.module_utils.vllm_dual_fast_domain.verdict import kernel_log_gate

MB = 1000 * 1000
MIB = 1 << 20


def candidate_key(candidate) -> dict:
    """A candidate as the fit names it: its three serve settings, as integers."""
    return {key: int(candidate[key]) for key in
            ("max_num_seqs", "max_model_len", "max_num_batched_tokens")}


def fit_candidate_verdict(candidate, start, load, kernel, bounds) -> dict:
    """Whether one candidate holds, and every reason it does not: {candidate, holds, reasons}.
    start: engine_start_facts of its start; load: fit_load.py's report (None: it never ran);
    kernel: the kernel log since the load began (kernel_log.yml: an Xid line fails it, and so
    does a log that could not be read: no Xid seen is then not no Xid); bounds: {min_free_mib,
    max_growth_mb, min_aggregate_tokens_per_s, max_ttft_s} (0: that bound is off)."""
    reasons = []
    refused = (start or {}).get("refused") or {}
    if refused:
        estimated = refused.get("estimated_max_model_len") or 0
        reasons.append(f"vLLM refused max_model_len {refused.get('max_model_len')}"
                       + (f": its KV pool holds one request of {estimated} tokens"
                          if estimated else ": no KV pool"))
    elif not (start or {}).get("kv_cache_tokens"):
        reasons.append("the engine never said its KV pool (it did not start)")
    if load is None:
        return {"candidate": candidate_key(candidate), "holds": False,
                "reasons": reasons or ["the load did not run"]}
    reasons += [str(failure) for failure in load.get("failures") or []]
    delta = (load.get("preemptions") or {}).get("delta")
    streams = load.get("streams") or {}
    if delta is None:
        reasons.append("vllm:num_preemptions_total was not read: preemptions unknown")
    elif delta > 0:
        reasons.append(f"{delta:g} preemptions under {streams.get('requests')} streams: the KV "
                       "pool does not hold them together")
    # vLLM leaves a request its pool cannot take waiting, and does not count that as preempted
    running = streams.get("running_peak")
    if running is None:
        reasons.append("vllm:num_requests_running was not read: streams together unknown")
    elif running < (streams.get("requests") or 0):
        reasons.append(f"only {running} of {streams.get('requests')} streams ran together "
                       f"({streams.get('waiting_peak')} waited): the KV pool does not hold them "
                       "together")
    gpu = load.get("gpu") or {}
    if gpu.get("unavailable") or not gpu.get("cards"):
        reasons.append(f"no card's memory read ({gpu.get('unavailable') or 'no cards'})")
    for card in gpu.get("cards") or []:
        if bounds.get("min_free_mib") and card["min_free_mib"] < bounds["min_free_mib"]:
            reasons.append(f"GPU {card['index']} kept {card['min_free_mib']} MiB free, under "
                           f"{bounds['min_free_mib']} MiB")
        growth = ((card.get("used_after_mib") or 0) - card["used_after_warmup_mib"]) * MIB / MB
        if bounds.get("max_growth_mb") and growth > bounds["max_growth_mb"]:
            reasons.append(f"GPU {card['index']} memory grew {growth:.0f} MB after warm-up, over "
                           f"{bounds['max_growth_mb']} MB")
    rate = streams.get("aggregate_tokens_per_s") or 0
    if bounds.get("min_aggregate_tokens_per_s") and rate < bounds["min_aggregate_tokens_per_s"]:
        reasons.append(f"aggregate {rate} tokens/s, under {bounds['min_aggregate_tokens_per_s']}")
    ttft = streams.get("ttft_s_max")
    if bounds.get("max_ttft_s") and (ttft is None or ttft > bounds["max_ttft_s"]):
        reasons.append(f"time to first token {ttft} s, over {bounds['max_ttft_s']} s")
    result, said = kernel_log_gate(kernel)
    if result != "pass":
        reasons += said
    return {"candidate": candidate_key(candidate), "holds": not reasons, "reasons": reasons}


def fit_envelope(candidate, start, load, pinned_bytes, measured_at: str, report: str) -> dict:
    """What a held candidate leaves in the rig's host_vars: its settings, the KV pool it was
    judged with, pinned to what vLLM said fits the requested memory (pinned_bytes; 0 or None:
    vLLM did not say, the pool stays profiled), the pool's tokens at that start and the figures
    it held at."""
    streams = (load or {}).get("streams") or {}
    return {**candidate_key(candidate),
            "kv_cache_memory_bytes": int(pinned_bytes) if pinned_bytes and int(pinned_bytes) > 0
            else None,
            "kv_cache_tokens": (start or {}).get("kv_cache_tokens"),
            "max_concurrency": (start or {}).get("max_concurrency"),
            "streams": streams.get("requests"),
            "aggregate_tokens_per_s": streams.get("aggregate_tokens_per_s"),
            "ttft_s_max": streams.get("ttft_s_max"),
            "measured_at": measured_at, "report": report}


def fit_report(rig: str, tried, envelope, outcome: str, serving_before: str,
               serving_after: str, seconds) -> dict:
    """The fit report of one rig (files/schemas/fit-report.schema.json): every candidate tried
    with its verdict and seconds, the envelope kept (None when none held), what served before
    and after, and the outcome: `fitted`, `none-held` (the rig serves as before) or `failed`."""
    candidates = [{"candidate": candidate_key(entry["candidate"]),
                   "holds": str(entry.get("holds")).lower() == "true",
                   "reasons": [str(reason) for reason in entry.get("reasons") or []],
                   "seconds": round(float(entry.get("seconds") or 0), 1)} for entry in tried]
    return {"schema": "vllm-dual-fast/fit-report/1", "rig": rig, "outcome": outcome,
            "envelope": envelope, "candidates": candidates,
            "serving_before": serving_before, "serving_after": serving_after,
            "seconds": {key: round(float(value), 1) for key, value in seconds.items()}}


def fit_candidates(max_num_seqs, max_model_len, max_num_batched_tokens) -> list:
    """The candidates a fit tries when the owner names none: the rig's settings, then one
    sequence fewer each time down to one (the first that holds is kept)."""
    return [{"max_num_seqs": seqs, "max_model_len": int(max_model_len),
             "max_num_batched_tokens": int(max_num_batched_tokens)}
            for seqs in range(int(max_num_seqs), 0, -1)]


def host_vars_text(envelope, written_at: str) -> str:
    """The rig's host_vars file of its envelope (YAML): the settings the role reads, and the
    envelope with the figures it held at. JSON is YAML: values are written as JSON."""
    settings = {"vllm_dual_fast_max_num_seqs": envelope["max_num_seqs"],
                "vllm_dual_fast_max_model_len": envelope["max_model_len"],
                "vllm_dual_fast_max_num_batched_tokens": envelope["max_num_batched_tokens"],
                "vllm_dual_fast_kv_cache_memory_bytes": envelope["kv_cache_memory_bytes"] or 0}
    lines = ["---",
             f"# Written by playbooks/fit.yml at {written_at}: this rig's envelope, measured",
             f"# (fit report {envelope['report']}). The next fit rewrites this file.",
             f"vllm_dual_fast_envelope: {json.dumps(envelope, sort_keys=True)}"]
    lines += [f"{key}: {json.dumps(value)}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"
