"""How playbooks/rollout.yml records rigs that fail, run by ansible-playbook over local stand-in
hosts with the playbook's plays and task files unchanged:

- a rig that answers SSH but cannot run a module (its ping fails, it is not unreachable) is
  recorded with a reason and shows in the fleet report, and the other rigs go on;
- a rig whose switch fails before anything changes (here: a variable that fails the role's
  argument_specs validation) is recorded `failed` with the real failure as its reason, and the
  failure still stops the play so that max_fail_percentage can stop the rollout.

The test playbook is written to <tmp>/playbooks/ beside links to the project's task files and
files/, so that the playbook's `playbook_dir`-relative paths (state folder, reports,
fleet_report.py) land in the temporary folder."""

import json
import re
from pathlib import Path

import yaml
from ansible_runner import run_playbook

ROOT = Path(__file__).parents[1]
ROLLOUT = yaml.safe_load((ROOT / "playbooks/rollout.yml").read_text())


def rollout_play(name_part):
    plays = [p for p in ROLLOUT if name_part in p["name"]]
    assert len(plays) == 1, [p["name"] for p in ROLLOUT]
    return plays[0]


def write_playbook(tmp_path, plays, roles=None):
    """<tmp>/playbooks/test.yml with the project's task files and files/ beside it, and, when
    `roles` is given ({name: tasks}), stand-in roles in <tmp>/playbooks/roles (searched before
    the roles path)."""
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "tasks").symlink_to(ROOT / "playbooks/tasks")
    (tmp_path / "files").symlink_to(ROOT / "files")
    for name, tasks in (roles or {}).items():
        role_tasks = playbooks / "roles" / name / "tasks"
        role_tasks.mkdir(parents=True)
        (role_tasks / "main.yml").write_text(yaml.safe_dump(tasks, sort_keys=False))
    playbook = playbooks / "test.yml"
    playbook.write_text(yaml.safe_dump(plays, sort_keys=False))
    return playbook


def recorded_states(tmp_path):
    folder = tmp_path / "reports/rollout-state"
    return {p.stem: json.loads(p.read_text()) for p in folder.glob("*.json")}


def fleet_rows(tmp_path):
    reports = sorted((tmp_path / "reports").glob("fleet-*.json"))
    assert reports, "no fleet report written"
    return {row["host"]: row for row in json.loads(reports[-1].read_text())["rows"]}


def reached_by(log, hosts):
    """A play over `hosts` that appends each rig reaching it to `log`."""
    return {
        "name": "Later play",
        "hosts": hosts,
        "gather_facts": False,
        "tasks": [
            {
                "name": "Note the rig reached this play",
                "ansible.builtin.lineinfile": {
                    "path": str(log),
                    "line": "{{ inventory_hostname }}",
                    "create": True,
                    "mode": "0644",
                },
                "delegate_to": "localhost",
                "throttle": 1,
            }
        ],
    }


# --- play 1: a rig that answers but cannot run a module ------------------------------------------


def test_a_rig_whose_ping_fails_is_recorded_and_the_other_rigs_go_on(tmp_path):
    # rig-2's sudo cannot run, as on a rig where it wants a password: the ping FAILS, it is not
    # unreachable. (A bad ansible_python_interpreter in the inventory would not do here: the
    # runner's `-e ansible_python_interpreter` overrides it.) rig-4 is really unreachable.
    inventory = {
        "rig3090": {
            "hosts": {
                "rig-1": {"ansible_connection": "local"},
                "rig-2": {
                    "ansible_connection": "local",
                    "ansible_become_user": "nobody",
                    "ansible_become_exe": "/nonexistent/sudo",
                },
                "rig-3": {"ansible_connection": "local"},
                "rig-4": {"ansible_host": "127.0.0.1", "ansible_port": 1},
            }
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    log = tmp_path / "reached.log"
    plays = [
        rollout_play("answer"),
        reached_by(log, rollout_play("Stage")["hosts"]),
        rollout_play("Print the fleet report"),
    ]
    result, out = run_playbook(
        tmp_path,
        write_playbook(tmp_path, plays),
        args=("-f", "4"),
        inventory=("-i", str(tmp_path / "inventory.yml")),
    )
    assert result.returncode == 0, out
    # The stand-in really fails rather than being unreachable (else this tests nothing new).
    assert re.search(r"^rig-2\s*:.*\bunreachable=0\b", out, re.M), out

    assert sorted(log.read_text().splitlines()) == ["rig-1", "rig-3"]
    states = recorded_states(tmp_path)
    assert sorted(states) == ["rig-2", "rig-4"], states
    assert states["rig-2"]["state"] == "unreachable"
    assert "cannot run modules" in states["rig-2"]["reason"], states["rig-2"]
    assert "/nonexistent/sudo" in states["rig-2"]["reason"], states["rig-2"]
    assert states["rig-4"]["state"] == "unreachable" and states["rig-4"]["reason"].strip()
    assert "cannot run modules" not in states["rig-4"]["reason"]
    rows = fleet_rows(tmp_path)
    assert rows["rig-2"]["state"] == "unreachable" and rows["rig-2"]["reason"], rows


# --- rollout_switch.yml: a switch that fails ------------------------------------------------------


def switch_plays(tmp_path):
    """One rig (localhost) through rollout_switch.yml as the canary and batch plays include it,
    then a task that notes the play went on after the switch."""
    return [
        {
            "name": "Switch one rig",
            "hosts": "localhost",
            # As the canary and batch plays do: the role's defaults are templated from facts.
            "gather_facts": rollout_play("batches").get("gather_facts", True),
            "vars": rollout_play("canary")["vars"],
            "tasks": [
                {
                    "name": "Start the state folder",
                    "ansible.builtin.include_tasks": "tasks/rollout_start.yml",
                },
                *rollout_play("batches")["tasks"],
                {
                    "name": "Note the play went on",
                    "ansible.builtin.file": {
                        "path": str(tmp_path / "went-on"),
                        "state": "touch",
                        "mode": "0644",
                    },
                },
            ],
        }
    ]


def test_a_switch_that_fails_before_the_switch_is_recorded_with_its_reason(tmp_path):
    # The real role, with a variable that fails its argument_specs validation: nothing changes.
    result, out = run_playbook(
        tmp_path,
        write_playbook(tmp_path, switch_plays(tmp_path)),
        {"vllm_dual_fast_min_gpus": "two"},
    )
    assert result.returncode != 0, out
    assert not (tmp_path / "went-on").exists(), "the play went on after a failed switch"
    state = recorded_states(tmp_path)["localhost"]
    assert state["state"] == "failed", state
    assert "vllm_dual_fast_min_gpus" in state["reason"], state
    assert fleet_rows(tmp_path)["localhost"]["state"] == "failed"


def outcome(state, reason):
    return {
        "name": "Stand-in outcome",
        "ansible.builtin.set_fact": {
            "vllm_dual_fast_outcome": {
                "state": state,
                "reason": reason,
                "release": "r2" if state == "updated" else "r1",
                "previous_release": "r1",
            }
        },
    }


def test_a_rolled_back_switch_keeps_the_roles_state_and_reason_and_still_fails(tmp_path):
    stand_in = [
        outcome("rolled-back", "smoke test failed: 0 tokens"),
        {"name": "Stand-in fails", "ansible.builtin.fail": {"msg": "Release r2 failed"}},
    ]
    result, out = run_playbook(
        tmp_path, write_playbook(tmp_path, switch_plays(tmp_path), {"vllm_dual_fast": stand_in})
    )
    assert result.returncode != 0, out
    assert "Stand-in outcome" in out, "the stand-in role was not the one included"
    assert not (tmp_path / "went-on").exists()
    state = recorded_states(tmp_path)["localhost"]
    assert (state["state"], state["reason"]) == ("rolled-back", "smoke test failed: 0 tokens")
    assert state["release"] == "r1"


def test_a_switch_that_succeeds_is_recorded_once_and_the_play_goes_on(tmp_path):
    stand_in = [outcome("updated", "")]
    result, out = run_playbook(
        tmp_path, write_playbook(tmp_path, switch_plays(tmp_path), {"vllm_dual_fast": stand_in})
    )
    assert result.returncode == 0, out
    assert (tmp_path / "went-on").exists()
    state = recorded_states(tmp_path)["localhost"]
    assert (state["state"], state["reason"], state["release"]) == ("updated", "", "r2")
    assert [h["state"] for h in state["history"]] == ["updated"]
    assert fleet_rows(tmp_path)["localhost"]["state"] == "updated"


def test_a_failed_switch_still_stops_the_batches(tmp_path):
    # The batches play unchanged (serial [1, "25%", "100%"], max_fail_percentage 0) over three
    # staged stand-ins; rig-1 is the canary, so rig-2 is the first batch and fails.
    stand_in = [
        {
            "name": "Stand-in fails before the switch on rig-2",
            "ansible.builtin.fail": {"msg": "preflight: no GPUs"},
            "when": "inventory_hostname == 'rig-2'",
        },
        outcome("updated", ""),
    ]
    inventory = {
        "vdf_staged": {
            "hosts": {rig: {"ansible_connection": "local"} for rig in ("rig-1", "rig-2", "rig-3")}
        }
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    start = {
        "name": "Start the state folder",
        "hosts": "localhost",
        "gather_facts": False,
        "vars": rollout_play("batches")["vars"],
        "tasks": [{"name": "Start", "ansible.builtin.include_tasks": "tasks/rollout_start.yml"}],
    }
    result, out = run_playbook(
        tmp_path,
        write_playbook(tmp_path, [start, rollout_play("batches")], {"vllm_dual_fast": stand_in}),
        inventory=("-i", str(tmp_path / "inventory.yml")),
    )
    assert result.returncode != 0, out
    states = recorded_states(tmp_path)
    assert sorted(states) == ["rig-2"], states  # rig-3 was never switched
    assert (states["rig-2"]["state"], states["rig-2"]["reason"]) == ("failed", "preflight: no GPUs")
