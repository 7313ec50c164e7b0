"""A fit candidate's verdict, the envelope kept and the fit report
(module_utils/vllm_dual_fast_domain/fit.py; files/schemas/fit-report.schema.json). The load
reports are fit_load.py's shape (tests/integration/test_fit_load.py runs it on the double)."""

import copy
import json
from pathlib import Path

import jsonschema
import pytest
from ansible.module_utils.vllm_dual_fast_domain.fit import (
    fit_candidate_verdict,
    fit_candidates,
    fit_envelope,
    fit_report,
    host_vars_text,
)

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "files/schemas/fit-report.schema.json").read_text())
CANDIDATE = {"max_num_seqs": "3", "max_model_len": 65536, "max_num_batched_tokens": 2048}
START = {"kv_cache_tokens": 66000, "max_concurrency": 1.01, "concurrency_for_tokens": 65536,
         "available_kv_gib": 1.01, "kv_cache_memory_to_fit": 1081344000, "pinned_kv_gib": None,
         "refused": {}}
LOAD = {"ok": True, "failures": [],
        "streams": {"requests": 3, "ok": 3, "aggregate_tokens_per_s": 80.5, "ttft_s_max": 2.5,
                    "running_peak": 3, "waiting_peak": 0},
        "preemptions": {"before": 0.0, "after": 0.0, "delta": 0.0},
        "gpu": {"cards": [{"index": i, "total_mib": 24576, "used_after_warmup_mib": 22118,
                           "used_after_mib": 22118, "min_free_mib": 1746} for i in (0, 1)],
                "samples": 12, "unavailable": None},
        "ladder": [], "wall_s": 9.0}
KERNEL = {"lines": [], "readable": True, "source": "journal", "error": ""}
BOUNDS = {"min_free_mib": 1024, "max_growth_mb": 200, "min_aggregate_tokens_per_s": 10,
          "max_ttft_s": 120}


def verdict(load=LOAD, start=START, kernel=KERNEL, bounds=BOUNDS):
    return fit_candidate_verdict(CANDIDATE, start, load, kernel, bounds)


def changed(**paths):
    """LOAD with values replaced: changed(**{"gpu.cards.0.min_free_mib": 900})."""
    load = copy.deepcopy(LOAD)
    for path, value in paths.items():
        *parents, last = path.split(".")
        node = load
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[int(last) if isinstance(node, list) else last] = value
    return load


def test_a_candidate_within_every_bound_holds():
    assert verdict() == {"candidate": {"max_num_seqs": 3, "max_model_len": 65536,
                                       "max_num_batched_tokens": 2048},
                         "holds": True, "reasons": []}


@pytest.mark.parametrize(("paths", "said"), [
    ({"preemptions.delta": 2.0}, "2 preemptions under 3 streams"),
    ({"preemptions.delta": None}, "preemptions unknown"),
    # what vLLM 0.27.1 does with streams its pool cannot hold together: they wait, unpreempted
    ({"streams.running_peak": 2, "streams.waiting_peak": 1},
     "only 2 of 3 streams ran together (1 waited)"),
    ({"streams.running_peak": None}, "streams together unknown"),
    ({"gpu.cards.1.min_free_mib": 900}, "GPU 1 kept 900 MiB free, under 1024 MiB"),
    # 191 MiB is 200.3 MB: MB are the unit
    ({"gpu.cards.0.used_after_mib": 22118 + 191}, "GPU 0 memory grew 200 MB after warm-up"),
    ({"gpu.cards": [], "gpu.unavailable": "nvidia-smi did not answer"}, "no card's memory read"),
    ({"streams.aggregate_tokens_per_s": 9.9}, "aggregate 9.9 tokens/s, under 10"),
    ({"streams.ttft_s_max": 121.0}, "time to first token 121.0 s, over 120"),
    ({"failures": ["stream 2: HTTP 500"]}, "stream 2: HTTP 500"),
])
def test_each_bound_fails_the_candidate_and_says_which(paths, said):
    result = verdict(changed(**paths))
    assert not result["holds"]
    assert any(said in reason for reason in result["reasons"]), result["reasons"]


def test_growth_up_to_200_mb_holds():
    assert verdict(changed(**{"gpu.cards.0.used_after_mib": 22118 + 190}))["holds"]


def test_an_xid_or_an_unreadable_kernel_log_fails_it():
    xid = {**KERNEL, "lines": ["NVRM: Xid (PCI:0000:01:00): 31, pid=1234, name=python3"]}
    assert "Xid" in " ".join(verdict(kernel=xid)["reasons"])
    unreadable = {**KERNEL, "readable": False, "error": "dmesg: read kernel buffer failed"}
    assert "not readable" in " ".join(verdict(kernel=unreadable)["reasons"])


def test_a_refused_start_names_the_length_vllm_could_hold():
    refused = {**START, "kv_cache_tokens": None, "refused": {
        "max_model_len": 65536, "needed_gib": 1.0, "available_gib": 0.5,
        "estimated_max_model_len": 32000}}
    result = fit_candidate_verdict(CANDIDATE, refused, None, KERNEL, BOUNDS)
    assert result["reasons"] == ["vLLM refused max_model_len 65536: its KV pool holds one request "
                                 "of 32000 tokens"]


def test_bounds_at_0_are_off():
    off = {key: 0 for key in BOUNDS}
    assert verdict(changed(**{"streams.aggregate_tokens_per_s": 0.1,
                              "gpu.cards.0.min_free_mib": 1}), bounds=off)["holds"]


def test_default_candidates_step_down_one_sequence_at_a_time():
    assert [c["max_num_seqs"] for c in fit_candidates(4, "65536", 8192)] == [4, 3, 2, 1]
    assert fit_candidates(1, 4096, 2048) == [
        {"max_num_seqs": 1, "max_model_len": 4096, "max_num_batched_tokens": 2048}]


def test_the_envelope_keeps_the_pinned_pool_and_the_report_follows_its_schema():
    envelope = fit_envelope(CANDIDATE, START, LOAD, 1081344000, "2026-12-07T02:00:00Z",
                            "fit-r-1.json")
    assert envelope["kv_cache_memory_bytes"] == 1081344000 and envelope["max_num_seqs"] == 3
    tried = [{"candidate": {**CANDIDATE, "max_num_seqs": 4}, "holds": "False", "seconds": "41.0",
              "reasons": ["1 preemptions under 4 streams: the KV pool does not hold them"]},
             {**verdict(), "seconds": 30.0}]
    report = fit_report("r", tried, envelope, "fitted", "rel-a", "rel-b", {"rig": 99.94})
    jsonschema.validate(report, SCHEMA)
    assert [c["holds"] for c in report["candidates"]] == [False, True]
    assert report["candidates"][0]["seconds"] == 41.0
    none_held = fit_report("r", tried[:1], None, "none-held", "rel-a", "rel-a", {"rig": 50})
    jsonschema.validate(none_held, SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "outcome": "maybe"}, SCHEMA)


def test_the_host_vars_file_sets_what_the_role_reads():
    import yaml

    envelope = fit_envelope(CANDIDATE, START, LOAD, 1081344000, "2026-12-07T02:00:00Z",
                            "fit-r-1.json")
    written = yaml.safe_load(host_vars_text(envelope, "2026-12-07T02:00:00+00:00"))
    assert written["vllm_dual_fast_max_num_seqs"] == 3
    assert written["vllm_dual_fast_kv_cache_memory_bytes"] == 1081344000
    assert written["vllm_dual_fast_envelope"]["report"] == "fit-r-1.json"
    unpinned = fit_envelope(CANDIDATE, START, LOAD, 0, "t", "f")
    pinned = yaml.safe_load(host_vars_text(unpinned, "t"))
    assert pinned["vllm_dual_fast_kv_cache_memory_bytes"] == 0
