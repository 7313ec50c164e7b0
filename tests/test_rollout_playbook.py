"""playbooks/rollout.yml's grouping of staged rigs and its canary and batch plays, run by
ansible-playbook over local stand-in hosts: the task and the plays' host patterns are taken from
the playbook unchanged. The canary must be the first staged rig in inventory order, and a rig
whose staging failed must be in no batch. (The group_by this replaced ordered rigs as their
results came back from the forks: the fleet scenario once got rig 2 as its canary. That order
cannot be forced here, so these tests pin the order the playbook promises instead.)"""

import json
from pathlib import Path

import yaml
from ansible_runner import run_playbook

ROOT = Path(__file__).parents[1]
ROLLOUT = yaml.safe_load((ROOT / "playbooks/rollout.yml").read_text())
RIGS = ["rig-1", "rig-2", "rig-3", "rig-4"]


def rollout_play(name_part):
    plays = [p for p in ROLLOUT if name_part in p["name"]]
    assert len(plays) == 1, [p["name"] for p in ROLLOUT]
    return plays[0]


def grouping_task():
    tasks = [t for t in rollout_play("Stage")["tasks"] if "Group the staged rigs" in t["name"]]
    assert len(tasks) == 1, [t["name"] for t in rollout_play("Stage")["tasks"]]
    return tasks[0]


def batch_recorder(log):
    """A task that appends its play's batch to `log`, once per batch (serial plays run
    run_once tasks once per batch), so the lines come in the order the batches ran."""
    return {
        "name": "Record the batch",
        "ansible.builtin.lineinfile": {
            "path": str(log),
            "line": "{{ ansible_play_batch | join(',') }}",
            "create": True,
            "mode": "0644",
        },
        "run_once": True,
    }


def run(tmp_path, staged, extra_vars=None):
    """The rigs in `staged` stage, the others fail staging; returns the canary play's batch and
    the batches of the rest, each a comma-joined line."""
    inventory = {"rig3090": {"hosts": {rig: {"ansible_connection": "local"} for rig in RIGS}}}
    canary, batches = rollout_play("canary"), rollout_play("batches")
    canary_log, batches_log = tmp_path / "canary.log", tmp_path / "batches.log"
    plays = [
        {
            "name": "Stage",
            "hosts": "rig3090",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Staged",
                    "ansible.builtin.set_fact": {"_vdf_staged": True},
                    "when": "inventory_hostname in " + json.dumps(staged),
                },
                grouping_task(),
            ],
        },
        {
            "name": "Canary",
            "hosts": canary["hosts"],
            "gather_facts": False,
            "tasks": [batch_recorder(canary_log)],
        },
        {
            "name": "Batches",
            "hosts": batches["hosts"],
            "gather_facts": False,
            "serial": batches["serial"],
            "tasks": [batch_recorder(batches_log)],
        },
    ]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    result, out = run_playbook(
        tmp_path,
        plays,
        extra_vars,
        args=("-f", "4"),
        inventory=("-i", str(tmp_path / "inventory.yml")),
    )
    assert result.returncode == 0, out
    return [
        log.read_text().splitlines() if log.exists() else [] for log in (canary_log, batches_log)
    ]


def test_the_canary_is_the_first_staged_rig_in_inventory_order(tmp_path):
    canary, batches = run(tmp_path, ["rig-1", "rig-3", "rig-4"])
    assert canary == ["rig-1"]
    assert batches == ["rig-3", "rig-4"]  # default batches [1, "25%", "100%"]; rig-2 never staged


def test_two_canaries_then_the_rest_in_one_batch(tmp_path):
    canary, batches = run(
        tmp_path,
        ["rig-2", "rig-3", "rig-4"],
        {"vdf_rollout_canary": 2, "vdf_rollout_batches": ["100%"]},
    )
    assert canary == ["rig-2,rig-3"]
    assert batches == ["rig-4"]


# --- the canary's gates in the role's health check ----------------------------------------------


def serving_facts_task():
    health = yaml.safe_load((ROOT / "roles/vllm_dual_fast/tasks/health.yml").read_text())
    tasks = [t for t in health if t["name"] == "Know how the serving release was deployed"]
    assert len(tasks) == 1, [t["name"] for t in health]
    return tasks[0]


def gates_on(tmp_path, **facts):
    report = tmp_path / "gates.json"
    plays = [
        {
            "name": "Health facts under test",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                serving_facts_task(),
                {
                    "name": "Write the gates",
                    "ansible.builtin.copy": {
                        "content": "{{ _vllm_dual_fast_serving.gates | bool | to_json }}",
                        "dest": str(report),
                        "mode": "0644",
                    },
                },
            ],
        }
    ]
    result, out = run_playbook(
        tmp_path,
        plays,
        {"vllm_dual_fast_image": "img", "vllm_dual_fast_patch_enabled": True, **facts},
    )
    assert result.returncode == 0, out
    return json.loads(report.read_text())


def test_gates_run_on_a_new_release_of_the_canary_only(tmp_path):
    assert (
        gates_on(tmp_path, vllm_dual_fast_canary=True, _vllm_dual_fast_release_is_new=True) is True
    )
    assert (
        gates_on(tmp_path, vllm_dual_fast_canary=False, _vllm_dual_fast_release_is_new=True)
        is False
    )


def test_an_unchanged_release_on_the_canary_is_not_gated(tmp_path):
    # A failed gate on the release that already serves has nothing to go back to: rollback.yml
    # would stop the container and leave the rig serving nothing over a noisy speed figure.
    assert (
        gates_on(tmp_path, vllm_dual_fast_canary=True, _vllm_dual_fast_release_is_new=False)
        is False
    )
    assert gates_on(tmp_path, vllm_dual_fast_canary=True) is False  # verify stage: no switch at all


def test_a_rollback_is_not_gated(tmp_path):
    assert (
        gates_on(
            tmp_path,
            vllm_dual_fast_canary=True,
            _vllm_dual_fast_release_is_new=True,
            _vllm_dual_fast_rollback_image="old",
        )
        is False
    )


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
