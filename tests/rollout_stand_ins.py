"""playbooks/rollout.yml run by ansible-playbook over local stand-in rigs, for the rollout tests.

The playbook, its task files and files/fleet_report.py are the project's, unchanged: they are
linked into <tmp>/playbooks/ (and <tmp>/files), so that the playbook's `playbook_dir`-relative
paths (state folder, reports) land in the temporary folder. The role is a stand-in (a test
double for a rig's GPUs, image and model) in <tmp>/playbooks/roles, searched before the roles
path. What each stand-in rig does is set per rig through extra variables:

- vdf_test_lose {rig: stage}: in that stage ('staging' or 'switch') the rig drops its link: the
  stand-in flips it to an SSH connection to a loopback port nobody listens on, so that its next
  task is UNREACHABLE, as for a rig whose link drops in the middle of the role;
- vdf_test_fail {rig: stage}: in that stage the role fails (staging: a failed download; switch:
  a failed preflight, before anything changes);
- vdf_test_outcome {rig: {state, reason}}: the outcome a switch sets (default updated, r1 -> r2),
  with a failure after it when the state is rolled-back;
- vdf_test_maintenance {rig: {state, reason, versions}}: the maintenance result a maintenance
  run's switch sets (default maintained, r1 serving), with a failure after it when
  maintenance-failed.
Each stage a rig runs is logged (rig, stage, canary flag, the batch it switched in, the
maintenance versions it was given)."""

import json
from pathlib import Path

import yaml
from ansible_runner import run_playbook

ROOT = Path(__file__).parents[1]
ROLLOUT = yaml.safe_load((ROOT / "playbooks/rollout.yml").read_text())
NOWHERE_PORT = 1  # loopback, nothing listens there


def rollout_play(name_part):
    plays = [p for p in ROLLOUT if name_part in p["name"]]
    assert len(plays) == 1, [p["name"] for p in ROLLOUT]
    return plays[0]


def write_playbook(tmp_path, plays, roles=None):
    """<tmp>/playbooks/test.yml with the project's task files and files/ beside it, and, when
    `roles` is given ({name: tasks}), stand-in roles in <tmp>/playbooks/roles."""
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "tasks").symlink_to(ROOT / "playbooks/tasks")
    (tmp_path / "files").symlink_to(ROOT / "files")
    (tmp_path / "roles").symlink_to(ROOT / "roles")      # the role's defaults, read by the rollout
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


def newest_fleet_report(tmp_path):
    reports = sorted((tmp_path / "reports").glob("fleet-*.json"))
    return json.loads(reports[-1].read_text()) if reports else None


def fleet_rows(tmp_path):
    fleet = newest_fleet_report(tmp_path)
    assert fleet, "no fleet report written"
    return {row["host"]: row for row in fleet["rows"]}


# A release's switch runs the deploy stage, a maintenance run's the maintain stage.
STAGE = ("('switch' if 'deploy' in vllm_dual_fast_stages or 'maintain' in vllm_dual_fast_stages "
         "else 'staging')")


def stand_in_rig_role(log):
    return [
        {
            "name": "Stand-in notes the stage it runs",
            "ansible.builtin.lineinfile": {
                "path": str(log),
                "line": "{{ {'rig': inventory_hostname, 'stage': " + STAGE + ", "
                "'stages': vllm_dual_fast_stages, "
                "'canary': vllm_dual_fast_canary | default(none), "
                "'versions': vllm_dual_fast_maintenance_versions | default(none), "
                "'batch': _vdf_batch | default(none)} | to_json }}",
                "create": True,
                "mode": "0644",
            },
            "delegate_to": "localhost",
            "become": False,
            "throttle": 1,
        },
        {
            "name": "Stand-in rig drops its link (SSH to a loopback port nobody listens on)",
            "ansible.builtin.set_fact": {
                "ansible_connection": "ssh",
                "ansible_host": "127.0.0.1",
                "ansible_port": NOWHERE_PORT,
            },
            "when": "(vdf_test_lose | default({})).get(inventory_hostname) == " + STAGE,
        },
        {"name": "Stand-in step on the rig", "ansible.builtin.ping": None},
        {
            "name": "Stand-in fails",
            "ansible.builtin.fail": {
                "msg": "{{ 'preflight: no GPUs' if " + STAGE + " == 'switch' "
                "else 'download failed' }}"
            },
            "when": "(vdf_test_fail | default({})).get(inventory_hostname) == " + STAGE,
        },
        {
            "name": "Stand-in switch outcome",
            "ansible.builtin.set_fact": {
                # The role's one builder (files/schemas/outcome.schema.json), not a hand-made dict.
                "vllm_dual_fast_outcome": "{{ ('updated' | vllm_dual_fast_outcome("
                "release='r2', previous_release='r1')) | combine("
                "(vdf_test_outcome | default({})).get(inventory_hostname, {})) }}"
            },
            "when": "'deploy' in vllm_dual_fast_stages",
        },
        {
            "name": "Stand-in maintenance result",
            "ansible.builtin.set_fact": {
                # The role's one builder (files/schemas/maintenance.schema.json).
                "vllm_dual_fast_maintenance": "{{ _vdf_test_mnt.state | default('maintained') "
                "| vllm_dual_fast_maintenance_result(reason=_vdf_test_mnt.reason | default(''), "
                "serving_release='r1', healthy=true, versions=_vdf_test_mnt.versions "
                "| default({})) }}"
            },
            "vars": {"_vdf_test_mnt": "{{ (vdf_test_maintenance | default({}))"
                                      ".get(inventory_hostname, {}) }}"},
            "when": "'maintain' in vllm_dual_fast_stages",
        },
        {
            "name": "Stand-in maintenance fails as the role's verdict does",
            "ansible.builtin.fail": {"msg": "{{ vllm_dual_fast_maintenance.reason }}"},
            "when": "'maintain' in vllm_dual_fast_stages and "
            "vllm_dual_fast_maintenance.state == 'maintenance-failed'",
        },
        {
            "name": "Stand-in fails after rolling back",
            "ansible.builtin.fail": {"msg": "Release r2 failed"},
            "when": "'deploy' in vllm_dual_fast_stages and "
            "vllm_dual_fast_outcome.state == 'rolled-back'",
        },
    ]


class Rollout:
    """One run of the rollout: result, out, stages {rig: [stage, ...]}, role_stages {rig: [the
    role's vllm_dual_fast_stages in each stage, ...]}, switched {rig: line},
    states {rig: state file}, fleet (the newest fleet report or None)."""

    def __init__(self, tmp_path, result, out):
        self.result, self.out = result, out
        log = tmp_path / "stages.log"
        lines = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        self.stages, self.role_stages = {}, {}
        for line in lines:
            self.stages.setdefault(line["rig"], []).append(line["stage"])
            self.role_stages.setdefault(line["rig"], []).append(line["stages"])
        self.switched = {x["rig"]: x for x in lines if x["stage"] == "switch"}
        self.states = recorded_states(tmp_path)
        self.fleet = newest_fleet_report(tmp_path)

    def fleet_states(self):
        assert self.fleet is not None, "no fleet report written"
        return {row["host"]: row["state"] for row in self.fleet["rows"]}


def run_rollout(tmp_path, rigs, extra_vars=None, args=(), entry="rollout.yml", monitoring=None):
    """playbooks/rollout.yml (or `entry`, e.g. maintain.yml) over stand-in rigs: `rigs` a list
    of names (local connection) or {name: host vars}, in group rig3090; `monitoring` {name: host
    vars} of group monitoring (local connection: its Alertmanager on this machine's loopback)."""
    if not isinstance(rigs, dict):
        rigs = {rig: {} for rig in rigs}
    hosts = {rig: {"ansible_connection": "local", **hostvars} for rig, hostvars in rigs.items()}
    inventory = {"rig3090": {"hosts": hosts}}
    if monitoring:
        inventory["monitoring"] = {"hosts": {name: {"ansible_connection": "local", **hostvars}
                                             for name, hostvars in monitoring.items()}}
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory))
    playbook = write_playbook(
        tmp_path, [], {"vllm_dual_fast": stand_in_rig_role(tmp_path / "stages.log")}
    )
    playbook.unlink()
    for name in {"rollout.yml", entry}:    # maintain.yml imports rollout.yml beside it
        (playbook.parent / name).symlink_to(ROOT / "playbooks" / name)
    result, out = run_playbook(
        tmp_path,
        playbook.parent / entry,
        extra_vars,
        env=connection_env(rigs, extra_vars),
        args=("-f", "10", *args),
        inventory=("-i", str(tmp_path / "inventory.yml")),
    )
    return Rollout(tmp_path, result, out)


def connection_env(rigs, extra_vars):
    """Mitogen's strategy (as owners are advised to run the rollout) for a rollout whose rigs
    all answer: half the CPU of stock Ansible's per run, the largest share of these tests' time.
    A rig that drops its link or whose own host vars break its connection or sudo is what stock
    Ansible's unreachable and failed handling is tested on: those runs stay stock."""
    stock = (extra_vars or {}).get("vdf_test_lose") or any(rigs.values())
    # su, not sudo: Mitogen starts the become method itself, and root's su asks for nothing.
    return {} if stock else {"ANSIBLE_STRATEGY": "mitogen_linear", "ANSIBLE_BECOME_METHOD": "su"}
