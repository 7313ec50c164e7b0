"""scripts/test-all.sh (`make test`) and scripts/molecule-timed.sh, run for real from a copy of
the scripts in a temporary checkout, with stand-ins for `make` and `molecule` on PATH (the real
ones would run the whole suite) that log when each step starts and ends; the leftovers check
asks this machine's real Docker engine for dangling images. The two lanes overlap, a failure in
either lane makes the whole run fail, and a scenario runs the phases its own molecule.yml names."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from molecule_config import merge_dicts, scenario_config  # noqa: E402

MAKE = """#!/bin/bash
# Stand-in for make: logs the target, takes a moment for pytest.
target="${@: -1}"
echo "$(date +%s.%N) start make ${target}" >>"$STEPS"
[ "${target}" = pytest ] && sleep 2
[ "${target}" = system ] && sleep 1
[ "${target}" = venv ] && sleep 0.3
echo "$(date +%s.%N) end make ${target}" >>"$STEPS"
[ "${FAIL:-}" = "make:${target}" ] && { echo "make: *** [${target}] Error 1"; exit 2; }
exit 0
"""

MOLECULE = """#!/bin/bash
# Stand-in for molecule: `molecule <phase> -s <scenario>`; FAIL names scenario:phase to fail.
echo "$(date +%s.%N) start molecule $3 $1" >>"$STEPS"
echo "INFO     [$3 > $1] Executing"
echo "$3 $1 ${ANSIBLE_STRATEGY:-stock}" >>"$STEPS.strategy"    # what each phase ran under
# As Molecule does, `create` runs the prepare playbook too: FAIL=<scenario>:prepare fails there.
if [ "$1" = create ] && [ "${FAIL:-}" = "$3:prepare" ]; then
  echo "INFO     [$3 > prepare] Executing"; echo "fatal: $3 prepare failed"; exit 2
fi
if [ "$1" = create ] && [ "${FAIL_ONCE:-}" = "$3:prepare" ] && [ ! -e "$STEPS.once" ]; then
  touch "$STEPS.once"; echo "INFO     [$3 > prepare] Executing"; echo "${FAIL_ONCE_MSG}"; exit 2
fi
echo "CRITICAL 'molecule/default/molecule.yml' glob failed.  Exiting."    # as Molecule 25 logs it
[ "$1" = verify ] && sleep 0.5
echo "$(date +%s.%N) end molecule $3 $1" >>"$STEPS"
[ "${FAIL:-}" = "$3:$1" ] && { echo "fatal: $3 $1 failed"; exit 2; }
# FAIL_ONCE: that scenario:phase fails the first time only.
if [ "${FAIL_ONCE:-}" = "$3:$1" ] && [ ! -e "$STEPS.once" ]; then
  touch "$STEPS.once"; echo "${FAIL_ONCE_MSG:-fatal: $3 $1 failed once}"; exit 2
fi
exit 0
"""

SEQUENCE = ["dependency", "destroy", "create", "prepare", "converge", "idempotence", "verify",
            "destroy"]


def checkout(tmp_path, scenarios):
    """A checkout with the two scripts and the config reader, one molecule.yml per scenario and
    stand-ins on PATH; scenarios maps a name to its test_sequence, or to its whole molecule.yml
    (a dict)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for script in ("test-all.sh", "molecule-timed.sh", "molecule_config.py"):
        shutil.copy(ROOT / "scripts" / script, repo / "scripts" / script)
    for name, sequence in scenarios.items():
        (repo / "molecule" / name).mkdir(parents=True)
        (repo / "molecule" / name / "molecule.yml").write_text(
            yaml.safe_dump(sequence if isinstance(sequence, dict)
                           else {"scenario": {"test_sequence": sequence}}))
    stand_ins = tmp_path / "bin"
    stand_ins.mkdir()
    for name, body in (("make", MAKE), ("molecule", MOLECULE)):
        (stand_ins / name).write_text(body)
        (stand_ins / name).chmod(0o755)
    return repo, stand_ins


def run_all(tmp_path, scenarios, *order, **env):
    repo, stand_ins = checkout(tmp_path, scenarios)
    steps = tmp_path / "steps.log"
    run = subprocess.run(
        [str(repo / "scripts/test-all.sh"), *order], capture_output=True, text=True, timeout=120,
        check=False, env={**os.environ, "VDF_LANES": "2",    # the default, whatever this run's
                          "PATH": f"{stand_ins}:{Path(sys.executable).parent}:"
                          f"{os.environ['PATH']}", "STEPS": str(steps), **env})
    events = {}
    for line in steps.read_text().splitlines():
        when, edge, *what = line.split()
        events.setdefault(" ".join(what), {})[edge] = float(when)
    return run, events


def test_pytest_then_fleet_and_existing_run_beside_the_other_scenarios(tmp_path):
    run, events = run_all(tmp_path, {"default": SEQUENCE, "fleet": SEQUENCE, "existing": SEQUENCE},
                          "default", "fleet", "existing")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.rstrip().splitlines()[-1].endswith("PASSED")
    # default's rig works while pytest runs; fleet and then existing only after pytest.
    assert events["molecule default converge"]["start"] < events["make pytest"]["end"]
    assert events["molecule fleet destroy"]["start"] >= events["make pytest"]["end"]
    assert events["molecule existing destroy"]["start"] >= events["molecule fleet verify"]["end"]
    assert "[scenarios] == molecule default: passed" in run.stdout
    assert "[pytest] == molecule fleet: passed" in run.stdout
    assert "[pytest] == molecule existing: passed" in run.stdout
    # In the summary too, a line per scenario with its phases' seconds.
    assert re.search(r"^molecule default: passed  cleanup [0-9.]+  create .* total [0-9.]+$",
                     run.stdout.split("== summary of make test")[1], re.M), run.stdout
    log = (tmp_path / "repo/.ci/last-run.log").read_text()
    assert "[pytest] == pytest:" in log and "[scenarios] == molecule:" in log


def test_the_virtualenv_and_lint_run_beside_the_engine_and_images(tmp_path):
    """Before: the virtualenv, engine, images and host packages were built one after the other,
    and lint waited for all of them although it needs only the virtualenv."""
    run, events = run_all(tmp_path, {"default": SEQUENCE}, "default")
    assert run.returncode == 0, run.stdout + run.stderr
    assert events["make venv"]["end"] <= events["make lint"]["start"]
    assert events["make venv"]["start"] < events["make system"]["end"]
    assert events["make lint"]["start"] < events["make system"]["end"]
    lanes_start = min(events["make pytest"]["start"], events["molecule default destroy"]["start"])
    assert max(events["make lint"]["end"], events["make system"]["end"]) <= lanes_start
    assert re.search(r"^lint +ok", run.stdout, re.M), run.stdout


def test_the_plugins_are_compiled_before_either_lane_starts(tmp_path):
    """Before: Ansible compiled the role's filter plugins from source in every task's worker
    where PYTHONDONTWRITEBYTECODE is set; `make bytecode` compiles them once, first."""
    run, events = run_all(tmp_path, {"default": SEQUENCE}, "default")
    assert run.returncode == 0, run.stdout + run.stderr
    assert events["make venv"]["end"] <= events["make bytecode"]["start"]
    lanes_start = min(events["make pytest"]["start"], events["molecule default destroy"]["start"])
    assert events["make bytecode"]["end"] <= lanes_start
    assert re.search(r"^bytecode +ok", run.stdout, re.M), run.stdout


def test_no_lane_starts_without_the_virtualenv(tmp_path):
    run, events = run_all(tmp_path, {"default": SEQUENCE}, "default", FAIL="make:venv")
    assert run.returncode != 0
    assert "make lint" not in events and "make pytest" not in events, events
    assert run.stdout.rstrip().splitlines()[-1].endswith("FAILED")


def test_a_lint_failure_fails_the_run(tmp_path):
    run, _ = run_all(tmp_path, {"default": SEQUENCE}, "default", FAIL="make:lint")
    assert run.returncode != 0
    assert re.search(r"^lint +FAILED", run.stdout, re.M), run.stdout
    assert run.stdout.rstrip().splitlines()[-1].endswith("FAILED")


def test_a_scenario_failing_in_one_lane_fails_the_run_and_the_other_lane_finishes(tmp_path):
    run, events = run_all(tmp_path, {"default": SEQUENCE, "fleet": SEQUENCE}, "default", "fleet",
                          FAIL="default:verify")
    assert run.returncode == 1
    assert run.stdout.rstrip().splitlines()[-1].endswith("FAILED")
    assert re.search(r"^molecule +FAILED", run.stdout, re.M)
    assert "molecule fleet verify" in events              # the fleet lane went on
    assert re.search(r"^molecule fleet: passed ", run.stdout, re.M)


def test_the_summary_says_why_a_scenario_failed(tmp_path):
    """CI shows only the end of the output: the summary repeats the failed phase's own lines."""
    run, _ = run_all(tmp_path, {"default": SEQUENCE}, "default", FAIL="default:verify")
    summary = run.stdout.split("== summary of make test")[1]
    assert "   why| default verify: fatal: default verify failed" in summary, summary


def test_a_failed_create_is_tried_once_more(tmp_path):
    """Molecule's own container start, failing once, is retried after a destroy; the summary
    still says why the first one failed."""
    run, events = run_all(tmp_path, {"default": SEQUENCE}, "default", FAIL_ONCE="default:create")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "molecule default verify" in events
    summary = run.stdout.split("== summary of make test")[1]
    assert "why| default create: fatal: default create failed once" in summary, summary
    assert re.search(r"^molecule default: passed ", summary, re.M)


# What Ansible printed when Docker's exec API lost a command's output (a driver converge, 2026-12).
DOCKER_EXEC_LOST = (
    "fatal: [vdf-molecule-driver-noble]: FAILED! => {\"changed\": false, \"msg\": \"Task failed: "
    "failed to resolve remote temporary directory from ansible-tmp-1796403539.5739372-7854-"
    "179607526192196: `_ShellCommand(command='( umask 77 && mkdir -p \\\"` "
    "echo /root/.ansible/tmp `\\\" )', input_data=None)` returned empty string\"}")


# What runc said when it could not start a module in the rig (an existing idempotence, 2026-12).
RUNC_EXEC_FAILED = (
    "failed: [vdf-molecule-existing] (item=https://download.docker.com/linux/debian) => "
    "{\"module_stdout\": \"OCI runtime exec failed: exec failed: unable to start container "
    "process: waiting for init preliminary setup: read init-p: connection reset by peer: unknown"
    "\\r\\n\", \"msg\": \"Module result deserialization failed: No start of json char found\", "
    "\"rc\": 126}")


@pytest.mark.parametrize(("phase", "message"), [
    ("converge", DOCKER_EXEC_LOST), ("idempotence", DOCKER_EXEC_LOST),
    ("converge", RUNC_EXEC_FAILED), ("idempotence", RUNC_EXEC_FAILED)])
def test_a_converge_whose_output_docker_lost_runs_once_more(tmp_path, phase, message):
    run, _ = run_all(tmp_path, {"default": SEQUENCE}, "default", FAIL_ONCE=f"default:{phase}",
                     FAIL_ONCE_MSG=message)
    assert run.returncode == 0, run.stdout + run.stderr
    starts = (tmp_path / "steps.log").read_text().count(f"start molecule default {phase}")
    assert starts == 2, run.stdout
    summary = run.stdout.split("== summary of make test")[1]
    assert f"why| default {phase}: {message[:60]}" in summary, summary
    assert re.search(r"^molecule default: passed ", summary, re.M)


@pytest.mark.parametrize(("phase", "message"), [
    ("converge", "fatal: [rig]: FAILED! => {\"msg\": \"the role failed\"}"),  # the role's own
    ("verify", DOCKER_EXEC_LOST),     # verify's sequences do not start again halfway
])
def test_other_failures_are_not_run_again(tmp_path, phase, message):
    run, _ = run_all(tmp_path, {"default": SEQUENCE}, "default", FAIL_ONCE=f"default:{phase}",
                     FAIL_ONCE_MSG=message)
    assert run.returncode == 1, run.stdout
    starts = (tmp_path / "steps.log").read_text().count(f"start molecule default {phase}")
    assert starts == 1, run.stdout
    assert re.search(rf"^molecule default: FAILED .* {phase} -", run.stdout, re.M)


def test_a_create_failing_twice_fails_the_scenario(tmp_path):
    run, events = run_all(tmp_path, {"default": SEQUENCE}, "default", FAIL="default:create")
    assert run.returncode == 1
    assert "molecule default prepare" not in events
    assert re.search(r"^molecule default: FAILED  cleanup [0-9.]+  create -", run.stdout, re.M)


def test_a_prepare_failing_inside_create_is_not_tried_again(tmp_path):
    """The project's own prepare playbook, run by `molecule create`, gets no second chance."""
    run, _ = run_all(tmp_path, {"default": SEQUENCE}, "default", FAIL="default:prepare")
    assert run.returncode == 1
    starts = (tmp_path / "steps.log").read_text().count("start molecule default create")
    assert starts == 1, run.stdout
    summary = run.stdout.split("== summary of make test")[1]
    assert "why| default create: fatal: default prepare failed" in summary, summary


@pytest.mark.parametrize("message", [DOCKER_EXEC_LOST, RUNC_EXEC_FAILED])
def test_a_prepare_that_docker_s_exec_failed_is_run_again_on_fresh_rigs(tmp_path, message):
    """Before: a prepare failing in Docker's exec (the clean-clone run of 79cf535, `fleet`)
    failed the whole run; the engine's fault, like a converge's, gets one more go, on rigs
    destroyed and created anew so that no prepare runs twice on one rig."""
    run, events = run_all(tmp_path, {"default": SEQUENCE}, "default",
                          FAIL_ONCE="default:prepare", FAIL_ONCE_MSG=message)
    assert run.returncode == 0, run.stdout + run.stderr
    log = (tmp_path / "steps.log").read_text().splitlines()
    starts = [i for i, line in enumerate(log) if "start molecule default create" in line]
    assert len(starts) == 2, log
    # the script's own destroy between the two (the stand-in logs only phases it is asked for)
    assert "default create failed; removing what it left and creating once more" in run.stdout


def test_one_lane_runs_every_step_in_turn(tmp_path):
    run, events = run_all(tmp_path, {"default": SEQUENCE, "fleet": SEQUENCE}, "default", "fleet",
                          VDF_LANES="1")
    assert run.returncode == 0, run.stdout + run.stderr
    assert events["molecule default destroy"]["start"] >= events["molecule fleet verify"]["end"]


def test_three_lanes_run_fleet_from_the_start_and_driver_after_pytest(tmp_path):
    scenarios = {name: SEQUENCE for name in ("deploy", "fleet", "existing", "driver")}
    run, events = run_all(tmp_path, scenarios, "deploy", "fleet", "existing", "driver",
                          VDF_LANES="3")
    assert run.returncode == 0, run.stdout + run.stderr
    # fleet starts beside deploy and pytest; driver waits for pytest; existing follows deploy
    assert events["molecule fleet converge"]["start"] < events["make pytest"]["end"]
    assert events["molecule fleet converge"]["start"] < events["molecule deploy verify"]["end"]
    assert events["molecule driver destroy"]["start"] >= events["make pytest"]["end"]
    assert events["molecule existing destroy"]["start"] >= events["molecule deploy verify"]["end"]
    assert "[own] == molecule fleet: passed" in run.stdout
    assert "[pytest] == molecule driver: passed" in run.stdout
    assert "[scenarios] == molecule existing: passed" in run.stdout


def test_a_scenario_runs_the_phases_its_test_sequence_names(tmp_path):
    without_idempotence = [p for p in SEQUENCE if p != "idempotence"]
    run, events = run_all(tmp_path, {"deploy": without_idempotence}, "deploy")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "molecule deploy idempotence" not in events and "molecule deploy verify" in events
    assert re.search(r"^\[scenarios\]    idempotence +-$", run.stdout, re.M)    # not run, not 0 s
    assert re.search(r"^\[scenarios\]    verify +[0-9]+\.[0-9]$", run.stdout, re.M)
    assert re.search(r"^molecule deploy: passed .*  idempotence -  verify [0-9]+\.[0-9]  ",
                     run.stdout, re.M)
    # Molecule's search for a default scenario reads like a failure; it is labelled as expected.
    assert "glob failed.  Exiting. [expected: no default scenario here" in run.stdout


def phase_strategies(tmp_path):
    lines = (tmp_path / "steps.log.strategy").read_text().splitlines()
    return {tuple(line.split()[:2]): line.split()[2] for line in lines}


def test_only_idempotence_runs_under_the_strategy_its_scenario_names(tmp_path):
    """Before: every phase ran under the one strategy of the environment, so a scenario whose
    converge reboots a rig (stock Ansible) could not have its idempotence under Mitogen."""
    mitogen = {"provisioner": {"env": {"VDF_IDEMPOTENCE_STRATEGY": "mitogen_linear"}},
               "scenario": {"test_sequence": SEQUENCE}}
    run, _ = run_all(tmp_path, {"default": mitogen, "existing": SEQUENCE}, "default", "existing")
    assert run.returncode == 0, run.stdout + run.stderr
    ran = phase_strategies(tmp_path)
    assert ran[("default", "idempotence")] == "mitogen_linear", ran
    assert {phase for (scenario, phase), how in ran.items() if how != "stock"} == {"idempotence"}
    assert ran[("existing", "idempotence")] == "stock", ran    # names none: as the other phases
    assert "default idempotence under ANSIBLE_STRATEGY=mitogen_linear" in run.stdout


def test_an_idempotence_run_again_keeps_its_strategy(tmp_path):
    mitogen = {"provisioner": {"env": {"VDF_IDEMPOTENCE_STRATEGY": "mitogen_linear"}},
               "scenario": {"test_sequence": SEQUENCE}}
    run, events = run_all(tmp_path, {"default": mitogen}, "default",
                          FAIL_ONCE="default:idempotence", FAIL_ONCE_MSG=RUNC_EXEC_FAILED)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = (tmp_path / "steps.log.strategy").read_text().splitlines()
    assert lines.count("default idempotence mitogen_linear") == 2, lines


def test_a_scenario_without_molecules_idempotence_checks_it_in_its_verify():
    for path in sorted((ROOT / "molecule").glob("*/molecule.yml")):
        sequence = scenario_config(path.parent.name)["scenario"]["test_sequence"]
        assert sequence[-2:] == ["verify", "destroy"], path
        if "idempotence" not in sequence:
            # a nested run's PLAY RECAP read for changed=0 (deploy), or each host's count (fleet)
            verify = (path.parent / "verify.yml").read_text()
            assert re.search(r"changed=(0\\s|\(\[0-9\]\+\))", verify), path


def lanes_of_make_test():
    """The scenarios of each lane as `make test` runs them: the Makefile's SCENARIOS, split by
    test-all.sh's default VDF_AFTER_PYTEST with two lanes."""
    scenarios = re.search(r"^SCENARIOS \?= (.+)$", (ROOT / "Makefile").read_text(), re.M)[1].split()
    after = re.search(r'after_default="([a-z ]+)" own_default=""',
                      (ROOT / "scripts/test-all.sh").read_text())
    after = after[1].split()
    return [s for s in scenarios if s not in after], [s for s in scenarios if s in after]


def writable_host_folders(scenario):
    """The host folders a scenario's rigs mount writable (named volumes and :ro left out)."""
    config = scenario_config(scenario)
    folders = set()
    for platform in config["platforms"]:
        for volume in platform.get("volumes", []):
            host, _, rest = volume.partition(":/")
            if host.startswith("${VDF_CACHE") and not rest.endswith(":ro"):
                folders.add(host)
    return folders


def test_scenarios_in_different_lanes_share_no_writable_cache():
    # Two rigs running apt at once over one archive folder fight over its lock; with three lanes
    # any two scenarios may run at once.
    one, other = lanes_of_make_test()
    assert one and other and "fleet" in other
    shared = {(a, b, folder) for a in one for b in other
              for folder in writable_host_folders(a) & writable_host_folders(b)}
    assert not shared
    every = one + other
    shared = {(a, b, folder) for a in every for b in every if a < b
              for folder in writable_host_folders(a) & writable_host_folders(b)}
    assert not shared


def test_a_scenario_s_configuration_is_the_base_with_its_own_over_it():
    # As Molecule merges .config/molecule/config.yml and a molecule.yml: dictionaries key by key,
    # lists replaced (a scenario's platforms and test_sequence are its own, whole).
    base = {"provisioner": {"env": {"A": "1", "B": "2"}, "name": "ansible"},
            "scenario": {"test_sequence": ["create", "idempotence", "verify"]}}
    own = {"provisioner": {"env": {"B": "3"}}, "scenario": {"test_sequence": ["verify"]}}
    assert merge_dicts(base, own) == {
        "provisioner": {"env": {"A": "1", "B": "3"}, "name": "ansible"},
        "scenario": {"test_sequence": ["verify"]}}


def test_every_rig_is_created_by_the_shared_create_with_the_base_s_defaults():
    # A platform names what differs only; the defaults every rig needs are create.yml's.
    for path in sorted((ROOT / "molecule").glob("*/molecule.yml")):
        config = scenario_config(path.parent.name)
        assert config["provisioner"]["playbooks"]["create"] == "../shared/create.yml", path
        for platform in config["platforms"]:
            assert set(platform) <= {"name", "image", "volumes", "groups", "restart_policy",
                                     "shm_size"}, (path, platform)
    create = yaml.safe_load((ROOT / "molecule/shared/create.yml").read_text())
    started = create[0]["tasks"][0]["community.docker.docker_container"]
    assert (started["privileged"], started["cgroupns_mode"]) == (True, "private")
    assert started["tmpfs"] == ["/run", "/run/lock", "/tmp"]
