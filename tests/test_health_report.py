"""The verdict as one pure function (health_report in filter_plugins/vllm_dual_fast_health.py):
from what the checks returned to the report, whose shape files/schemas/health-report.schema.json
writes down. Every report built here must validate against that schema."""

import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).parents[1]
_spec = importlib.util.spec_from_file_location(
    "vdf_health_report", ROOT / "roles/vllm_dual_fast/filter_plugins/vllm_dual_fast_health.py")
health = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(health)
SCHEMA = json.loads((ROOT / "files/schemas/health-report.schema.json").read_text())

SPEED = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.2}, "concurrency": 4,
         "spec_decode": {"acceptance_rate": 0.6}}
SLOWER = {"c1": {"tokens_per_s": 20.0, "ttft_s": 0.2}, "concurrency": 4,
          "spec_decode": {"acceptance_rate": 0.1}}
SETTINGS = {"smoke_concurrency": 4, "gate_speed_drop_pct": 10, "gate_ttft_floor_ms": 50,
            "gate_speed_floor_tps": 1.0, "gate_mtp_acceptance_min": 0.2,
            "gate_mtp_acceptance_drop_pct": 30, "gate_race_check": "auto", "gate_soak_s": 5}
SKIPPED = {"changed": False, "skipped": True}


def evidence(gates=False, **changed):
    """A healthy release already proven here: what health.yml's tasks registered."""
    base = {
        "host": "rig-a", "checked_at": "2026-12-02T10:00:00+00:00",
        "serving": {"dir": "/opt/vllm-dual-fast/releases/0123456789abcdef", "image": "img:1",
                    "model": "m", "served_model_name": "s", "patch_enabled": True,
                    "race_exposed": True, "max_num_seqs": 4, "gates": gates},
        "health": {"baseline_release": "", "baseline_report": {}, "long_prompt": {"tokens": 0},
                   "down_since": ""},
        "settings": SETTINGS, "smoke_started_at": "1010.25",
        "smoke": {"rc": 0, "stderr": "", "stdout": json.dumps(
            {"ok": True, "failures": [], "speed": SPEED, "health": {"waited_s": 1.5}})},
        "long_prompt": SKIPPED, "engine_log": SKIPPED, "soak": SKIPPED, "race_check": SKIPPED,
        "restarts_before": {"stdout": "0"},
        "restarts_after": {"stdout": "0 2026-12-02T09:59:00Z"},
        "patch_at_start": {"stdout": "fi-pinq: patched decode.py (2 allocations) flashinfer 0.7.2"},
        "patch_check": {"stdout": '{"status": "already-patched"}', "stderr": ""},
        "patch_check_image": SKIPPED,
        "vllm_version": {"rc": 0, "stdout": "0.33.0\n"},
        "kernel": {"lines": [], "readable": True, "source": "journal",
                   "window": {"since_epoch": 1000.75, "since_monotonic": 80.5, "boot_id": "b"}},
    }
    base.update(changed)
    return base


def report_of(ev):
    report = health.health_report(ev)
    jsonschema.validate(report, SCHEMA)
    assert report["healthy"] is (report["failures"] == [])
    return report


def test_a_healthy_release_already_proven_here():
    report = report_of(evidence())
    assert report["healthy"] and report["failures"] == []
    assert report["release"] == "0123456789abcdef"
    assert (report["vllm_version"], report["patch_status"]) == ("0.33.0", "patched")
    assert (report["canary"], report["gates"], report["long_prompt"]) == (False, {}, {})
    assert report["downtime_s"] is None and report["health_wait_s"] == 1.5
    assert report["kernel_log_since"] == 1000 and report["restart_count"] == "0"


def test_a_recreated_container_reports_its_downtime():
    ev = evidence(health={**evidence()["health"], "down_since": "1000.0"})
    assert report_of(ev)["downtime_s"] == pytest.approx(11.8)     # 1010.25 + 1.5 - 1000


def test_nothing_reached_is_unhealthy_and_says_what_is_unknown():
    """A run stopped before the checks (or a container gone): every register empty."""
    ev = evidence(smoke={}, restarts_before={}, restarts_after={}, patch_at_start={},
                  patch_check={}, vllm_version={})
    report = report_of(ev)
    assert not report["healthy"]
    joined = " | ".join(report["failures"])
    assert "smoke c=4 failed: no output" in joined
    assert "container restart count went from none to none" in joined
    assert "FlashInfer patch status unreadable" in joined
    assert (report["vllm_version"], report["patch_status"]) == ("", "unknown")


def test_a_canary_fails_each_gate_it_fails_and_records_them():
    ev = evidence(
        gates=True,
        health={"baseline_release": "fedcba9876543210", "down_since": "",
                "baseline_report": {"release": "fedcba9876543210", "healthy": True,
                                    "smoke": {"speed": SPEED}}, "long_prompt": {"tokens": 0}},
        smoke={"rc": 0, "stderr": "", "stdout": json.dumps(
            {"ok": True, "failures": [], "speed": SLOWER, "health": {"waited_s": 2}})},
        soak={"rc": 1, "stderr": "", "stdout": json.dumps(
            {"ok": False, "failures": ["2 of 9 requests failed"], "soak": {"requests": 9}})},
        race_check={"rc": 1, "stdout": "3 bad trials of 200", "stderr": ""})
    report = report_of(ev)
    joined = " | ".join(report["failures"])
    assert "canary soak failed: 2 of 9 requests failed" in joined
    assert "race check found bad trials: 3 bad trials of 200" in joined
    assert report["gates"]["speed_regressions"] and report["gates"]["mtp_regressions"]
    assert report["gates"]["race_check"][0] == "fail"
    assert report["previous_speed"] == SPEED


def test_a_race_check_that_could_not_run_warns_with_the_last_line_of_its_stderr():
    """The Jinja judge this replaced split stderr on a backslash and an n (a folded YAML scalar
    keeps them as two characters) and so quoted every line."""
    ev = evidence(gates=True, race_check={"rc": 2, "stdout": "",
                                          "stderr": "copying...\ncould not copy the race check in"})
    report = report_of(ev)
    assert report["gates"]["race_check"] == [
        "warn", "race check could not run: could not copy the race check in"]
    assert report["healthy"]


def test_long_prompts_out_of_memory_name_the_remedies():
    ev = evidence(
        health={**evidence()["health"], "long_prompt": {
            "tokens": 16384, "max_model_len": 65536, "max_num_seqs": 4,
            "max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.9, "w4a8": True}},
        long_prompt={"rc": 1, "stderr": "", "stdout": json.dumps(
            {"ok": False, "failures": ["request 2 failed"],
             "long_prompt": {"concurrency": 4, "target_tokens": 16384}})},
        engine_log={"stdout_lines": ["torch.OutOfMemoryError: CUDA out of memory. Tried to"]})
    report = report_of(ev)
    [failure] = report["failures"]
    assert failure.startswith("long prompts (4 concurrent prompts of 16384 tokens) failed: CUDA")
    assert "Remedies, cheapest first" in failure
    assert report["long_prompt"] == {"concurrency": 4, "target_tokens": 16384}


def test_with_the_patch_off_the_image_s_own_check_is_judged():
    serving = {**evidence()["serving"], "patch_enabled": False}
    ev = evidence(serving=serving, patch_at_start=SKIPPED, patch_check=SKIPPED,
                  patch_check_image={"stdout": '{"status": "unpatched"}', "stderr": ""})
    report = report_of(ev)
    assert report["patch_status"] == "unpatched" and not report["patch_enabled"]
    assert "still pins the decode plan buffer" in report["failures"][0]


def test_a_canary_running_mtp_without_counters_fails_the_mtp_gate():
    serving = {**evidence()["serving"], "serve_args": ["--speculative-config", "{}"]}
    blind = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.2}, "spec_decode": {"unavailable": "gone"}}
    ev = evidence(gates=True, serving={**serving, "gates": True},
                  smoke={"rc": 0, "stderr": "", "stdout": json.dumps(
                      {"ok": True, "failures": [], "speed": blind})})
    report = report_of(ev)
    assert report["gates"]["mtp_regressions"][0].startswith("MTP acceptance unmeasured (gone)")
    assert not report["healthy"]
