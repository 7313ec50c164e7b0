"""The canary's MTP gate from a real measurement: files/smoke.py run as health.yml runs it (its
speed arguments, its JSON on stdout) against the vLLM double on a loopback port, its result fed
to health_verdict (the verdict as one pure function) as the role's health tasks register it,
against the report of a release measured the same way before it. The double's rig knobs make
the release's drafter collapse, or rename its spec-decode counters as a later vLLM might.

This is what the fleet scenario proves for the slower image (a canary refused on its speed gate,
rolled back, the rollout stopped, no other rig touched); the wiring is the same whichever gate
refused, so the gates that differ only in what was measured are shown here, on the double
itself, without a systemd rig."""

import subprocess
import sys

import pytest
import yaml
from test_health_report import BASELINE, MTP_ARGS, SETTINGS, evidence, verdict_of
from vllm_double_fixtures import FILES, ROOT, double_env, double_factory, write_rig_knobs

DEFAULTS = yaml.safe_load((ROOT / "roles/vllm_dual_fast/defaults/main.yml").read_text())
# The same rate on both releases: only the drafter differs between them.
STEADY = {"tokens_per_s": 50, "ttft_s": 0.05}
# The speed gate's drop allowed here: two measurements of the same rate on the double moved 21 %
# apart beside Molecule on two cores (make test, 2026-12-06), past the role's 10 %. What these
# tests judge is the MTP gate; the speed gate catching a slower release is the fleet scenario's
# (its canary's slower image) and tests/harness/test_bench_speed_noise.py's.
MEASURED_SETTINGS = {**SETTINGS, "gate_speed_drop_pct": 50}


@pytest.fixture
def double(tmp_path):
    yield from double_factory(tmp_path)


def measured(double, tmp_path, name, **knobs):
    """smoke.py's registered result ({rc, stdout, stderr}) against a double started with `knobs`,
    with health.yml's speed arguments (fewer tokens and rounds: the gate reads rates)."""
    env = double_env(tmp_path / name)
    write_rig_knobs(env, **STEADY, **knobs)
    server = double(["--served-model-name", "qwen", *MTP_ARGS], env=env)
    argv = [sys.executable, str(FILES / "smoke.py"), "--base-url", server.base_url,
            "--model", "qwen", "--concurrency", str(DEFAULTS["vllm_dual_fast_smoke_concurrency"]),
            "--max-tokens", "16", "--health-timeout", "30", "--json",
            "--speed", "--speed-max-tokens", "32", "--speed-rounds", "2"]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    return {"rc": run.returncode, "stdout": run.stdout, "stderr": run.stderr}


def canary(smoke, health):
    """What health.yml registered on a canary running MTP (gates on, its race check passed)."""
    serving = {**evidence()["serving"], "gates": True, "serve_args": MTP_ARGS}
    return evidence(gates=True, serving=serving, smoke=smoke, health=health,
                    settings=MEASURED_SETTINGS,
                    race_check={"rc": 0, "stdout": "0 bad trials of 200", "stderr": ""})


def judged_canary(double, tmp_path, **knobs):
    """The verdict on a canary whose double has `knobs`, the release before it measured on a
    double with the default drafter."""
    first = {**BASELINE, "baseline_release": "", "baseline_report": {}}
    before = verdict_of(canary(measured(double, tmp_path, "before"), first))["report"]
    assert before["healthy"], before["failures"]
    health = {**BASELINE, "baseline_report": {**before, "release": BASELINE["baseline_release"]}}
    return verdict_of(canary(measured(double, tmp_path, "now", **knobs), health))


def test_the_defaults_are_what_the_verdict_is_judged_with():
    for name in ("gate_mtp_acceptance_min", "gate_mtp_acceptance_drop_pct",
                 "gate_speed_drop_pct", "smoke_concurrency"):
        assert SETTINGS[name] == DEFAULTS[f"vllm_dual_fast_{name}"], name


def test_a_collapsed_drafter_fails_the_canary_on_mtp_acceptance_alone(double, tmp_path):
    verdict = judged_canary(double, tmp_path, mtp_acceptance=0.05)
    report = verdict["report"]
    mtp = [f for f in report["failures"] if f["check"] == "mtp"]
    # floor and drop: the MTP gate failed twice and nothing else did
    assert [f["result"] for f in mtp] == ["fail", "fail"], report["failures"]
    assert [f for f in report["failures"] if f["check"] != "mtp"] == []
    assert report["judged"]["mtp"]["result"] == "fail" and report["schema_version"] == 2
    assert report["judged"]["speed"]["result"] == "pass"
    assert report["mtp"]["acceptance_rate"] < 0.1
    assert verdict["outcome"]["state"] == "failed"
    assert any(f["line"].startswith("MTP acceptance 0.0") and "is below the floor 0.2" in f["line"]
               for f in mtp), mtp


def test_renamed_spec_decode_counters_leave_the_canary_unjudged_and_refused(double, tmp_path):
    verdict = judged_canary(double, tmp_path, spec_decode_metrics="renamed")
    report = verdict["report"]
    assert [(f["check"], f["result"]) for f in report["failures"]] == [("mtp", "cannot-judge")]
    assert report["judged"]["mtp"]["result"] == "cannot-judge"
    assert report["judged"]["speed"]["result"] == "pass"     # the speed run itself measured
    assert "MTP acceptance unmeasured" in report["failures"][0]["line"]
    assert verdict["outcome"]["state"] == "failed"


def test_the_default_drafter_passes_every_gate(double, tmp_path):
    verdict = judged_canary(double, tmp_path)
    report = verdict["report"]
    assert report["healthy"] and report["failures"] == []
    assert report["judged"]["mtp"]["result"] == report["judged"]["speed"]["result"] == "pass"
