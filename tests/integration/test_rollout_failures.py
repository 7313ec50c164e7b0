"""How playbooks/rollout.yml records rigs that fail or stop answering, run by ansible-playbook over
local stand-in rigs with the playbook's plays and task files unchanged (rollout_stand_ins.py):

- a rig that answers SSH but cannot run a module (its ping fails, it is not unreachable) is
  recorded with a reason and shows in the fleet report, and the other rigs go on;
- a rig whose switch fails before anything changes (here: a variable that fails the real role's
  argument_specs validation) is recorded `failed` with the real failure as its reason, and the
  failure stops the rollout;
- a rig that stops answering (its link drops in the middle of the role) during staging is
  `unreachable`, during its own switch `lost`, written by the controller since the rig cannot;
  a lost rig stops the rollout as a failed one does, and every rig keeps its row in the fleet
  report, also when the lost rig was alone in its batch (Ansible would end the playbook there).
"""

import re
import subprocess

from ansible_runner import run_playbook
from rollout_stand_ins import (
    fleet_rows,
    recorded_states,
    rollout_play,
    run_rollout,
    write_playbook,
)

LOST = "lost during the switch: may serve either release"
RIGS = ["rig-1", "rig-2", "rig-3"]


# --- play 1: a rig that answers but cannot run a module ------------------------------------------


def test_a_rig_whose_ping_fails_is_recorded_and_the_other_rigs_go_on(tmp_path):
    # rig-2's sudo cannot run, as on a rig where it wants a password: the ping FAILS, it is not
    # unreachable. (A bad ansible_python_interpreter in the inventory would not do here: the
    # runner's `-e ansible_python_interpreter` overrides it.) rig-4 is really unreachable.
    run = run_rollout(
        tmp_path,
        {
            "rig-1": {},
            "rig-2": {"ansible_become_user": "nobody", "ansible_become_exe": "/nonexistent/sudo"},
            "rig-3": {},
            "rig-4": {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 1},
        },
    )
    assert run.result.returncode == 0, run.out
    # The stand-in really fails rather than being unreachable (else this tests nothing new).
    assert re.search(r"^rig-2\s*:.*\bunreachable=0\b", run.out, re.M), run.out

    assert run.stages == {"rig-1": ["staging", "switch"], "rig-3": ["staging", "switch"]}
    states = run.states
    assert states["rig-2"]["state"] == "unreachable"
    assert "cannot run modules" in states["rig-2"]["reason"], states["rig-2"]
    assert "/nonexistent/sudo" in states["rig-2"]["reason"], states["rig-2"]
    assert states["rig-4"]["state"] == "unreachable" and states["rig-4"]["reason"].strip()
    assert "cannot run modules" not in states["rig-4"]["reason"]
    assert run.fleet_states() == {
        "rig-1": "updated",
        "rig-2": "unreachable",
        "rig-3": "updated",
        "rig-4": "unreachable",
    }


# --- rollout_switch.yml with the real role: a switch that fails before it switches ---------------


def switch_plays(tmp_path):
    """One rig (localhost) through rollout_switch.yml as the switch play includes it, then a task
    that notes the play went on after the switch."""
    return [
        {
            "name": "Switch one rig",
            "hosts": "localhost",
            "gather_facts": False,
            "vars": rollout_play("Switch the canary")["vars"],
            "tasks": [
                {
                    "name": "Start the state folder",
                    "ansible.builtin.include_tasks": "tasks/rollout_start.yml",
                },
                {
                    "name": "Switch",
                    "ansible.builtin.include_tasks": "tasks/rollout_switch.yml",
                    "vars": {"vllm_dual_fast_canary": False},
                },
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


# --- the whole rollout over stand-in rigs ---------------------------------------------------------


def test_a_rolled_back_canary_keeps_the_roles_state_and_reason_and_stops_the_rollout(tmp_path):
    run = run_rollout(
        tmp_path,
        RIGS,
        {
            "vdf_test_outcome": {
                "rig-1": {"state": "rolled-back", "reason": "smoke: 0 tokens", "release": "r1"}
            }
        },
    )
    assert run.result.returncode != 0, run.out
    assert run.stages == {"rig-1": ["staging", "switch"], "rig-2": ["staging"],
                          "rig-3": ["staging"]}
    state = run.states["rig-1"]
    assert (state["state"], state["reason"], state["release"]) == (
        "rolled-back", "smoke: 0 tokens", "r1")
    assert run.fleet_states() == {"rig-1": "rolled-back", "rig-2": "not-reached",
                                  "rig-3": "not-reached"}
    assert "The rollout stopped: the canary (rig-1): rig-1 rolled-back" in run.out, run.out[-3000:]
    # The fleet report says first how the rollout ended, and what it rolled out.
    assert run.fleet["outcome"].startswith("Stopped at the canary rig-1 (rolled-back: smoke: 0")
    assert run.fleet["rollout"]["canary"] == ["rig-1"] and run.fleet["rollout"]["ended_at"]


def test_a_rollout_that_succeeds_records_each_rig_once_per_step_and_exits_0(tmp_path):
    run = run_rollout(tmp_path, RIGS)
    assert run.result.returncode == 0, run.out
    for rig in RIGS:
        state = run.states[rig]
        assert (state["state"], state["reason"], state["release"]) == ("updated", "", "r2")
        assert [h["state"] for h in state["history"]] == ["not-reached", "updated"]
    assert run.fleet_states() == dict.fromkeys(RIGS, "updated")
    assert run.fleet["footer"]["states"] == {"updated": 3}
    assert run.fleet["outcome"] == "Every reachable rig updated (3 updated)."
    assert run.fleet["rollout"]["batches"] == [["rig-1"], ["rig-2"], ["rig-3"]]
    assert run.fleet["rollout"]["started_at"] <= run.fleet["rollout"]["ended_at"]


def test_a_failed_switch_stops_the_batches(tmp_path):
    # Canary rig-1, then rig-2 (fails before its switch), then rig-3: never switched.
    run = run_rollout(tmp_path, RIGS, {"vdf_test_fail": {"rig-2": "switch"}})
    assert run.result.returncode != 0, run.out
    assert run.stages["rig-3"] == ["staging"], run.stages
    assert (run.states["rig-2"]["state"], run.states["rig-2"]["reason"]) == (
        "failed", "preflight: no GPUs")
    assert run.fleet_states() == {"rig-1": "updated", "rig-2": "failed", "rig-3": "not-reached"}


def test_max_fail_percentage_lets_a_batch_lose_its_share_and_go_on(tmp_path):
    # 1 of the batch of 2 is 50 %, not more than 50 %: the next batch starts. A lost rig counts
    # as a failed one would.
    rigs = ["rig-1", "rig-2", "rig-3", "rig-4"]
    run = run_rollout(
        tmp_path,
        rigs,
        {
            "vdf_test_lose": {"rig-3": "switch"},
            "vdf_rollout_batches": [2],
            "vdf_rollout_max_fail_percentage": 50,
        },
    )
    assert run.stages["rig-4"] == ["staging", "switch"], run.stages
    assert run.fleet_states() == {"rig-1": "updated", "rig-2": "updated", "rig-3": "lost",
                                  "rig-4": "updated"}
    assert "The rollout stopped" not in run.out


# --- rigs that stop answering ---------------------------------------------------------------------


def test_a_rig_lost_alone_in_the_last_batch_is_lost_and_still_has_its_row(tmp_path):
    # Default batches [1, "25%", "100%"] after the canary rig-1: rig-2, then rig-3 alone, last.
    run = run_rollout(tmp_path, RIGS, {"vdf_test_lose": {"rig-3": "switch"}})
    assert run.result.returncode != 0, run.out
    assert run.stages == {r: ["staging", "switch"] for r in RIGS}, run.stages
    states = run.states
    assert states["rig-3"]["state"] == "lost", states["rig-3"]
    assert states["rig-3"]["reason"] == LOST
    assert [h["state"] for h in states["rig-3"]["history"]] == ["not-reached", "lost"]
    assert (states["rig-1"]["state"], states["rig-2"]["state"]) == ("updated", "updated")
    # The report written after the loss, by the controller: every rig, the lost one `lost`.
    assert run.fleet_states() == {"rig-1": "updated", "rig-2": "updated", "rig-3": "lost"}
    assert run.fleet["footer"]["states"] == {"updated": 2, "lost": 1}
    assert "The rollout stopped: batch 2 (rig-3): rig-3 lost" in run.out, run.out[-3000:]


def test_a_rig_lost_in_a_batch_of_two_stops_the_rollout(tmp_path):
    # Canary rig-1, then [rig-2, rig-3], then rig-4: rig-3 drops mid-switch, rig-2 finishes.
    rigs = ["rig-1", "rig-2", "rig-3", "rig-4"]
    run = run_rollout(
        tmp_path, rigs, {"vdf_test_lose": {"rig-3": "switch"}, "vdf_rollout_batches": [2, 1]}
    )
    assert run.result.returncode != 0, run.out
    assert run.stages["rig-4"] == ["staging"], run.stages  # no later batch started
    assert run.switched["rig-2"]["batch"] == run.switched["rig-3"]["batch"] == ["rig-2", "rig-3"]
    states = run.states
    assert (states["rig-2"]["state"], states["rig-3"]["state"]) == ("updated", "lost"), states
    assert states["rig-3"]["reason"] == LOST
    assert states["rig-4"]["state"] == "not-reached"
    assert run.fleet_states() == {
        "rig-1": "updated",
        "rig-2": "updated",
        "rig-3": "lost",
        "rig-4": "not-reached",
    }


def test_a_lost_canary_stops_the_rollout_and_every_rig_keeps_its_row(tmp_path):
    run = run_rollout(tmp_path, RIGS, {"vdf_test_lose": {"rig-1": "switch"}})
    assert run.result.returncode != 0, run.out
    assert run.stages == {"rig-1": ["staging", "switch"], "rig-2": ["staging"],
                          "rig-3": ["staging"]}
    assert (run.states["rig-1"]["state"], run.states["rig-1"]["reason"]) == ("lost", LOST)
    assert run.fleet_states() == {"rig-1": "lost", "rig-2": "not-reached",
                                  "rig-3": "not-reached"}


def test_a_rig_lost_during_staging_is_unreachable_and_the_others_roll_on(tmp_path):
    run = run_rollout(tmp_path, RIGS, {"vdf_test_lose": {"rig-2": "staging"}})
    assert run.stages == {"rig-1": ["staging", "switch"], "rig-2": ["staging"],
                          "rig-3": ["staging", "switch"]}, run.stages
    states = run.states
    assert "rig-2" in states, f"no state recorded for the rig lost in staging: {sorted(states)}"
    assert states["rig-2"]["state"] == "unreachable"
    assert "staging" in states["rig-2"]["reason"], states["rig-2"]
    assert run.fleet_states() == {"rig-1": "updated", "rig-2": "unreachable", "rig-3": "updated"}
    # Ansible still says a host was unreachable (exit 4), and nothing failed.
    assert run.result.returncode == 4, run.out


def test_the_only_rig_lost_during_staging_still_has_its_row(tmp_path):
    run = run_rollout(tmp_path, ["rig-1"], {"vdf_test_lose": {"rig-1": "staging"}})
    assert run.result.returncode != 0, run.out
    assert run.stages == {"rig-1": ["staging"]}
    assert run.states.get("rig-1", {}).get("state") == "unreachable", run.states
    assert run.fleet_states() == {"rig-1": "unreachable"}


def test_a_staging_failure_is_recorded_and_the_rig_is_in_no_batch(tmp_path):
    run = run_rollout(tmp_path, RIGS, {"vdf_test_fail": {"rig-1": "staging"}})
    assert run.result.returncode == 0, run.out
    assert run.stages["rig-1"] == ["staging"]
    assert (run.states["rig-1"]["state"], run.states["rig-1"]["reason"]) == (
        "staging-failed", "download failed")
    assert run.switched["rig-2"]["canary"] is True  # the first staged rig is the canary
    assert run.fleet_states() == {"rig-1": "staging-failed", "rig-2": "updated",
                                  "rig-3": "updated"}


# --- --limit --------------------------------------------------------------------------------------


def test_a_limit_that_leaves_out_the_controller_is_refused_before_staging(tmp_path):
    # Without the controller no one records a rig that stops answering, and the rollout would
    # not stop for it: refused, with the fix in the message.
    run = run_rollout(tmp_path, RIGS, args=("-l", "rig-1,rig-2"))
    assert run.result.returncode != 0, run.out
    assert run.stages == {}, run.stages
    assert "-l 'rig-1,rig-2,vdf-rollout-controller'" in run.out, run.out[-3000:]


def test_a_limit_that_names_the_controller_rolls_out_to_the_rigs_it_names(tmp_path):
    run = run_rollout(tmp_path, RIGS, args=("-l", "rig-1,rig-3,vdf-rollout-controller"))
    assert run.result.returncode == 0, run.out
    assert run.stages == {"rig-1": ["staging", "switch"], "rig-3": ["staging", "switch"]}
    assert run.fleet_states() == {"rig-1": "updated", "rig-3": "updated"}
    assert fleet_rows(tmp_path)["rig-3"]["release"] == "r2"


def test_the_fleet_report_names_the_controllers_commit_and_its_changes(tmp_path):
    # The controller's checkout is the folder above playbooks/: a real git repository here.
    def git(*argv):
        return subprocess.run(["git", "-C", str(tmp_path), *argv], capture_output=True,
                              text=True, check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "group_vars.yml").write_text("a: 1\n")
    git("add", "group_vars.yml")
    git("-c", "user.name=owner", "-c", "user.email=owner@example.org", "commit", "-q", "-m", "r1")
    head = git("rev-parse", "HEAD")
    (tmp_path / "group_vars.yml").write_text("a: 2\n")        # a change the commit does not hold
    run = run_rollout(tmp_path, ["rig-1"])
    assert run.result.returncode == 0, run.out
    assert run.fleet["rollout"]["controller_commit"] == head
    assert run.fleet["rollout"]["controller_dirty"] is True
