"""The verdict lines a rig owner reads first (filter_plugins/vllm_dual_fast_summary.py) and
scripts/rig-summary.py, which prints them from a saved report (what `make demo` ends with)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
_PATH = ROOT / "roles/vllm_dual_fast/filter_plugins/vllm_dual_fast_summary.py"
_SPEC = importlib.util.spec_from_file_location("vllm_dual_fast_summary", _PATH)
summary = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(summary)

SPEED = {"c1": {"tokens_per_s": 48.25}, "cN": {"tokens_per_s": 150.3}, "concurrency": 4}


def report(**extra):
    body = {"host": "rig-a", "release": "abc123", "image": "vllm/vllm-openai:v0.27.1",
            "vllm_version": "0.27.1", "healthy": True, "failures": [], "smoke": {"speed": SPEED},
            "kernel_xid_lines": [], "kernel_log_readable": True, "patch_status": "patched",
            "patch_report": {"flashinfer_version": "0.7.2.post1"}}
    body.update(extra)
    return body


def test_a_healthy_report_says_so_first_with_what_serves():
    lines = summary.verdict_lines(report(previous_speed={"c1": {"tokens_per_s": 47.0}}),
                                  "reports/rig-a.json")
    assert lines[0] == "rig-a: HEALTHY - release abc123"
    assert "vLLM 0.27.1" in lines[1] and "FlashInfer 0.7.2.post1" in lines[1]
    assert "patch patched" in lines[1]
    assert "c=1 48.2 tok/s (was 47.0)" in lines[2] and "c=4 150.3 tok/s" in lines[2]
    assert "(was" not in lines[2].split("c=4")[1]          # no c=4 figure before: none invented
    assert lines[3] == "  kernel: no Xid line during the check"
    assert lines[-1] == "  full report: reports/rig-a.json"
    assert len(lines) <= 6                                  # one screen, not the JSON


def test_a_failed_report_names_each_failure_with_what_to_do():
    failures = ["new kernel Xid lines: NVRM: Xid (PCI:0000:01:00): 31, pid=7",
                "container restart count went from 0 to 1", "something nobody foresaw"]
    lines = summary.verdict_lines(report(healthy="False", failures=failures,
                                         kernel_xid_lines=["NVRM: Xid (PCI:0000:01:00): 31"]))
    assert lines[0] == "rig-a: UNHEALTHY - release abc123, 3 checks failed"
    failed = [line for line in lines if line.startswith("  FAILED ")]
    assert len(failed) == 3
    assert "-> a GPU fault" in failed[0] and "vllm#40756" in failed[0]
    assert "-> the engine died" in failed[1]
    assert failed[2] == "  FAILED something nobody foresaw"     # no advice made up
    assert "1 Xid line, first: NVRM: Xid" in "\n".join(lines)


def test_mtp_long_prompts_and_downtime_share_one_line():
    lines = summary.verdict_lines(report(
        mtp={"mean_acceptance_length": 2.773, "acceptance_rate": 0.443}, downtime_s=12.5,
        long_prompt={"ok": True, "concurrency": 4, "prompt_tokens": [16390, 16388]}))
    assert ("  MTP 2.77 tokens per step (44 % of drafts accepted); long prompts: 4 at once of "
            "16388+ tokens answered; switch downtime 12.5 s") in lines
    failed = summary.verdict_lines(report(long_prompt={"ok": False, "concurrency": 4}))
    assert any("long prompts: 4 at once of ?+ tokens FAILED" in line for line in failed)
    # What smoke.py records when the engine ran out of memory: no usage on any request.
    oom = summary.verdict_lines(report(healthy=False, failures=["long prompts (...) failed"],
                                       long_prompt={"ok": False, "concurrency": 4,
                                                    "target_tokens": 16384,
                                                    "prompt_tokens": [None] * 4}))
    assert any("long prompts: 4 at once of 16384+ tokens FAILED" in line for line in oom)


def test_an_unreadable_kernel_log_is_not_called_clean():
    lines = summary.verdict_lines(report(kernel_log_readable=False))
    assert "kernel: log not readable here, Xid lines not checked" in "\n".join(lines)


def test_the_summary_script_prints_the_verdict_and_exits_by_it(tmp_path):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(report()))
    bad.write_text(json.dumps(report(healthy=False, failures=["smoke c=4 failed: empty"])))
    run = [sys.executable, str(ROOT / "scripts/rig-summary.py")]
    ok = subprocess.run(run + [str(good)], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and ok.stdout.startswith("rig-a: HEALTHY")
    assert f"full report: {good}" in ok.stdout
    failed = subprocess.run(run + [str(good), str(bad)], capture_output=True, text=True,
                            check=False)
    assert failed.returncode == 1 and "UNHEALTHY" in failed.stdout
    (tmp_path / "torn.json").write_text("{")
    torn = subprocess.run(run + [str(tmp_path / "torn.json")], capture_output=True, text=True,
                          check=False)
    assert torn.returncode == 2 and "cannot read" in torn.stderr
