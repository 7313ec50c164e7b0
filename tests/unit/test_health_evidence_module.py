"""The health evidence module (library/vllm_dual_fast_health_evidence.py) on its own: which steps
it runs, in which order and on which conditions, with a recorded runner in place of the commands
(the commands themselves run against real containers in test_health_tasks.py). Each condition is
the one health.yml's registered tasks had: a long prompt only for a new release whose smoke
passed, the prompt of max_model_len only after the burst passed, the soak and the race check only
on a canary, the patcher asked in the container or in a one-off container of the image."""

import base64
import importlib.util
import json

import pytest
from ansible_runner import ROLE

_SPEC = importlib.util.spec_from_file_location(
    "vllm_dual_fast_health_evidence", ROLE / "library/vllm_dual_fast_health_evidence.py")
evidence_module = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(evidence_module)

SMOKE = ["python3", "/rel/smoke.py", "--base-url", "http://127.0.0.1:8000", "--json"]


class Recorder:
    """Answers each command as told by the first matching rule; records every argv in order."""

    def __init__(self, rules=None):
        self.calls, self.rules = [], rules or {}

    def __call__(self, argv, merge_stderr=False):
        self.calls.append(argv)
        for needle, (rc, stdout) in self.rules.items():
            if needle in " ".join(argv):
                return evidence_module.command_result(rc, stdout, "", argv)
        return evidence_module.command_result(0, "", "", argv)

    def step(self, needle):
        """Indexes of the calls whose argv holds needle."""
        return [i for i, argv in enumerate(self.calls) if needle in " ".join(argv)]


def params(tmp_path, **changes):
    return {"container": "vllm-dual-fast", "release_dir": "/rel", "image": "img@sha256:1",
            "smoke_argv": SMOKE, "speed_args": ["--speed-rounds", "5"],
            "long_prompt": {"tokens": 2048, "max_num_seqs": 4, "max_model_len": 4096},
            "soak_s": 5.0, "race_check": True, "patch_enabled": True,
            "engine_log_since": 1000, "state_dir": str(tmp_path),
            "upgrade_guard_path": str(tmp_path / "guard"), "started_at": 1234.5, **changes}


def test_a_canary_s_steps_run_in_health_s_order(tmp_path):
    runner = Recorder({"{{.RestartCount}} {{.State.StartedAt}}": (0, "0 2026-12-06T00:00:00Z i")})
    evidence = evidence_module.gather(params(tmp_path), runner)
    order = [runner.step(needle)[0] for needle in (
        "{{.RestartCount}}", "--speed", "nvidia-smi", "--long-prompt-tokens 2048",
        "--long-prompt-tokens 4096", "--soak-s 5", "race_check.py --patcher",
        "{{.State.StartedAt}}", "logs --since 1000", "logs --since 2026-12-06T00:00:00Z",
        "patcher.py --check", "importlib.metadata")]
    assert order == sorted(order), runner.calls
    assert runner.calls[runner.step("--speed")[0]] == SMOKE + ["--speed", "--speed-rounds", "5"]
    assert runner.calls[runner.step("--long-prompt-tokens 4096")[0]][-4:] == [
        "--concurrency", "1", "--max-model-len", "4096"]
    assert evidence["smoke_started_at"] == 1234.5
    assert evidence["patch_check_image"] == {"skipped": True}


@pytest.mark.parametrize("failing, skipped", [
    ("--speed", {"long_prompt", "long_prompt_full", "soak", "engine_log"}),
    ("--long-prompt-tokens 2048", {"long_prompt_full"}),
])
def test_a_failed_step_skips_what_health_ran_only_after_it_passed(tmp_path, failing, skipped):
    runner = Recorder({failing: (1, "{}")})
    evidence = evidence_module.gather(params(tmp_path), runner)
    steps = ("long_prompt", "long_prompt_full", "soak", "engine_log")
    assert {s for s in steps if evidence[s] == {"skipped": True}} == skipped, evidence
    assert evidence["race_check"]["rc"] == 0    # the race check runs whatever the smoke said


def test_a_release_that_is_not_new_and_no_canary_runs_only_the_smoke_s_checks(tmp_path):
    runner = Recorder()
    evidence = evidence_module.gather(params(tmp_path, long_prompt={}, soak_s=0,
                                             race_check=False), runner)
    for step in ("long_prompt", "long_prompt_full", "soak", "race_check", "engine_log"):
        assert evidence[step] == {"skipped": True}, step
    assert not runner.step("--soak-s") and not runner.step("race_check.py")


def test_with_the_patch_off_a_one_off_container_of_the_image_is_asked(tmp_path):
    runner = Recorder({"patcher.py --check": (0, '{"status": "unpatched"}\n')})
    evidence = evidence_module.gather(params(tmp_path, patch_enabled=False), runner)
    asked = runner.calls[runner.step("patcher.py --check")[0]]
    assert asked[:4] == ["docker", "run", "--rm", "--entrypoint=python3"]
    assert "--volume=/rel/checks:/opt/vdf-checks:ro" in asked and "img@sha256:1" in asked
    assert json.loads(evidence["patch_check_image"]["stdout"]) == {"status": "unpatched"}
    assert evidence["patch_check"] == evidence["patch_at_start"] == {"skipped": True}


def test_the_patcher_s_line_at_start_is_its_last_one_in_the_start_s_log(tmp_path):
    logs = "starting\nfi-pinq: patched 1 site\nINFO serving\nfi-pinq: already patched\n"
    runner = Recorder({"logs --since 2026": (0, logs),
                       "{{.State.StartedAt}}": (0, "0 2026-12-06T00:00:00Z i")})
    evidence = evidence_module.gather(params(tmp_path), runner)
    assert evidence["patch_at_start"]["stdout"] == "fi-pinq: already patched"


def test_the_engine_log_keeps_its_last_2000_lines(tmp_path):
    runner = Recorder({"logs --since 1000": (0, "\n".join(f"l{i}" for i in range(2500)))})
    log = evidence_module.gather(params(tmp_path), runner)["engine_log"]
    assert len(log["stdout_lines"]) == 2000 and log["stdout_lines"][0] == "l500"


def test_a_race_check_that_cannot_be_copied_in_is_exit_2_and_never_runs():
    runner = Recorder({"docker cp": (1, "")})
    race = evidence_module.race_check("vllm-dual-fast", "/rel/checks", runner)
    assert (race["rc"], race["stderr"]) == (2, "could not copy the race check into vllm-dual-fast")
    assert not runner.step("race_check.py --patcher")


def test_the_upgrade_guard_and_the_holds_are_read_as_the_rig_has_them(tmp_path):
    (tmp_path / "guard").write_text("// blacklist\n")
    (tmp_path / "driver-holds.json").write_text('{"held_by_role": ["linux-image-amd64"]}')
    evidence = evidence_module.gather(params(tmp_path), Recorder())
    assert evidence["upgrade_guard"] == {"stat": {"exists": True}}
    held = json.loads(base64.b64decode(evidence["driver_holds"]["content"]))
    assert held == {"held_by_role": ["linux-image-amd64"]}
    (tmp_path / "guard").unlink()
    (tmp_path / "driver-holds.json").unlink()
    evidence = evidence_module.gather(params(tmp_path), Recorder())
    assert evidence["upgrade_guard"] == {"stat": {"exists": False}}
    assert evidence["driver_holds"] == {}


def test_a_command_that_cannot_start_is_a_result_not_a_crash():
    done = evidence_module.run(["/nonexistent/nvidia-smi"])
    assert done["rc"] == 127 and "nonexistent" in done["stderr"]
