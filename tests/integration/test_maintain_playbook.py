"""playbooks/maintain.yml: kernel and driver updates through the rollout's plays (rollout.yml with
vdf_rollout_action=maintenance), run by ansible-playbook over local stand-in rigs
(rollout_stand_ins.py) with the playbooks and task files unchanged:

- every rig that answers runs the role's preflight only (nothing to stage), then a canary alone
  runs the maintain stage, then the rest one rig at a time (the default for maintenance);
- each rig's row says what its maintenance did (`maintained`, `unchanged`) and the release it
  serves, and the fleet report says the fleet was maintained, not what was rolled out;
- a rig whose maintenance fails stops the run there: the rigs after it are not reached;
- an action the rollout does not know is refused before any rig is touched.
"""

from rollout_stand_ins import run_rollout

RIGS = ["rig-1", "rig-2", "rig-3"]


def test_a_maintenance_run_goes_canary_first_then_rig_by_rig_and_reports_each(tmp_path):
    run = run_rollout(tmp_path, RIGS, {"vdf_test_maintenance": {"rig-2": {"state": "unchanged"}}},
                      entry="maintain.yml")
    assert run.result.returncode == 0, run.out
    for rig in RIGS:
        assert run.role_stages[rig] == [["preflight"], ["preflight", "maintain"]], run.role_stages
    assert {rig: line["canary"] for rig, line in run.switched.items()} == {
        "rig-1": True, "rig-2": False, "rig-3": False}
    assert run.fleet["rollout"]["action"] == "maintenance"
    assert run.fleet["rollout"]["batches"] == [["rig-1"], ["rig-2"], ["rig-3"]]
    assert {rig: (s["state"], s["release"]) for rig, s in run.states.items()} == {
        "rig-1": ("maintained", "r1"), "rig-2": ("unchanged", "r1"), "rig-3": ("maintained", "r1")}
    assert run.fleet_states() == {"rig-1": "maintained", "rig-2": "unchanged",
                                  "rig-3": "maintained"}
    assert run.fleet["outcome"] == "Every reachable rig maintained (2 maintained; 1 unchanged)."


def test_a_failed_maintenance_on_the_canary_stops_the_run(tmp_path):
    why = "kernel 6.8.0-51-generic: the GPUs did not answer; back on 6.8.0-50-generic"
    run = run_rollout(
        tmp_path, RIGS,
        {"vdf_test_maintenance": {"rig-1": {"state": "maintenance-failed", "reason": why}},
         "vdf_rollout_batches": ["100%"]},
        entry="maintain.yml")
    assert run.result.returncode != 0, run.out
    assert run.stages == {"rig-1": ["staging", "switch"], "rig-2": ["staging"],
                          "rig-3": ["staging"]}, run.stages
    assert (run.states["rig-1"]["state"], run.states["rig-1"]["reason"]) == (
        "maintenance-failed", why)
    assert run.fleet_states() == {"rig-1": "maintenance-failed", "rig-2": "not-reached",
                                  "rig-3": "not-reached"}
    assert run.fleet["outcome"].startswith(
        f"Stopped at the canary rig-1 (maintenance-failed: {why}")


def test_an_action_the_rollout_does_not_know_is_refused_before_any_rig_is_touched(tmp_path):
    run = run_rollout(tmp_path, RIGS, {"vdf_rollout_action": "upgrade"})
    assert run.result.returncode != 0, run.out
    assert "vdf_rollout_action is upgrade: it is release (the default) or maintenance." in run.out
    assert run.stages == {} and run.fleet is None


CANARY_SET = {"linux-generic": "6.8.0.51.52",
              "nvidia-utils-580-server": "580.105.08-0ubuntu0.24.04.1"}


def given_versions(run):
    return {rig: line["versions"] for rig, line in run.switched.items()}


def test_the_batches_after_the_canary_install_the_versions_it_installed(tmp_path):
    run = run_rollout(tmp_path, RIGS, {"vdf_test_maintenance": {
        "rig-1": {"versions": CANARY_SET}, "rig-2": {"versions": {"other": "1"}}}},
        entry="maintain.yml")
    assert run.result.returncode == 0, run.out
    # The canary plans its own candidates; every later rig is held to the canary's set.
    assert given_versions(run) == {"rig-1": None, "rig-2": CANARY_SET, "rig-3": CANARY_SET}


def test_a_canary_that_moved_nothing_proves_nothing_to_install(tmp_path):
    run = run_rollout(tmp_path, RIGS, {"vdf_test_maintenance": {
        "rig-1": {"state": "unchanged", "versions": {}}}}, entry="maintain.yml")
    assert run.result.returncode == 0, run.out
    assert given_versions(run) == {"rig-1": None, "rig-2": {}, "rig-3": {}}


def test_a_release_rollout_gives_no_maintenance_versions(tmp_path):
    run = run_rollout(tmp_path, RIGS)
    assert run.result.returncode == 0, run.out
    assert set(given_versions(run).values()) == {None}
