"""The verdict as one pure function (module_utils/vllm_dual_fast_domain/verdict.py, health_verdict):
from what the checks returned to {report, failures, outcome}, whose shapes
files/schemas/health-report.schema.json and outcome.schema.json write down. Every report and outcome
built here must validate against them; each gate's pass, fail and cannot-judge is shown through
health_verdict alone."""

import json
from pathlib import Path

import jsonschema
import pytest
from ansible.module_utils.vllm_dual_fast_domain import verdict as health

ROOT = Path(__file__).parents[2]
SCHEMA = json.loads((ROOT / "files/schemas/health-report.schema.json").read_text())
OUTCOME_SCHEMA = json.loads((ROOT / "files/schemas/outcome.schema.json").read_text())

SPEED = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.2}, "concurrency": 4,
         "spec_decode": {"acceptance_rate": 0.6}}
SLOWER = {"c1": {"tokens_per_s": 20.0, "ttft_s": 0.2}, "concurrency": 4,
          "spec_decode": {"acceptance_rate": 0.1}}
SETTINGS = {"smoke_concurrency": 4, "gate_speed_drop_pct": 10, "gate_ttft_floor_ms": 50,
            "gate_speed_floor_tps": 1.0, "gate_mtp_acceptance_min": 0.2,
            "gate_mtp_acceptance_drop_pct": 30, "gate_race_check": "auto", "gate_soak_s": 5,
            "gate_speed_reference_drop_pct": 15}
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


def test_a_lan_bind_reports_where_it_serves_over_tls_and_the_fingerprint_to_pin():
    fingerprint = ":".join(["7F"] * 32)
    report = report_of(evidence(lan_bind="0.0.0.0:8000", tls_fingerprint=fingerprint))
    assert (report["lan_bind"], report["tls_fingerprint_sha256"]) == ("0.0.0.0:8000",
                                                                       fingerprint)
    loopback = report_of(evidence())
    assert (loopback["lan_bind"], loopback["tls_fingerprint_sha256"]) == ("", "")
    with pytest.raises(jsonschema.ValidationError):  # the schema holds the shape openssl prints
        jsonschema.validate({**report, "tls_fingerprint_sha256": "7f:" * 31 + "7f"}, SCHEMA)


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


def test_a_container_stopped_since_the_last_check_is_unhealthy_by_its_smoke():
    """A heartbeat's check after a crash (the fleet scenario stopped the container, moved here:
    issue 44): smoke.py gives up on the exited container, docker exec answers nothing; the
    report is the serving release's, unhealthy, valid against the schema."""
    gone = "health: container vllm-dual-fast is exited; its last log lines: (none)"
    ev = evidence(
        smoke={"rc": 2, "stderr": "", "stdout": json.dumps(
            {"ok": False, "failures": [gone], "health": {"ok": False, "gone": gone[8:]}})},
        restarts_after={"stdout": "0 2026-12-02T09:59:00Z"},
        vllm_version={"rc": 1, "stdout": ""},
        patch_check={"stdout": "", "stderr": "container vllm-dual-fast is not running"})
    verdict = verdict_of(ev)
    report = verdict["report"]
    assert not report["healthy"] and verdict["outcome"]["state"] == "failed"
    assert report["release"] == "0123456789abcdef"
    assert lines(report, "smoke") == [f"smoke c=4 failed: {gone}"]
    assert "container-restart" not in [f["check"] for f in report["failures"]]


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
    given = {"race_check": {"rc": 0, "stdout": "0 bad trials of 200", "stderr": ""},
             "health": BASELINE, **changed}
    return evidence(gates=True, serving=serving, smoke=smoke, **given)


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


# Speed that cannot drift: a reference beside last-good, and no comparison across conditions.
SMI_300 = "300.00, 61, 1695, 0x0000000000000000, 580.95.05, 300.00\n" * 2
SMI_350 = "350.00, 58, 1740, 0x0000000000000000, 580.95.05, 350.00\n" * 2
# 300 W set, but another limiter (the VBIOS, a board cap) holds both cards at 280 W.
SMI_300_HELD = "300.00, 61, 1560, 0x0000000000000000, 580.95.05, 280.00\n" * 2


def rate(tps):
    return {"c1": {"tokens_per_s": tps, "ttft_s": 0.2}, "concurrency": 4,
            "spec_decode": SPEED["spec_decode"]}


def drifting(now_tps, before_tps, smi_now=SMI_300, smi_before=SMI_300, reference=None):
    """A canary measured at now_tps after a last good release measured at before_tps."""
    health_in = {**BASELINE, "baseline_report": {
        "release": "fedcba9876543210", "healthy": True, "smoke": {"speed": rate(before_tps)},
        "speed_conditions": health.speed_conditions(smi_before)}}
    if reference is not None:
        health_in["speed_reference"] = reference
    return verdict_of(canary(rate(now_tps), health=health_in,
                             speed_conditions={"rc": 0, "stdout": smi_now, "stderr": ""}))


def test_speed_conditions_are_read_per_gpu():
    assert health.speed_conditions(SMI_300) == {
        "power_limit_w": [300.0, 300.0], "temperature_c": [61.0, 61.0],
        "sm_clock_mhz": [1695.0, 1695.0],
        "clocks_event_reasons": ["0x0000000000000000"] * 2, "driver_version": "580.95.05",
        "power_limit_enforced_w": [300.0, 300.0]}
    assert health.speed_conditions("") == {} == health.speed_conditions("GPU is lost\n")


def test_a_speed_under_a_lower_enforced_limit_is_not_comparable_though_the_set_one_is_the_same():
    """Issue 46, part 3: the limit a card enforces is read back at every health check; a card
    held at 280 W by another limiter is not the card measured at 300 W before."""
    verdict = drifting(30.0, 50.0, smi_now=SMI_300_HELD)
    judged = verdict["report"]["judged"]["speed"]
    assert judged["result"] == "not-comparable", judged
    assert "power limit 300/300 W then, 280/280 W now" in judged["reason"]
    assert verdict["report"]["speed_conditions"]["power_limit_enforced_w"] == [280.0, 280.0]
    assert verdict["report"]["speed_conditions"]["power_limit_w"] == [300.0, 300.0]
    # A report from before the enforced limit was read compares by the limit set.
    old = {k: v for k, v in health.speed_conditions(SMI_300).items()
           if k != "power_limit_enforced_w"}
    assert health.not_comparable(health.speed_conditions(SMI_300_HELD), old) == ""


def test_a_speed_at_another_power_limit_is_not_comparable_and_not_judged():
    verdict = drifting(30.0, 50.0, smi_now=SMI_350)               # 40 % slower, at 350 W
    judged = verdict["report"]["judged"]["speed"]
    assert judged["result"] == "not-comparable" and verdict["report"]["healthy"]
    assert "power limit 300/300 W then, 350/350 W now" in judged["reason"]
    assert verdict["report"]["speed_conditions"]["power_limit_w"] == [350.0, 350.0]


def test_three_releases_each_9_percent_slower_are_caught_by_the_reference():
    """Each passes against the release before it (9 % < 10 %); the reference catches the sum."""
    reference = {"release": "0000000000000000", "speed": rate(50.0),
                 "conditions": health.speed_conditions(SMI_300), "set_at": "2026-11-01T00:00"}
    speeds = [50.0 * 0.91 ** i for i in range(4)]
    results = [drifting(speeds[i], speeds[i - 1], reference=reference) for i in (1, 2, 3)]
    assert [v["report"]["judged"]["speed"]["result"] for v in results] == ["pass", "fail", "fail"]
    [line] = lines(results[1]["report"], "speed")
    assert line.startswith("against the reference 0000000000000000 (since 2026-11-01): "
                           "decode tokens/s at c=1 fell 17 %")
    # Without the reference, the same three releases all pass: the drift the issue names.
    assert [drifting(speeds[i], speeds[i - 1])["report"]["judged"]["speed"]["result"]
            for i in (1, 2, 3)] == ["pass"] * 3


def test_the_speed_reference_is_kept_renewed_at_new_conditions_or_pinned():
    ref = {"release": "r0", "speed": rate(50.0), "set_at": "t0",
           "conditions": health.speed_conditions(SMI_300)}
    report = {"release": "r1", "smoke": {"speed": rate(45.0)},
              "speed_conditions": health.speed_conditions(SMI_300)}
    assert health.speed_reference(ref, report, "t1") is ref            # same conditions: kept
    assert health.speed_reference({}, report, "t1") == {
        "release": "r1", "speed": rate(45.0), "conditions": report["speed_conditions"],
        "set_at": "t1"}                                                  # the first one proven
    at_350 = {**report, "speed_conditions": health.speed_conditions(SMI_350)}
    assert health.speed_reference(ref, at_350, "t2")["release"] == "r1"  # a new power limit
    assert health.speed_reference(ref, at_350, "t2", pinned=True) is ref  # the owner's pin
    assert health.speed_reference(ref, {"release": "r2", "smoke": {}}, "t3") is ref


def test_a_drop_inside_the_spread_the_rounds_before_gave_is_not_a_regression():
    before = {"c1": {"tokens_per_s": 50.0, "tokens_per_s_p10": 43.0, "ttft_s": 0.20,
                     "ttft_s_p90": 0.40}}
    inside = {"c1": {"tokens_per_s": 44.0, "ttft_s": 0.35}}        # 12 % slower, 75 % later
    outside = {"c1": {"tokens_per_s": 42.0, "ttft_s": 0.45}}
    assert health.speed_regressions(inside, before, 10) == []
    assert [line.split(" at ")[0] for line in health.speed_regressions(outside, before, 10)] == [
        "decode tokens/s", "time to first token"]
    no_spread = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.20}}     # a report from before p10
    assert len(health.speed_regressions(inside, no_spread, 10)) == 2


def test_the_prompt_at_max_model_len_is_judged_with_the_burst():
    full_ok = long_run(prompt_tokens=(65472,))
    full_failed = long_run(ok=False)
    verdict = verdict_of(evidence(long_prompt=long_run(), long_prompt_full=full_ok))
    assert verdict["report"]["judged"]["long_prompt"]["result"] == "pass"
    assert verdict["report"]["long_prompt_full"]["prompt_tokens"] == [65472]
    failed = verdict_of(evidence(long_prompt=long_run(), long_prompt_full=full_failed))
    assert failed["report"]["judged"]["long_prompt"]["result"] == "fail"
    assert [f["check"] for f in failed["failures"]] == ["long-prompt"]
    blind = verdict_of(evidence(long_prompt=long_run(), long_prompt_full=long_run(
        sized_by="whitespace words", prompt_tokens=(None,))))
    assert blind["report"]["judged"]["long_prompt"]["result"] == "cannot-judge"


def test_an_out_of_memory_at_max_model_len_is_named_once_as_that_prompt_s():
    oom_log = {"stdout_lines": ["torch.OutOfMemoryError: CUDA out of memory. Tried to"]}
    full = long_run(ok=False)
    full_body = json.loads(full["stdout"])
    full_body["long_prompt"].update(concurrency=1, target_tokens=65472)
    verdict = verdict_of(evidence(long_prompt=long_run(), engine_log=oom_log,
                                  long_prompt_full={**full, "stdout": json.dumps(full_body)}))
    [line] = lines(verdict["report"], "long-prompt")
    assert line.startswith("long prompts (1 concurrent prompts of 65472 tokens) failed: CUDA")


def test_the_schemas_name_the_same_checks_results_and_states_as_the_code():
    """The schemas are what readers trust: a check, gate result or outcome state the builders
    can emit must be one the schema allows, and none it allows may be unknown to them."""
    check = SCHEMA["properties"]["failures"]["items"]["properties"]["check"]["enum"]
    assert sorted(check) == sorted(health.CHECKS)
    for gate in SCHEMA["properties"]["judged"]["properties"].values():
        assert sorted(gate["properties"]["result"]["enum"]) == sorted(health.GATE_RESULTS)
    assert sorted(OUTCOME_SCHEMA["properties"]["state"]["enum"]) == sorted(health.OUTCOME_STATES)
    assert SCHEMA["properties"]["schema_version"]["const"] == health.REPORT_SCHEMA_VERSION


def test_the_report_says_what_keeps_kernel_and_driver_to_maintenance_runs():
    import base64

    record = base64.b64encode(json.dumps({"held_by_role": [
        "nvidia-utils-580-server", "linux-generic"]}).encode()).decode()
    guarded = report_of(evidence(upgrade_guard={"stat": {"exists": True}},
                                 driver_holds={"content": record}))
    assert guarded["upgrades"] == {"unattended_upgrades_kept_away": True,
                                   "held_by_role": ["linux-generic", "nvidia-utils-580-server"]}
    # A rig the role never guarded, or whose record cannot be read, says so.
    bare = report_of(evidence(upgrade_guard={"stat": {"exists": False}},
                              driver_holds={"failed": True, "msg": "file not found"}))
    assert bare["upgrades"] == {"unattended_upgrades_kept_away": False, "held_by_role": []}
    torn = report_of(evidence(driver_holds={"content": base64.b64encode(b"{").decode()}))
    assert torn["upgrades"]["held_by_role"] == []


# Cannot see means cannot judge (issue 42, item 3).
DMESG_REFUSED = {"lines": [], "readable": False, "source": "dmesg",
                 "error": "dmesg: read kernel buffer failed: Operation not permitted",
                 "window": {"since_epoch": 1000.75, "since_monotonic": 80.5, "boot_id": "b"}}


def test_a_canary_that_cannot_read_the_kernel_log_fails_as_cannot_judge():
    """Before: an LXC guest's refused dmesg gave a healthy canary, nothing judged or failed."""
    verdict = verdict_of(canary(SPEED, kernel=DMESG_REFUSED))
    report = verdict["report"]
    assert not report["healthy"] and verdict["outcome"]["state"] == "failed"
    [blind] = [f for f in report["failures"] if f["check"] == "kernel-xid"]
    assert blind["result"] == "cannot-judge"
    assert "Operation not permitted" in blind["line"] and "Xid lines not checked" in blind["line"]
    assert "dmesg_restrict" in blind["advice"]
    assert report["judged"]["kernel_xid"]["result"] == "cannot-judge"


def test_a_rig_without_gates_shows_an_unreadable_kernel_log_and_stays_healthy():
    report = report_of(evidence(kernel=DMESG_REFUSED))
    assert report["healthy"] and report["judged"]["kernel_xid"]["result"] == "cannot-judge"
    assert "Operation not permitted" in report["judged"]["kernel_xid"]["reason"]


@pytest.mark.parametrize("kernel, result", [
    ({"lines": [], "readable": True, "source": "journal"}, "pass"),
    ({"lines": ["1.0 rig kernel: NVRM: Xid (PCI:0000:01:00): 31, pid=1"], "readable": True,
      "source": "journal"}, "fail"),
    (DMESG_REFUSED, "cannot-judge"),
    ({"lines": [], "readable": "False", "source": "journal", "error": ""}, "cannot-judge"),
])
def test_the_kernel_log_gate(kernel, result):
    window = {"since_epoch": 1.0, "since_monotonic": 1.0, "boot_id": "b"}
    report = report_of(canary(SPEED, kernel={**kernel, "window": window}))
    assert report["judged"]["kernel_xid"]["result"] == result
    assert {f["result"] for f in report["failures"] if f["check"] == "kernel-xid"} == (
        set() if result == "pass" else {health._failed(result)})


@pytest.mark.parametrize("extra", [
    ["--speculative-config", '{"method":"mtp","num_speculative_tokens":4}'],
    ['--speculative-config={"method":"mtp","num_speculative_tokens":4}'],
    ["--speculative_config", '{"method":"mtp","num_speculative_tokens":4}'],
    ['--speculative_config={"method":"mtp"}'],
    ["-sc", '{"method":"mtp","num_speculative_tokens":4}'],
    ["--speculative-config.method", "mtp", "--speculative-config.num_speculative_tokens", "4"],
])
def test_mtp_given_in_the_owner_s_extra_args_is_judged(extra):
    """Before: only the exact token `--speculative-config` counted, so MTP switched on through
    vllm_dual_fast_extra_args left the MTP gate off and passed blind."""
    args = ["m", "--max-num-seqs", "4", *extra]
    assert health.runs_speculative(args)
    blind = {**SPEED, "spec_decode": {"unavailable": "no vllm:spec_decode_* counters"}}
    ev = canary(blind)
    report = report_of({**ev, "serving": {**ev["serving"], "serve_args": args}})
    assert report["judged"]["mtp"]["result"] == "cannot-judge" and not report["healthy"]
    off = report_of({**ev, "serving": {**ev["serving"], "serve_args": args[:3]}})
    assert off["judged"]["mtp"]["result"] == "off" and off["healthy"]


@pytest.mark.parametrize("args, on, seqs", [
    (["m", "--max-num-seqs", "2"], False, 2),
    (["m", "--max-num-seqs", "2", "--max_num_seqs=8"], False, 8),      # the last one wins
    (["m", "--speculative-config", '{"method":"mtp"}', "--speculative-config", "null"], False, 3),
    (["m", "--max-num-seqs=6", "-sc={\"method\":\"ngram\"}"], True, 6),
])
def test_serve_flags_are_read_as_vllm_reads_them(args, on, seqs):
    assert health.runs_speculative(args) is on
    assert health.serve_max_num_seqs(args, 3) == seqs


@pytest.mark.parametrize("gone, what", [
    ("cN", "decode tokens/s at c=N"), ("ttft_s", "time to first token at c=1")])
def test_a_missing_c_n_or_first_token_figure_cannot_be_judged(gone, what):
    """Before: speed_regressions skipped a figure missing now; only c=1's decode rate was
    judged missing, so a speed run that lost its c=4 round passed the canary."""
    full = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.2}, "cN": {"tokens_per_s": 120.0},
            "concurrency": 4, "spec_decode": {"acceptance_rate": 0.6}}
    health_ = {**BASELINE, "baseline_report": {**BASELINE["baseline_report"],
                                               "smoke": {"speed": full}}}
    now = json.loads(json.dumps(full))
    if gone == "cN":
        del now["cN"]
    else:
        del now["c1"]["ttft_s"]
    verdict = verdict_of(canary(now, health=health_))
    judged = verdict["report"]["judged"]["speed"]
    assert judged["result"] == "cannot-judge" and what in judged["reason"]
    assert {f["result"] for f in verdict["failures"] if f["check"] == "speed"} == {"cannot-judge"}
    assert verdict_of(canary(full, health=health_))["report"]["judged"]["speed"]["result"] == \
        "pass"


def test_a_figure_the_release_before_lacks_is_noted_not_judged():
    before = {"c1": {"tokens_per_s": 50.0}, "concurrency": 4}
    health_ = {**BASELINE, "baseline_report": {**BASELINE["baseline_report"],
                                               "smoke": {"speed": before}}}
    report = report_of(canary(SPEED | {"cN": {"tokens_per_s": 90.0}}, health=health_))
    notes = report["gates"]["speed_not_comparable"]
    assert report["judged"]["speed"]["result"] == "pass"
    assert any("has no decode tokens/s at c=N" in n for n in notes)
    assert any("has no time to first token at c=1" in n for n in notes)


def test_the_report_names_the_image_the_serving_container_runs():
    """Before: image_id was copied from the manifest, so a rollback that started the build a
    re-pulled tag moved to reported the old build's id."""
    judged, moved = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    serving = {**evidence()["serving"], "image_id": judged}
    same = report_of(evidence(serving=serving, restarts_after={
        "stdout": f"0 2026-12-02T09:59:00Z {judged}"}))
    assert same["healthy"] and (same["image_id"], same["release_image_id"]) == (judged, judged)
    assert same["container_started_at"] == "2026-12-02T09:59:00Z"
    other = report_of(evidence(serving=serving, restarts_after={
        "stdout": f"0 2026-12-02T09:59:00Z {moved}"}))
    assert other["image_id"] == moved and not other["healthy"]
    [line] = lines(other, "switch")
    assert "not the release's" in line and moved[:19] in line


# --- the envelope gate (issue 46: what a fit measured, held at every start) ---
ENVELOPE = {"max_num_seqs": 3, "max_model_len": 65536, "max_num_batched_tokens": 2048,
            "kv_cache_memory_bytes": 1081344000, "kv_cache_tokens": 65995,
            "max_concurrency": 1.01, "streams": 3, "aggregate_tokens_per_s": 70.6,
            "ttft_s_max": 0.6, "measured_at": "2026-12-07T01:16:29Z",
            "report": "fit-rig-a-20261207T011437Z.json"}


def started_with(tokens):
    """The engine log of a start whose pool holds `tokens` (vLLM 0.27.1's line)."""
    line = f"(EngineCore pid=25) INFO 12-07 01:16:00 [kv_cache_utils.py:2235] GPU KV cache " \
           f"size: {tokens:,} tokens"
    return {"rc": 0, "stdout": line, "stdout_lines": [line]}


def test_a_start_with_a_smaller_pool_than_the_envelope_fails_health():
    settings = {**SETTINGS, "envelope": ENVELOPE}
    report = report_of(evidence(settings=settings, engine_log=started_with(50000)))
    assert lines(report, "envelope") == [
        "KV pool 50,000 tokens, under the 65,995 the envelope (3 sequences) was measured with "
        "(fit report fit-rig-a-20261207T011437Z.json)"]
    assert report["kv_pool"]["kv_cache_tokens"] == 50000
    assert report["envelope"]["report"] == ENVELOPE["report"]
    assert "streams" not in report["envelope"]    # the settings and pool, not the figures


def test_the_pool_the_envelope_was_measured_with_passes_and_no_envelope_is_off():
    settings = {**SETTINGS, "envelope": ENVELOPE}
    held = report_of(evidence(settings=settings, engine_log=started_with(65995)))
    assert held["healthy"] and held["judged"]["envelope"]["result"] == "pass"
    unseen = report_of(evidence(settings=settings))    # an unchanged container: no start seen
    assert unseen["healthy"] and unseen["judged"]["envelope"]["result"] == "not-comparable"
    never = report_of(evidence(engine_log=started_with(10)))
    assert never["healthy"] and never["judged"]["envelope"]["result"] == "off"
    assert never["envelope"] == {}


def test_the_verdict_says_the_envelope_and_the_pool_this_start_got():
    from vllm_double_fixtures import role_filter_file

    summary = role_filter_file("vllm_dual_fast_summary")
    settings = {**SETTINGS, "envelope": ENVELOPE}
    report = report_of(evidence(settings=settings, engine_log=started_with(68395)))
    said = [line for line in summary.verdict_lines(report) if "envelope:" in line]
    assert said == ["  envelope: 3 sequences x 65,536 tokens, measured in a KV pool of 65,995 "
                    "tokens (fit-rig-a-20261207T011437Z.json); this start's pool: 68,395 tokens"]
    assert not [line for line in summary.verdict_lines(report_of(evidence()))
                if "envelope:" in line]
