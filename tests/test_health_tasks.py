"""health.yml's canary steps, taken from the task file unchanged and run by ansible-playbook on
localhost with doubles: tests/doubles/docker for the docker CLI and a smoke.py that records its
arguments. What is checked: a race check that could not be copied into the container is "could
not run" (exit 2), never "a bad trial" (exit 1); the speed is measured before the soak; and the
judge compares the speed only with the report of the release that served before."""

import json
import os
from pathlib import Path

import pytest
import yaml
from ansible_runner import ROLE, run_playbook

ROOT = Path(__file__).parents[1]
HEALTH = yaml.safe_load((ROLE / "tasks/health.yml").read_text())
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
DOUBLES = Path(__file__).parent / "doubles"
RACE_TASK = "Run the GPU race check inside the new container (canary)"

# Records its arguments in the calls log (as the docker double does) and answers as smoke.py
# would: the smoke with its speed, or the soak.
FAKE_SMOKE = """\
import json, os, sys
with open(os.environ["VDF_DOCKER_LOG"], "a") as f:
    f.write(json.dumps(["smoke.py"] + sys.argv[1:]) + "\\n")
report = {"ok": True, "failures": [], "aggregate": {"ok": 4}, "health": {"waited_s": 0.1}}
if "--speed" in sys.argv:
    report["speed"] = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.2}, "concurrency": 4}
if "--soak-s" in sys.argv:
    report["soak"] = {"requests": 9, "failed": 0}
print(json.dumps(report))
"""


def health_task(name):
    found = [t for t in HEALTH if t["name"] == name]
    assert len(found) == 1, [t["name"] for t in HEALTH]
    return found[0]


def health_tasks_until(name):
    """health.yml's tasks from the first up to (not including) the one named."""
    names = [t["name"] for t in HEALTH]
    assert name in names, names
    return HEALTH[: names.index(name)]


def calls(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def run_race_check(tmp_path, container, fail="", race_rc=0):
    """The race-check task as health.yml has it, on a canary; its registered result."""
    out, log = tmp_path / "race.json", tmp_path / "calls.log"
    play = [{
        "name": "Race check", "hosts": "localhost", "gather_facts": False,
        "tasks": [health_task(RACE_TASK),
                  {"name": "Keep the result", "ansible.builtin.copy": {
                      "content": "{{ _vllm_dual_fast_race_check | to_json }}", "dest": str(out),
                      "mode": "0644"}}],
    }]
    env = {"PATH": f"{DOUBLES}:{os.environ['PATH']}", "VDF_DOCKER_LOG": str(log),
           "VDF_DOCKER_FAIL": fail, "VDF_RACE_RC": str(race_rc)}
    facts = {"_vllm_dual_fast_container": container, "_vllm_dual_fast_serving_dir": "/opt/rel a",
             "_vllm_dual_fast_serving": {"gates": True}, "vllm_dual_fast_gate_race_check": "auto"}
    result, text = run_playbook(tmp_path, play, facts, env=env)
    assert result.returncode == 0, text
    return json.loads(out.read_text()), calls(log)


@pytest.mark.parametrize("fail", ["exec-mkdir", "cp"])
def test_a_race_check_that_cannot_be_copied_in_could_not_run(tmp_path, fail):
    # Exit 1 is race_check's "bad trial": a gone container or a full disk must not read as one.
    race, called = run_race_check(tmp_path, "vdf canary", fail=fail)
    assert race["rc"] == 2, race
    assert "could not copy the race check into vdf canary" in race["stderr"], race
    assert not [c for c in called if c[0] == "exec" and "python3" in c], called    # not run


@pytest.mark.parametrize("race_rc", [0, 1, 2])
def test_the_race_check_s_own_exit_status_is_kept(tmp_path, race_rc):
    race, called = run_race_check(tmp_path, "vdf canary", race_rc=race_rc)
    assert race["rc"] == race_rc, race
    assert race["stdout"].startswith("race_check: "), race    # its last line only
    # The container's name reaches docker as one argument, and the release dir as one path.
    assert called[0] == ["exec", "vdf canary", "mkdir", "-p", "/tmp/vdf-check"], called
    assert called[1] == ["cp", "/opt/rel a/checks/race_check.py", "vdf canary:/tmp/vdf-check/"]


def test_the_speed_is_measured_before_the_soak(tmp_path):
    # The baseline (the previous release's report) was measured on a freshly started server;
    # measured after a soak, the canary's figures would not be comparable with it.
    serving, log = tmp_path / "release", tmp_path / "calls.log"
    serving.mkdir()
    (serving / "smoke.py").write_text(FAKE_SMOKE)
    play = [{"name": "Health up to the restart count", "hosts": "localhost",
             "gather_facts": False,
             "tasks": health_tasks_until("Read the container's restart count after the smoke")}]
    facts = {**DEFAULTS, "vllm_dual_fast_image": "img", "vllm_dual_fast_model": "m",
             "vllm_dual_fast_canary": True, "_vllm_dual_fast_release_is_new": True,
             "vllm_dual_fast_gate_soak_s": 5, "_vllm_dual_fast_container": "vllm-dual-fast",
             "_vllm_dual_fast_serving_dir": str(serving)}
    env = {"PATH": f"{DOUBLES}:{os.environ['PATH']}", "VDF_DOCKER_LOG": str(log)}
    result, text = run_playbook(tmp_path, play, facts, env=env)
    assert result.returncode == 0, text
    order = [("speed" if "--speed" in c else "") + ("soak" if "--soak-s" in c else "")
             for c in calls(log) if c[0] == "smoke.py"]
    race = [i for i, c in enumerate(calls(log)) if c[0] == "exec" and "python3" in c]
    assert order == ["speed", "soak"], calls(log)
    assert race and race[0] > max(i for i, c in enumerate(calls(log)) if c[0] == "smoke.py")


SPEED_BEFORE = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.2}, "concurrency": 4}
SPEED_SLOWER = {"c1": {"tokens_per_s": 20.0, "ttft_s": 0.2}, "concurrency": 4}


def judge(tmp_path, previous_report, previous, race_rc=0, race_stderr="", **changed):
    """health.yml's judge on a canary, with the checks' results given; (report, failures)."""
    out = tmp_path / "judged.json"
    play = [{
        "name": "Judge", "hosts": "localhost", "gather_facts": False,
        "tasks": [health_task("Know how the serving release was deployed"),
                  health_task("Judge the health checks"),
                  {"name": "Keep the verdict", "ansible.builtin.copy": {
                      "content": "{{ [_vllm_dual_fast_report, _vllm_dual_fast_health_failures]"
                                 " | to_json }}", "dest": str(out), "mode": "0644"}}],
    }]
    smoke = {"ok": True, "failures": [], "speed": SPEED_SLOWER}
    facts = {
        **DEFAULTS, "vllm_dual_fast_image": "img", "vllm_dual_fast_model": "m",
        "vllm_dual_fast_canary": True, "_vllm_dual_fast_release_is_new": True,
        "vllm_dual_fast_gate_soak_s": 5, "_vllm_dual_fast_serving_dir": "/opt/releases/rel-b",
        "_vllm_dual_fast_previous": f"/opt/releases/{previous}" if previous else "",
        "_vllm_dual_fast_previous_report": previous_report,
        "_vllm_dual_fast_smoke": {"rc": 0, "stdout": json.dumps(smoke), "stderr": ""},
        "_vllm_dual_fast_soak": {"rc": 0, "stderr": "", "stdout": json.dumps(
            {"ok": True, "failures": [], "soak": {"requests": 9, "failed": 0}})},
        "_vllm_dual_fast_race_check": {"rc": race_rc, "stdout": "", "stderr": race_stderr},
        "_vllm_dual_fast_restarts_before": {"stdout": "0"},
        "_vllm_dual_fast_restarts_after": {"stdout": "0 2026-01-01T00:00:00Z"},
        "_vllm_dual_fast_kernel_lines": [], "_vllm_dual_fast_kernel_log": {"rc": 0},
        "_vllm_dual_fast_deploy_began": {"stdout": "1000"},
        "_vllm_dual_fast_patch_at_start": {"stdout": ""},
        "_vllm_dual_fast_patch_check": {"stdout": '{"status": "patched"}', "stderr": ""},
        "_vllm_dual_fast_vllm_version": {"rc": 0, "stdout": "0.33.0"},
        **changed,
    }
    result, text = run_playbook(tmp_path, play, facts)
    assert result.returncode == 0, text
    return json.loads(out.read_text())


def previous_report(release):
    return {"release": release, "healthy": True, "smoke": {"speed": SPEED_BEFORE}}


def test_the_canary_is_judged_against_the_release_that_served_before(tmp_path):
    report, failures = judge(tmp_path, previous_report("rel-a"), "rel-a")
    assert [f for f in failures if f.startswith("decode tokens/s at c=1 fell 60 %")], failures
    assert report["gates"]["speed_before"] == SPEED_BEFORE
    assert report["gates"]["speed_baseline"] == "the previous release rel-a"


def test_a_report_of_another_release_is_no_baseline_and_fails_nothing(tmp_path):
    report, failures = judge(tmp_path, previous_report("rel-old"), "rel-a")
    assert failures == [] and report["healthy"] is True, failures
    assert report["gates"]["speed_before"] == {} and report["gates"]["speed_regressions"] == []
    assert report["gates"]["speed_baseline"] == (
        "no baseline from the previous release rel-a (report is for rel-old)")


def test_a_race_check_that_could_not_be_copied_in_warns_naming_why(tmp_path):
    report, failures = judge(tmp_path, previous_report("rel-a"), "rel-a", race_rc=2,
                             race_stderr="could not copy the race check into vllm-dual-fast")
    assert not [f for f in failures if "race" in f], failures
    assert report["gates"]["race_check"] == [
        "warn", "race check could not run: could not copy the race check into vllm-dual-fast"]


def test_a_release_that_is_no_canary_is_judged_without_gates(tmp_path):
    report, failures = judge(tmp_path, previous_report("rel-a"), "rel-a",
                             vllm_dual_fast_canary=False,
                             _vllm_dual_fast_soak={"skipped": True},
                             _vllm_dual_fast_race_check={"skipped": True})
    assert failures == [] and report["gates"] == {} and report["canary"] is False, report
