"""playbooks/rollout.yml's canary and batches, run by ansible-playbook over local stand-in rigs
with the playbook's plays and task files unchanged (rollout_stand_ins.py). The canary must be the
first staged rig in inventory order, the rest cut into batches as `serial` would cut them, and a
rig whose staging failed must be in no batch. (A group_by the playbook once used ordered rigs as
their results came back from the forks: the fleet scenario once got rig 2 as its canary. That
order cannot be forced here, so these tests pin the order the playbook promises instead.)"""

import json
from pathlib import Path

import pytest
import yaml
from ansible_runner import run_playbook
from rollout_stand_ins import rollout_play, run_rollout

ROOT = Path(__file__).parents[2]
RIGS = ["rig-1", "rig-2", "rig-3", "rig-4"]


def run(tmp_path, staged, extra_vars=None, rigs=RIGS):
    """The rigs in `staged` stage, the others fail staging; returns the canary batch and the
    batches of the rest, each a list of rigs, in the order they switched."""
    result = run_rollout(
        tmp_path,
        rigs,
        {"vdf_test_fail": {rig: "staging" for rig in rigs if rig not in staged},
         **(extra_vars or {})},
    )
    assert result.result.returncode == 0, result.out
    canary, batches = [], []
    for line in result.switched.values():
        into = canary if line["canary"] else batches
        if line["batch"] not in into:
            into.append(line["batch"])
    assert len(canary) <= 1, canary
    return (canary[0] if canary else []), batches


def test_the_canary_is_the_first_staged_rig_in_inventory_order(tmp_path):
    canary, batches = run(tmp_path, ["rig-1", "rig-3", "rig-4"])
    assert canary == ["rig-1"]
    assert batches == [["rig-3"], ["rig-4"]]  # default [1, "25%", "100%"]; rig-2 never staged


def test_two_canaries_then_the_rest_in_one_batch(tmp_path):
    canary, batches = run(
        tmp_path,
        ["rig-2", "rig-3", "rig-4"],
        {"vdf_rollout_canary": 2, "vdf_rollout_batches": ["100%"]},
    )
    assert canary == ["rig-2", "rig-3"]
    assert batches == [["rig-4"]]


def batching_task():
    play = rollout_play("Stage")
    tasks = [t for t in play["tasks"] if t["name"].startswith("Cut the staged rigs into batches")]
    assert len(tasks) == 1, [t["name"] for t in play["tasks"]]
    return tasks[0]


def batches_of(tmp_path, staged, extra_vars, rigs):
    """The batches the staging play's task cuts, run alone: the controller host first, then the
    rigs, `staged` of them in vdf_staged."""
    inventory = {
        "all": {
            "hosts": {"vdf-rollout-controller": {"ansible_connection": "local",
                                                 "_vdf_rollout_controller": True}},
            "children": {
                "rig3090": {"hosts": {r: {"ansible_connection": "local"} for r in rigs}},
                "vdf_staged": {"hosts": {r: {} for r in staged}},
            },
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    out_file = tmp_path / "batches.json"
    plays = [
        {
            "name": "Cut batches",
            "hosts": "vdf-rollout-controller:rig3090",
            "gather_facts": False,
            "vars": rollout_play("Stage")["vars"],    # the rollout's own (_vdf_action)
            "tasks": [
                batching_task(),
                {
                    "name": "Write them",
                    "ansible.builtin.copy": {"content": "{{ _vdf_batches | to_json }}",
                                             "dest": str(out_file), "mode": "0644"},
                    "when": "_vdf_rollout_controller | default(false)",
                },
            ],
        }
    ]
    result, out = run_playbook(tmp_path, plays, extra_vars,
                               inventory=("-i", str(tmp_path / "inventory.yml")))
    assert result.returncode == 0, out
    return json.loads(out_file.read_text())


TEN = [f"rig-{i:02d}" for i in range(10)]


@pytest.mark.parametrize("extra_vars, expected", [
    # After the canary, 9 rigs: 1, then 25 % of 9 (2), then 100 % (the 6 left), as Ansible's
    # serial [1, "25%", "100%"] cuts them.
    ({}, [TEN[:1], TEN[1:2], TEN[2:4], TEN[4:]]),
    ({"vdf_rollout_batches": 2}, [TEN[:1]] + [TEN[i:i + 2] for i in range(1, 10, 2)]),
    ({"vdf_rollout_batches": "50%"}, [TEN[:1], TEN[1:5], TEN[5:9], TEN[9:]]),
    ({"vdf_rollout_batches": [3, 0]}, [TEN[:1], TEN[1:4], TEN[4:]]),  # 0: all the rest
    ({"vdf_rollout_batches": ["10%"]}, [TEN[:1]] + [[r] for r in TEN[1:]]),  # never below 1
    ({"vdf_rollout_canary": 3, "vdf_rollout_batches": ["100%"]}, [TEN[:3], TEN[3:]]),
    ({"vdf_rollout_canary": 12}, [TEN]),  # more canaries than rigs: all are canaries
    # A maintenance run reboots its rigs: one at a time after the canary, unless told otherwise.
    ({"vdf_rollout_action": "maintenance"}, [[r] for r in TEN]),
    ({"vdf_rollout_action": "maintenance", "vdf_rollout_batches": 3},
     [TEN[:1], TEN[1:4], TEN[4:7], TEN[7:]]),
])
def test_batches_are_cut_as_serial_cuts_them(tmp_path, extra_vars, expected):
    assert batches_of(tmp_path, TEN, extra_vars, TEN) == expected


def test_only_staged_rigs_are_batched_in_inventory_order(tmp_path):
    staged = ["rig-05", "rig-01", "rig-03"]  # as group_by results come back: any order
    assert batches_of(tmp_path, staged, {"vdf_rollout_batches": ["100%"]}, TEN) == [
        ["rig-01"], ["rig-03", "rig-05"]]
    assert batches_of(tmp_path, [], {}, TEN) == []


# --- the canary's gates in the role's health check ----------------------------------------------


def _tasks_named(tasks, name):
    """Tasks named `name` in a task list, looking into blocks and rescues."""
    found = []
    for task in tasks or []:
        if task.get("name") == name:
            found.append(task)
        for key in ("block", "rescue", "always"):
            found += _tasks_named(task.get(key), name)
    return found


def health_include(task_file, name):
    tasks = yaml.safe_load((ROOT / "roles/vllm_dual_fast/tasks" / task_file).read_text())
    found = _tasks_named(tasks, name)
    assert len(found) == 1, name
    return found[0]


def gates_on(tmp_path, **facts):
    """Whether deploy.yml's health check of the release is gated, with these facts."""
    report = tmp_path / "gates.json"
    include = health_include("deploy.yml", "Check the release's health")
    plays = [{
        "name": "Health input under test", "hosts": "localhost", "gather_facts": False,
        "tasks": [{"name": "Write the gates", "vars": include["vars"],
                   "ansible.builtin.copy": {
                       "content": "{{ _vllm_dual_fast_health.gates | bool | to_json }}",
                       "dest": str(report), "mode": "0644"}}],
    }]
    result, out = run_playbook(tmp_path, plays, {"_vllm_dual_fast_release": "/r/b",
                                                 "_vllm_dual_fast_manifest": {},
                                                 "_vllm_dual_fast_baseline_report": {}, **facts})
    assert result.returncode == 0, out
    return json.loads(report.read_text())


def switch(is_new):
    return {"is_new": is_new, "last_good": "/r/a", "current": "/r/a"}


def test_gates_run_on_a_new_release_of_the_canary_only(tmp_path):
    assert gates_on(tmp_path, vllm_dual_fast_canary=True, _vllm_dual_fast_switch=switch(True))
    assert not gates_on(tmp_path, vllm_dual_fast_canary=False,
                        _vllm_dual_fast_switch=switch(True))


def test_an_unchanged_release_on_the_canary_is_not_gated(tmp_path):
    # A release that already passed here has nothing better to go back to; a noisy speed
    # figure must not fail it.
    assert not gates_on(tmp_path, vllm_dual_fast_canary=True, _vllm_dual_fast_switch=switch(False))


@pytest.mark.parametrize(("task_file", "name"), [
    ("rollback_restore.yml", "Check the last good release is healthy again"),
    ("rollback_recheck.yml", "Check the last good release once more"),
    ("verify.yml", "Check the serving release's health"),
])
def test_a_rollback_a_second_check_and_verify_are_not_gated(task_file, name):
    assert health_include(task_file, name)["vars"]["_vllm_dual_fast_health"]["gates"] is False


def test_a_rollout_without_a_canary_is_refused_before_anything_runs(tmp_path):
    tasks = [t for t in rollout_play("answer")["tasks"] if "without a canary" in t["name"]]
    assert len(tasks) == 1, [t["name"] for t in rollout_play("answer")["tasks"]]
    play = [{"name": "Canary check", "hosts": "localhost", "gather_facts": False, "tasks": tasks}]
    refused, out = run_playbook(tmp_path, play, {"vdf_rollout_canary": 0})
    assert refused.returncode != 0 and "vdf_rollout_canary is 0" in out, out
    accepted, out = run_playbook(tmp_path, play, {"vdf_rollout_canary": 1})
    assert accepted.returncode == 0, out
    by_default, out = run_playbook(tmp_path, play)  # no variable: one canary
    assert by_default.returncode == 0, out
