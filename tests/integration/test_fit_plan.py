"""What playbooks/fit.yml tries on a rig (tasks/fit_plan.yml through include_role, the role's
defaults standing where the inventory sets nothing), and its refusal of a malformed candidate
before anything changes."""

import json

from ansible_runner import run_playbook


def plan(tmp_path, **extra):
    """(result, output, the plan as the role left it, None when it stopped)."""
    out_file = tmp_path / "plan.json"
    out_file.unlink(missing_ok=True)
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Plan", "ansible.builtin.include_role": {"name": "vllm_dual_fast",
                                                           "tasks_from": "fit_plan.yml"}},
        {"name": "Keep it", "ansible.builtin.copy": {
            "content": "{{ vllm_dual_fast_fit_plan | to_json }}", "dest": str(out_file),
            "mode": "0644"}}]}]
    result, out = run_playbook(tmp_path, play, extra)
    return result, out, (json.loads(out_file.read_text()) if out_file.exists() else None)


def test_without_candidates_the_fit_steps_down_from_the_rig_s_own_settings(tmp_path):
    result, out, found = plan(tmp_path, vllm_dual_fast_max_num_seqs=3,
                              vllm_dual_fast_kv_cache_memory_bytes=5000)
    assert result.returncode == 0, out
    assert [c["max_num_seqs"] for c in found["candidates"]] == [3, 2, 1]
    assert {c["max_model_len"] for c in found["candidates"]} == {65536}    # the role's default
    assert found["serving"] == {"max_num_seqs": 3, "max_model_len": 65536,
                                "max_num_batched_tokens": 8192, "kv_cache_memory_bytes": 5000}


def test_the_owner_s_candidates_are_tried_as_given(tmp_path):
    given = [{"max_num_seqs": 6, "max_model_len": 32768, "max_num_batched_tokens": 4096}]
    result, out, found = plan(tmp_path, vdf_fit_candidates=given)
    assert result.returncode == 0, out
    assert found["candidates"] == given


def test_a_malformed_candidate_is_refused_before_anything_changes(tmp_path):
    for bad in ([{"max_num_seqs": 0, "max_model_len": 4096, "max_num_batched_tokens": 2048}],
                [{"max_num_seqs": 2, "max_model_len": 4096}], []):
        result, out, found = plan(tmp_path, vdf_fit_candidates=bad)
        assert result.returncode != 0 and found is None
        assert "vdf_fit_candidates: each candidate is {max_num_seqs, max_model_len" in out, out
        assert "Nothing was changed" in out
