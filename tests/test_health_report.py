"""The verdict as one pure function (health_verdict in filter_plugins/vllm_dual_fast_health.py):
from what the checks returned to {report, failures, outcome}, whose shapes files/schemas/
health-report.schema.json and outcome.schema.json write down. Every report and outcome built
here must validate against them; each gate's pass, fail and cannot-judge is shown through
health_verdict alone."""

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
OUTCOME_SCHEMA = json.loads((ROOT / "files/schemas/outcome.schema.json").read_text())

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


def verdict_of(ev):
    verdict = health.health_verdict(ev)
    report = verdict["report"]
    jsonschema.validate(report, SCHEMA)
    jsonschema.validate(verdict["outcome"], OUTCOME_SCHEMA)
    assert report["healthy"] is (report["failures"] == []) and verdict["failures"] is \
        report["failures"]
    assert (verdict["outcome"]["state"] == "failed") is (not report["healthy"])
    return verdict


def report_of(ev):
    return verdict_of(ev)["report"]


def lines(report, check=None):
    return [f["line"] for f in report["failures"] if check in (None, f["check"])]


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
    assert lines(report, "smoke") == ["smoke c=4 failed: no output"]
    assert lines(report, "container-restart") == ["container restart count went from none to none"]
    assert lines(report, "flashinfer-patch")[0].startswith("FlashInfer patch status unreadable")
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
    assert lines(report, "soak") == ["canary soak failed: 2 of 9 requests failed"]
    assert lines(report, "race-check") == ["race check found bad trials: 3 bad trials of 200"]
    assert {f["check"] for f in report["failures"]} == {"speed", "mtp", "race-check", "soak"}
    assert {f["result"] for f in report["failures"]} == {"fail"}
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
    [failure] = lines(report, "long-prompt")
    assert failure.startswith("long prompts (4 concurrent prompts of 16384 tokens) failed: CUDA")
    assert "Remedies, cheapest first" in failure
    assert report["long_prompt"] == {"concurrency": 4, "target_tokens": 16384}


def test_with_the_patch_off_the_image_s_own_check_is_judged():
    serving = {**evidence()["serving"], "patch_enabled": False}
    ev = evidence(serving=serving, patch_at_start=SKIPPED, patch_check=SKIPPED,
                  patch_check_image={"stdout": '{"status": "unpatched"}', "stderr": ""})
    report = report_of(ev)
    assert report["patch_status"] == "unpatched" and not report["patch_enabled"]
    assert "still pins the decode plan buffer" in lines(report, "flashinfer-patch")[0]


def test_a_canary_running_mtp_without_counters_fails_the_mtp_gate():
    serving = {**evidence()["serving"], "serve_args": ["--speculative-config", "{}"]}
    blind = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.2}, "spec_decode": {"unavailable": "gone"}}
    ev = evidence(gates=True, serving={**serving, "gates": True},
                  smoke={"rc": 0, "stderr": "", "stdout": json.dumps(
                      {"ok": True, "failures": [], "speed": blind})})
    report = report_of(ev)
    assert report["gates"]["mtp_regressions"][0].startswith("MTP acceptance unmeasured (gone)")
    assert not report["healthy"]


# Each gate's pass, fail and cannot-judge, through health_verdict alone.
MTP_ARGS = ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 4}']
BASELINE = {"baseline_release": "fedcba9876543210", "previous_release": "fedcba9876543210",
            "is_new": True, "down_since": "", "long_prompt": {"tokens": 0},
            "baseline_report": {"release": "fedcba9876543210", "healthy": True,
                                "smoke": {"speed": SPEED}}}


def canary(speed, **changed):
    """A canary with MTP on, compared with a healthy release before it; the speed run gave
    `speed`."""
    serving = {**evidence()["serving"], "gates": True, "serve_args": MTP_ARGS}
    smoke = {"rc": 0, "stderr": "", "stdout": json.dumps(
        {"ok": True, "failures": [], "speed": speed, "health": {"waited_s": 1}})}
    given = {"race_check": {"rc": 0, "stdout": "0 bad trials of 200", "stderr": ""}, **changed}
    return evidence(gates=True, serving=serving, health=BASELINE, smoke=smoke, **given)


@pytest.mark.parametrize("speed, result", [
    (SPEED, "pass"),
    ({**SPEED, "c1": {"tokens_per_s": 30.0, "ttft_s": 0.2}}, "fail"),
    ({"spec_decode": SPEED["spec_decode"]}, "cannot-judge"),      # the speed run gave no figures
])
def test_the_speed_gate(speed, result):
    verdict = verdict_of(canary(speed))
    assert verdict["report"]["judged"]["speed"]["result"] == result
    assert [f["result"] for f in verdict["failures"] if f["check"] == "speed"] == (
        [] if result == "pass" else [result])


@pytest.mark.parametrize("spec_decode, result", [
    ({"acceptance_rate": 0.6, "mean_acceptance_length": 3.4}, "pass"),
    ({"acceptance_rate": 0.1}, "fail"),                              # below the floor and fell
    ({"unavailable": "/metrics has no vllm:spec_decode_* counters"}, "cannot-judge"),
    ({"unavailable": "/metrics: HTTP 404"}, "cannot-judge"),          # /metrics not answering
])
def test_the_mtp_gate(spec_decode, result):
    verdict = verdict_of(canary({**SPEED, "spec_decode": spec_decode}))
    judged = verdict["report"]["judged"]["mtp"]
    assert judged["result"] == result
    mtp = [f for f in verdict["failures"] if f["check"] == "mtp"]
    assert {f["result"] for f in mtp} == (set() if result == "pass" else {result})
    if result == "cannot-judge":
        assert spec_decode["unavailable"] in judged["reason"]
        assert "spec-decode counters" in mtp[0]["advice"] and verdict["outcome"]["state"] == \
            "failed"


def test_mtp_unmeasured_is_shown_on_a_rig_without_gates_and_fails_nothing_there():
    serving = {**evidence()["serving"], "serve_args": MTP_ARGS}
    blind = {**SPEED, "spec_decode": {"unavailable": "gone"}}
    verdict = verdict_of(evidence(serving=serving, smoke={"rc": 0, "stderr": "", "stdout":
                                  json.dumps({"ok": True, "failures": [], "speed": blind})}))
    assert verdict["report"]["healthy"]
    assert verdict["report"]["judged"]["mtp"]["result"] == "cannot-judge"
    assert verdict["report"]["judged"]["speed"]["result"] == "off"


@pytest.mark.parametrize("rc, mode, result, fails", [
    (0, "auto", "pass", False), (1, "auto", "fail", True), (2, "auto", "warn", False),
    (2, "required", "fail", True), (None, "off", "off", False)])
def test_the_race_check_gate(rc, mode, result, fails):
    ev = canary(SPEED, race_check={"rc": rc, "stdout": "3 of 200", "stderr": ""},
                settings={**SETTINGS, "gate_race_check": mode})
    verdict = verdict_of(ev)
    assert verdict["report"]["judged"]["race_check"]["result"] == result
    assert bool([f for f in verdict["failures"] if f["check"] == "race-check"]) is fails


@pytest.mark.parametrize("soak, result", [
    (SKIPPED, "off"),
    ({"rc": 0, "stderr": "", "stdout": json.dumps({"ok": True, "failures": []})}, "pass"),
    ({"rc": 1, "stderr": "", "stdout": json.dumps({"ok": False, "failures": ["3 failed"]})},
     "fail")])
def test_the_soak_gate(soak, result):
    verdict = verdict_of(canary(SPEED, soak=soak))
    assert verdict["report"]["judged"]["soak"]["result"] == result


def long_run(ok=True, sized_by="tokenize", prompt_tokens=(16390, 16388)):
    body = {"ok": ok, "failures": [] if ok else ["long prompt request 1: HTTP 500"],
            "long_prompt": {"concurrency": 2, "target_tokens": 16384, "sized_by": sized_by,
                            "prompt_tokens": list(prompt_tokens), "ok": ok}}
    return {"rc": 0 if ok else 1, "stderr": "", "stdout": json.dumps(body)}


@pytest.mark.parametrize("run, result", [
    (SKIPPED, "off"),
    (long_run(), "pass"),
    (long_run(ok=False), "fail"),
    # No /tokenize count and no usage: the prompts' size is unknown.
    (long_run(sized_by="whitespace words", prompt_tokens=(None, None)), "cannot-judge"),
    # Usage says the prompts were far shorter than asked: memory at 16K never tried.
    (long_run(sized_by="whitespace words", prompt_tokens=(9000, 9100)), "cannot-judge"),
    # Sized by whitespace words, but usage shows the size was reached.
    (long_run(sized_by="whitespace words", prompt_tokens=(16500, 16600)), "pass"),
])
def test_the_long_prompt_gate(run, result):
    verdict = verdict_of(evidence(long_prompt=run))
    assert verdict["report"]["judged"]["long_prompt"]["result"] == result
    assert [f["result"] for f in verdict["failures"] if f["check"] == "long-prompt"] == (
        [] if result in ("pass", "off") else [result])


def test_the_verdict_s_outcome_names_the_run():
    updated = verdict_of(canary(SPEED))["outcome"]
    assert updated == {"state": "updated", "reason": "", "release": "0123456789abcdef",
                       "failed_release": "", "previous_release": "fedcba9876543210",
                       "previous_speed": SPEED}
    same = verdict_of(evidence(health={**evidence()["health"], "is_new": False,
                                       "previous_release": "0123456789abcdef"}))["outcome"]
    assert same["state"] == "unchanged" and same["previous_release"] == "0123456789abcdef"
    failed = verdict_of(canary({**SPEED, "spec_decode": {"unavailable": "gone"}}))["outcome"]
    assert failed["state"] == "failed" and failed["failed_release"] == "0123456789abcdef"
    assert failed["reason"].startswith("MTP acceptance unmeasured (gone)")


def test_every_outcome_the_builder_makes_is_one_line_and_valid():
    long_reason = "first line\nsecond " + "x" * 400
    for state in health.OUTCOME_STATES:
        outcome = health.run_outcome(state, "/r/releases/aaaa", "/r/releases/bbbb/", "cccc",
                                     long_reason, None)
        jsonschema.validate(outcome, OUTCOME_SCHEMA)
        assert (outcome["release"], outcome["failed_release"]) == ("aaaa", "bbbb")
        assert "\n" not in outcome["reason"] and len(outcome["reason"]) == 300
    with pytest.raises(ValueError, match="unknown outcome state 'lost'"):
        health.run_outcome("lost")


def test_a_release_that_never_came_up_is_reported_by_the_same_schema():
    report = health.stopped_report({}, "rig-a", "/x/releases/abcd", "compose up failed",
                                   "2026-12-03T00:00:00+00:00")
    jsonschema.validate(report, SCHEMA)
    assert [(f["check"], f["line"]) for f in report["failures"]] == [
        ("switch", "compose up failed")]
    judged = report_of(evidence())
    kept = health.stopped_report(judged, "rig-a", "/x/releases/0123456789abcdef",
                                 "a later step failed", "t")
    jsonschema.validate(kept, SCHEMA)
    assert not kept["healthy"] and kept["failures"][0]["check"] == "switch"
    assert kept["smoke"] == judged["smoke"]
    lost = health.stopped_report(judged, "rig-a", "/x/releases/0123456789abcdef",
                                 "GPU lost: Xid 79", "t", check="preflight")
    jsonschema.validate(lost, SCHEMA)
    assert [(f["check"], f["line"]) for f in lost["failures"]] == [
        ("preflight", "GPU lost: Xid 79")]
    assert "smoke" not in lost           # nothing of the old check is passed off as this one's
