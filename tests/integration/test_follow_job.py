"""follow_job.yml follows a real background job (`async`, `poll: 0`) to its end on stock Ansible
and on Mitogen, whose job result names no status file and whose status file says
"finished": 0 rather than false: a job still running must be reported running, not finished."""

import pytest
from ansible_runner import ROLE, run_playbook


def _follow(tmp_path, strategy, command):
    play = [{
        "name": "Follow a background job", "hosts": "localhost", "gather_facts": False,
        "vars": {"vllm_dual_fast_download_timeout": 60},
        "tasks": [
            {"name": "Start the job", "ansible.builtin.shell": command,
             "async": 60, "poll": 0, "register": "job", "changed_when": True},
            {"name": "Follow it",
             "ansible.builtin.include_tasks": str(ROLE / "tasks/follow_job.yml"),
             "vars": {"_vllm_dual_fast_job": "{{ job }}",
                      "_vllm_dual_fast_job_what": "the test job",
                      "_vllm_dual_fast_job_started": "{{ now().timestamp() | int }}",
                      "_vllm_dual_fast_job_progress": "echo progress-of-test",
                      "_vllm_dual_fast_job_interval": 2}},
        ],
    }]
    return run_playbook(tmp_path, play, env={"ANSIBLE_STRATEGY": strategy})


@pytest.mark.parametrize("strategy", ["linear", "mitogen_linear"])
def test_a_running_job_is_followed_to_its_end(tmp_path, strategy):
    result, out = _follow(tmp_path, strategy, "sleep 5; echo job-done")
    assert result.returncode == 0, out
    assert "the test job: running" in out, out        # seen running, not taken for finished
    assert "finished after" in out and "job-done" in out


@pytest.mark.parametrize("strategy", ["linear", "mitogen_linear"])
def test_a_failed_job_stops_the_play_with_its_last_lines(tmp_path, strategy):
    result, out = _follow(tmp_path, strategy, "sleep 3; echo job-broke >&2; exit 3")
    assert result.returncode != 0
    assert "the test job failed (rc 3)" in out and "job-broke" in out, out
