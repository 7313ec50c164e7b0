"""health.yml's canary steps, taken from the task file unchanged and run by ansible-playbook on
localhost against containers this test starts on this machine's Docker engine (the rig's own
engine), with a stand-in for race_check.py (the real one needs a GPU) and a smoke.py that records
its arguments; the evidence module's race check also directly, against the same containers. What
is checked: a race check that could not be copied into the container is "could not run" (exit 2),
never "a bad trial" (exit 1); the speed is measured before the soak and the race check after
both; and the judge compares the speed only with the report of the release that served before."""

import importlib.util
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
import yaml
from ansible_runner import ROLE, run_playbook
from docker_engine import docker, needs_docker
from kernel_log_stand_ins import install_kernel_log_tools

ROOT = Path(__file__).parents[2]
HEALTH = yaml.safe_load((ROLE / "tasks/health.yml").read_text())
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
# The role's own derived variables health.yml reads (the bind: loopback by default here).
ROLE_VARS = {k: v for k, v in yaml.safe_load((ROLE / "vars/main.yml").read_text()).items()
             if k in ("_vllm_dual_fast_proxied", "_vllm_dual_fast_loopback_addresses",
                      "_vllm_dual_fast_bind_host")}
GATHER_TASK = "Gather the health checks' evidence on the rig"
KERNEL_LOG_TASK = "Read the kernel lines written since the window opened"
IMAGE = "vdf-target:debian13"  # built by make images; has python3, like a vLLM image

# Records its arguments and the time (the race check records its own) in a log, and answers as
# smoke.py would: the smoke with its speed, or the soak.
FAKE_SMOKE = """\
import json, os, sys, time
with open(os.path.join(os.path.dirname(__file__), "calls.log"), "a") as f:
    f.write(json.dumps(["smoke.py", time.time()] + sys.argv[1:]) + "\\n")
report = {"ok": True, "failures": [], "aggregate": {"ok": 4}, "health": {"waited_s": 0.1}}
if "--speed" in sys.argv:
    report["speed"] = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.2}, "concurrency": 4}
if "--soak-s" in sys.argv:
    report["soak"] = {"requests": 9, "failed": 0}
print(json.dumps(report))
"""

# Stands in for race_check.py inside the container: leaves a mark, prints a trial line and a
# last line with the time, exits with the status given.
STAND_IN_RACE_CHECK = """\
import sys, time
open("/tmp/vdf-check/ran", "w").close()
print("race_check: trial 1 of 1 ...")
print(f"race_check: stand-in exit {rc} at {{time.time()}}")
sys.exit({rc})
"""


def health_input(release_dir, gates=True, baseline_release="", baseline_report=None):
    """health.yml's one input: the release folder, its manifest, the gates, the baseline."""
    manifest = {"release": Path(release_dir).name, "image": "img", "model": "m",
                "served_model_name": "q", "patch_enabled": True, "bind_address": "127.0.0.1",
                "port": 8000, "api_key_set": False, "max_num_seqs": 4, "race_exposed": True}
    return {"release_dir": release_dir, "manifest": manifest, "gates": gates,
            "baseline_release": baseline_release, "baseline_report": baseline_report or {}}


def evidence_module():
    spec = importlib.util.spec_from_file_location(
        "vllm_dual_fast_health_evidence", ROLE / "library/vllm_dual_fast_health_evidence.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def health_task(name):
    found = [t for t in HEALTH if t["name"] == name]
    assert len(found) == 1, [t["name"] for t in HEALTH]
    return found[0]


def health_tasks_until(name):
    """health.yml's tasks from the first up to (not including) the one named."""
    names = [t["name"] for t in HEALTH]
    assert name in names, names
    return HEALTH[: names.index(name)]



@pytest.fixture(scope="module")
def running():
    """A running container, as the new release's would be on the rig."""
    name = f"vdf-health-test-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name, IMAGE, "sleep", "infinity")
    yield name
    docker("rm", "-f", name, check=False)


@pytest.fixture(scope="module")
def stopped():
    """A container that is not running (gone by the time the check runs): exec fails."""
    name = f"vdf-health-test-stopped-{uuid.uuid4().hex[:8]}"
    docker("create", "--name", name, IMAGE, "sleep", "infinity")
    yield name
    docker("rm", "-f", name, check=False)


def release_dir(tmp_path, race_rc=0, with_patcher=True):
    """A release folder with a space in its path, holding the checks health.yml copies in."""
    serving = tmp_path / "rel a"
    (serving / "checks").mkdir(parents=True)
    (serving / "checks/race_check.py").write_text(STAND_IN_RACE_CHECK.format(rc=race_rc))
    if with_patcher:
        shutil.copy(ROOT / "files/patcher.py", serving / "checks/patcher.py")
    return serving


def ran_in(container):
    """Whether the race check ran in the container (its mark), then the mark removed."""
    ran = docker("exec", container, "test", "-e", "/tmp/vdf-check/ran", check=False)
    docker("exec", container, "rm", "-rf", "/tmp/vdf-check", check=False)
    return ran.returncode == 0


def run_race_check(container, serving):
    """The evidence module's race check on a canary, with the real docker; its result."""
    return evidence_module().race_check(container, str(serving / "checks"),
                                        evidence_module().run)


@needs_docker
def test_a_race_check_in_a_container_that_is_not_running_could_not_run(tmp_path, stopped):
    # Exit 1 is race_check's "bad trial": a gone container must not read as one.
    race = run_race_check(stopped, release_dir(tmp_path))
    assert race["rc"] == 2, race
    assert f"could not copy the race check into {stopped}" in race["stderr"], race


@needs_docker
def test_a_race_check_that_cannot_be_copied_in_could_not_run(tmp_path, running):
    race = run_race_check(running, release_dir(tmp_path, with_patcher=False))
    assert race["rc"] == 2, race
    assert f"could not copy the race check into {running}" in race["stderr"], race
    assert not ran_in(running)    # not run


@needs_docker
@pytest.mark.parametrize("race_rc", [0, 1, 2])
def test_the_race_check_s_own_exit_status_is_kept(tmp_path, running, race_rc):
    # The release folder's path has a space: it reaches docker cp as one path.
    race = run_race_check(running, release_dir(tmp_path, race_rc=race_rc))
    assert race["rc"] == race_rc, race
    assert race["stdout"].startswith(f"race_check: stand-in exit {race_rc} at "), race  # last line
    assert ran_in(running)


def gather_play(out, *before):
    """A play of health.yml's first tasks through the evidence module, keeping its evidence."""
    return [{"name": "Health's evidence", "hosts": "localhost", "gather_facts": False,
             "tasks": [*before, health_task("Know what is judged"), health_task(GATHER_TASK),
                       {"name": "Keep the evidence", "ansible.builtin.copy": {
                           "content": "{{ _vllm_dual_fast_gathered.evidence | to_json }}",
                           "dest": str(out), "mode": "0644"}}]}]


@needs_docker
def test_the_speed_is_measured_before_the_soak_and_the_race_check_after_both(tmp_path, running):
    # The baseline (the previous release's report) was measured on a freshly started server;
    # measured after a soak, the canary's figures would not be comparable with it.
    serving = release_dir(tmp_path)
    (serving / "smoke.py").write_text(FAKE_SMOKE)
    out = tmp_path / "evidence.json"
    facts = {**DEFAULTS, "vllm_dual_fast_gate_soak_s": 5, "_vllm_dual_fast_container": running,
             "_vllm_dual_fast_health": health_input(str(serving)),
             "_vllm_dual_fast_state_dir": str(tmp_path / "state"),
             "_vllm_dual_fast_kernel_window": {"since_epoch": 1000.75}}
    result, text = run_playbook(tmp_path, gather_play(out), facts)
    assert result.returncode == 0, text
    calls = [json.loads(line) for line in (serving / "calls.log").read_text().splitlines()]
    order = [("speed" if "--speed" in c else "") + ("soak" if "--soak-s" in c else "")
             for c in calls]
    assert order == ["speed", "soak"], calls
    evidence = json.loads(out.read_text())
    race = evidence["race_check"]
    assert race["rc"] == 0, race
    race_at = float(race["stdout"].rsplit(" at ", 1)[1])
    assert race_at > max(c[1] for c in calls)  # the race check after the smoke and the soak
    # The smoke's own answer as smoke.py printed it, and the container's restart count read.
    assert json.loads(evidence["smoke"]["stdout"])["speed"]["concurrency"] == 4, evidence
    assert evidence["restarts_before"] == {**evidence["restarts_before"], "rc": 0, "stdout": "0"}
    docker("exec", running, "rm", "-rf", "/tmp/vdf-check", check=False)


SPEED_BEFORE = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.2}, "concurrency": 4}
SPEED_SLOWER = {"c1": {"tokens_per_s": 20.0, "ttft_s": 0.2}, "concurrency": 4}


def gathered(**changes):
    """The evidence module's result for a canary whose checks all passed, with changes."""
    smoke = {"ok": True, "failures": [], "speed": SPEED_SLOWER}
    return {"evidence": {
        "smoke": {"rc": 0, "stdout": json.dumps(smoke), "stderr": ""},
        "soak": {"rc": 0, "stderr": "", "stdout": json.dumps(
            {"ok": True, "failures": [], "soak": {"requests": 9, "failed": 0}})},
        "race_check": {"rc": 0, "stdout": "", "stderr": ""},
        "restarts_before": {"stdout": "0"},
        "restarts_after": {"stdout": "0 2026-01-01T00:00:00Z"},
        "patch_at_start": {"stdout": ""},
        "patch_check": {"stdout": '{"status": "patched"}', "stderr": ""},
        "vllm_version": {"rc": 0, "stdout": "0.33.0"},
        **changes}}


def keep_verdict(out):
    """A task writing the verdict's report and its failures' lines to out, as JSON."""
    return {"name": "Keep the verdict", "ansible.builtin.copy": {
        "content": "{{ [_vllm_dual_fast_verdict.report, _vllm_dual_fast_verdict.failures"
                   " | map(attribute='line') | list] | to_json }}",
        "dest": str(out), "mode": "0644"}}


def judge(tmp_path, previous_report, previous, health=None, **evidence):
    """health.yml's judge on a canary, with the checks' results given; (report, failures)."""
    out = tmp_path / "judged.json"
    play = [{
        "name": "Judge", "hosts": "localhost", "gather_facts": False,
        "tasks": [health_task("Know what is judged"),
                  health_task("Judge the health checks"),
                  keep_verdict(out)],
    }]
    facts = {
        **DEFAULTS, **ROLE_VARS, "vllm_dual_fast_gate_soak_s": 5,
        "_vllm_dual_fast_health": health or health_input(
            "/opt/releases/rel-b", baseline_release=previous, baseline_report=previous_report),
        "_vllm_dual_fast_gathered": gathered(**evidence),
        "_vllm_dual_fast_kernel_log": {"lines": [], "readable": True, "source": "journal",
                                       "error": ""},
        "_vllm_dual_fast_kernel_window": {"since_epoch": 1000.75, "since_monotonic": 80.5,
                                          "boot_id": "b-1"},
    }
    result, text = run_playbook(tmp_path, play, facts)
    assert result.returncode == 0, text
    return json.loads(out.read_text())


def previous_report(release):
    return {"release": release, "healthy": True, "smoke": {"speed": SPEED_BEFORE}}


def test_the_report_names_the_kernel_log_s_window_and_source(tmp_path):
    report, _ = judge(tmp_path, previous_report("rel-a"), "rel-a")
    assert (report["kernel_log_since"], report["kernel_log_source"]) == (1000, "journal"), report
    assert report["kernel_log_readable"] is True and report["kernel_xid_lines"] == [], report


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
    report, failures = judge(tmp_path, previous_report("rel-a"), "rel-a", race_check={
        "rc": 2, "stdout": "", "stderr": "could not copy the race check into vllm-dual-fast"})
    assert not [f for f in failures if "race" in f], failures
    assert report["gates"]["race_check"] == [
        "warn", "race check could not run: could not copy the race check into vllm-dual-fast"]


def test_a_release_that_is_no_canary_is_judged_without_gates(tmp_path):
    report, failures = judge(tmp_path, previous_report("rel-a"), "rel-a",
                             health=health_input("/opt/releases/rel-b", gates=False),
                             soak={"skipped": True}, race_check={"skipped": True})
    assert failures == [] and report["gates"] == {} and report["canary"] is False, report


# A race check that passes its own trials but faults the GPU on the way (what the pinned
# comparison does on a real card): the NVIDIA driver's Xid line lands in the kernel log, here
# through the kernel-log double's lines file, which the container writes through a bind mount.
PROVOKING_RACE_CHECK = """\
import time
line = ("NVRM: Xid (PCI:0000:01:00): 31, pid=4321, name=python3, Ch 00000008, intr 00000000. "
        "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_1c000000.")
with open("/kmsg/lines", "a") as log:
    log.write(f"{time.time():.6f} {line}\\n")
print("race_check: installed: 0 of 3 bad")
"""


def test_the_kernel_log_is_read_after_the_race_check():
    # The play below takes the tasks in this order; health.yml must have them so too, or a
    # check that faults the GPU would write its Xid line after the log was read.
    names = [t["name"] for t in HEALTH]
    assert names.index(GATHER_TASK) < names.index(KERNEL_LOG_TASK) < names.index(
        "Judge the health checks"), names


@needs_docker
def test_a_race_check_that_faults_the_gpu_fails_health(tmp_path):
    from test_kernel_log_tasks import kernel_log_tasks

    kmsg = tmp_path / "kmsg"
    kmsg.mkdir()
    (kmsg / "lines").write_text("")
    name = f"vdf-health-test-xid-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name, "-v", f"{kmsg}:/kmsg", IMAGE, "sleep", "infinity")
    try:
        serving = release_dir(tmp_path)
        (serving / "checks/race_check.py").write_text(PROVOKING_RACE_CHECK)
        double_bin, real_bin = install_kernel_log_tools(tmp_path)
        out = tmp_path / "judged.json"
        (serving / "smoke.py").write_text(FAKE_SMOKE)
        play = [{
            "name": "Evidence, kernel log, judge", "hosts": "localhost", "gather_facts": False,
            "tasks": [
                {"name": "Open the window",
                 "ansible.builtin.include_tasks": str(ROLE / "tasks/kernel_window.yml")},
                health_task("Know what is judged"),
                health_task(GATHER_TASK),
                *kernel_log_tasks(),
                health_task("Judge the health checks"),
                keep_verdict(out)],
        }]
        facts = {
            **DEFAULTS, **ROLE_VARS, "_vllm_dual_fast_container": name,
            "_vllm_dual_fast_health": health_input(str(serving)),
            "_vllm_dual_fast_state_dir": str(tmp_path / "state"),
        }
        env = {"PATH": f"{double_bin}:{real_bin}:{os.environ['PATH']}",
               "DMESG_DOUBLE_LINES": str(kmsg / "lines"),
               "DMESG_DOUBLE_CONFIG": str(tmp_path / "no-config.json"),
               "JOURNAL_KEEPS_KERNEL": "0"}
        result, text = run_playbook(tmp_path, play, facts, env=env)
        assert result.returncode == 0, text
        report, failures = json.loads(out.read_text())
    finally:
        docker("rm", "-f", name, check=False)
    assert report["gates"]["race_check"][0] == "pass", report["gates"]  # its own trials passed
    assert [f for f in failures if "Xid" in f and "pid=4321" in f], failures
    assert [line for line in report["kernel_xid_lines"] if "pid=4321" in line], report
    assert report["healthy"] is False
