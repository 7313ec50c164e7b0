#!/usr/bin/python
"""Gather a health check's evidence on the rig in one module run.

health.yml judged the serving release from fifteen registered tasks (the container's restarts,
the smoke and its speed, the GPUs' conditions, the long prompts, the soak, the canary's race
check, the logs, the patcher's answers, the vLLM version, the upgrade guard): a module run each,
and state that crossed the file in fifteen facts. This module runs the same steps in the same
order, with the same conditions, and returns each step's result in the shape a registered
`command` result has ({rc, stdout, stderr, stdout_lines} or {skipped: true}), so that the verdict
(module_utils/vllm_dual_fast_domain/verdict.py, health_verdict) reads them unchanged. It only reads:
nothing on the rig changes but the race check's copy in the container's /tmp."""

import base64
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_dual_fast_command import command_result, run_command
from ansible.module_utils.vllm_dual_fast_domain.verdict import SPEED_CONDITION_FIELDS

DOCUMENTATION = r"""
module: vllm_dual_fast_health_evidence
short_description: Gather a health check's evidence on the rig in one run
description:
  - Runs health.yml's checks in order (restart count, smoke with its speed, the GPUs' speed
    conditions, the long prompts, the soak, the race check, restart count and image after, the
    container's logs, the patcher's answer, the vLLM version, the upgrade guard and the holds)
    and returns each result as a registered command result.
options:
  container:
    description: The serving container.
    type: str
    required: true
  release_dir:
    description: The release folder (smoke.py, checks/, api-key).
    type: path
    required: true
  image:
    description: The release's image (the patcher's one-off container when the patch is off).
    type: str
    required: true
  smoke_argv:
    description: smoke.py's command line for this release (base URL, model, key).
    type: list
    elements: str
    required: true
  speed_args:
    description: Added to smoke_argv for the smoke with its speed.
    type: list
    elements: str
    default: []
  long_prompt:
    description: C({tokens, max_num_seqs, max_model_len}); tokens 0 runs no long prompt.
    type: dict
    default: {}
  soak_s:
    description: Seconds of the canary's soak; 0 runs none.
    type: float
    default: 0
  race_check:
    description: Run the canary's race check in the container.
    type: bool
    default: false
  patch_enabled:
    description: The patcher is mounted in the container (else a one-off container asks).
    type: bool
    required: true
  engine_log_since:
    description: Epoch from which the container's log is read (the kernel window's).
    type: int
    required: true
  state_dir:
    description: The role's state folder on the rig (driver-holds.json).
    type: path
    required: true
  upgrade_guard_path:
    description: The role's unattended-upgrades blacklist.
    type: path
    required: true
  started_at:
    description: The controller's clock when the task started (the smoke's start).
    type: float
    required: true
"""

RETURN = r"""
evidence:
  description: >-
    restarts_before, smoke_started_at, smoke, speed_conditions, long_prompt, long_prompt_full,
    soak, race_check, restarts_after, engine_log, patch_at_start, patch_check, patch_check_image,
    vllm_version (registered command results), upgrade_guard ({stat: {exists}}), driver_holds
    and p2p_check ({content: base64} as slurp returns it, {} when unreadable).
  type: dict
"""

SKIPPED = {"skipped": True}
# In the serving container, not on the rig: the race check's copy lives and dies with it.
CHECK_DIR = "/tmp/vdf-check"    # noqa: S108
# The columns the verdict's speed_conditions reads, in its order: one list for the query and its
# reader.
SPEED_CONDITION_QUERY = "--query-gpu=" + ",".join(SPEED_CONDITION_FIELDS)
# What the engine writes during a long prompt: vLLM's CUDA out-of-memory error is in there.
ENGINE_LOG_LINES = 2000
STEP_TIMEOUT_S = 3600    # each step bounds itself (smoke's own timeouts); this only stops a hang


def run(argv, merge_stderr=False):
    """Run argv and return its registered result (module_utils/vllm_dual_fast_command.py)."""
    return run_command(argv, STEP_TIMEOUT_S, merge_stderr)


def last_lines(done, count):
    """The result with only its last count lines of stdout (`| tail -n count`)."""
    lines = done["stdout_lines"][-count:]
    return {**done, "stdout": "\n".join(lines), "stdout_lines": lines}


def inspect(container, template, runner):
    return runner(["docker", "inspect", "--format", template, container])


def long_prompt_argv(smoke_argv, tokens, concurrency, max_model_len):
    return smoke_argv + ["--long-prompt-tokens", str(tokens), "--concurrency", str(concurrency),
                         "--max-model-len", str(max_model_len)]


def race_check(container, checks_dir, runner):
    """race_check.py in the container with the patcher beside it; its last line and its own exit
    status. A copy that fails is exit 2, race_check's "could not run" (its 1 is a bad trial)."""
    copies = [["docker", "exec", container, "mkdir", "-p", CHECK_DIR],
              *[["docker", "cp", os.path.join(checks_dir, name), f"{container}:{CHECK_DIR}/"]
                for name in ("race_check.py", "patcher.py")]]
    for argv in copies:
        if runner(argv)["rc"] != 0:
            return command_result(2, "", f"could not copy the race check into {container}", argv)
    ran = runner(["docker", "exec", container, "python3", f"{CHECK_DIR}/race_check.py",
                  "--patcher", f"{CHECK_DIR}/patcher.py"], merge_stderr=True)
    return last_lines(ran, 1)


def patch_at_start(container, started_at, runner):
    """The patcher's one line (`fi-pinq: ...`) in the log of this container's start."""
    logs = runner(["docker", "logs", "--since", started_at, container], merge_stderr=True)
    said = [line for line in logs["stdout_lines"] if line.startswith("fi-pinq: ")]
    return {**logs, "rc": 0 if said else 1, "stdout": said[-1] if said else "",
            "stdout_lines": said[-1:]}


def read_state_file(path):
    """A state file as slurp returns it ({content: base64}); {} when it cannot be read."""
    try:
        with open(path, "rb") as held:
            return {"content": base64.b64encode(held.read()).decode()}
    except OSError:
        return {}


def gather(params, runner=run):
    """health.yml's evidence, step by step in its order (see the module's description)."""
    container, release_dir = params["container"], params["release_dir"]
    smoke_argv = list(params["smoke_argv"])
    long = params.get("long_prompt") or {}
    evidence = {"smoke_started_at": params["started_at"],
                "restarts_before": inspect(container, "{{.RestartCount}}", runner)}
    # The speed right after the smoke, before any soak: the baseline it is compared with (the
    # previous release's report) was measured on a freshly started server too.
    smoke = runner(smoke_argv + ["--speed"] + list(params.get("speed_args") or []))
    evidence["smoke"] = smoke
    # A speed is compared only with one measured at the same power limit and driver.
    evidence["speed_conditions"] = runner(["nvidia-smi", SPEED_CONDITION_QUERY,
                                           "--format=csv,noheader,nounits"])
    tokens = int(long.get("tokens") or 0)
    burst = SKIPPED
    if tokens > 0 and smoke["rc"] == 0:
        burst = runner(long_prompt_argv(smoke_argv, tokens, long["max_num_seqs"],
                                        long["max_model_len"]))
    evidence["long_prompt"] = burst
    # The context the release advertises, one prompt of max_model_len, after the burst passed.
    evidence["long_prompt_full"] = runner(long_prompt_argv(
        smoke_argv, long.get("max_model_len"), 1, long.get("max_model_len"))) \
        if tokens > 0 and smoke["rc"] == 0 and burst["rc"] == 0 else SKIPPED
    soak_s = float(params.get("soak_s") or 0)
    evidence["soak"] = runner(smoke_argv + ["--soak-s", f"{soak_s:g}"]) \
        if soak_s > 0 and smoke["rc"] == 0 else SKIPPED
    # Before the kernel log is read (health.yml reads it after this module): a race check that
    # faults the GPU writes its Xid line first.
    evidence["race_check"] = race_check(container, os.path.join(release_dir, "checks"), runner) \
        if params.get("race_check") else SKIPPED
    after = inspect(container, "{{.RestartCount}} {{.State.StartedAt}} {{.Image}}", runner)
    evidence["restarts_after"] = after
    evidence["engine_log"] = last_lines(runner(
        ["docker", "logs", "--since", str(int(params["engine_log_since"])), container],
        merge_stderr=True), ENGINE_LOG_LINES) if "stdout" in burst else SKIPPED
    started = (after.get("stdout", "").split(" ") + ["", ""])[1]
    if params["patch_enabled"]:
        evidence["patch_at_start"] = patch_at_start(container, started, runner)
        evidence["patch_check"] = runner(["docker", "exec", container, "python3",
                                          "/opt/vdf-patches/patcher.py", "--check", "--json"])
        evidence["patch_check_image"] = SKIPPED
    else:
        # Nothing mounted: the image's own FlashInfer, read in a one-off container.
        evidence["patch_at_start"] = evidence["patch_check"] = SKIPPED
        evidence["patch_check_image"] = runner([
            "docker", "run", "--rm", "--entrypoint=python3",
            f"--volume={os.path.join(release_dir, 'checks')}:/opt/vdf-checks:ro",
            params["image"], "/opt/vdf-checks/patcher.py", "--check", "--json"])
    # importlib.metadata, not `import vllm`: that takes seconds.
    evidence["vllm_version"] = runner(["docker", "exec", container, "python3", "-c",
                                       "import importlib.metadata as m; print(m.version('vllm'))"])
    evidence["upgrade_guard"] = {"stat": {"exists": os.path.exists(params["upgrade_guard_path"])}}
    evidence["driver_holds"] = read_state_file(os.path.join(params["state_dir"],
                                                            "driver-holds.json"))
    evidence["p2p_check"] = read_state_file(os.path.join(params["state_dir"], "p2p-check.json"))
    return evidence


def main():
    module = AnsibleModule(
        argument_spec={
            "container": {"type": "str", "required": True},
            "release_dir": {"type": "path", "required": True},
            "image": {"type": "str", "required": True},
            "smoke_argv": {"type": "list", "elements": "str", "required": True},
            "speed_args": {"type": "list", "elements": "str", "default": []},
            "long_prompt": {"type": "dict", "default": {}},
            "soak_s": {"type": "float", "default": 0},
            "race_check": {"type": "bool", "default": False},
            "patch_enabled": {"type": "bool", "required": True},
            "engine_log_since": {"type": "int", "required": True},
            "state_dir": {"type": "path", "required": True},
            "upgrade_guard_path": {"type": "path", "required": True},
            "started_at": {"type": "float", "required": True},
        },
        supports_check_mode=True,    # it only reads: check mode runs it as a normal run does
    )
    module.exit_json(changed=False, evidence=gather(module.params))


if __name__ == "__main__":
    main()
