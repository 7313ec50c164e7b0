"""The verdict lines a rig owner reads first (filter_plugins/vllm_dual_fast_summary.py) and
scripts/rig-summary.py, which prints them from a saved report (what `make demo` ends with)."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
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


def fail(check, line, result="fail", advice=None):
    return {"check": check, "result": result, "line": line,
            "advice": advice if advice is not None else f"advice for {check}"}


def test_a_failed_report_names_each_failure_with_its_own_advice():
    failures = [fail("kernel-xid", "new kernel Xid lines: NVRM: Xid (PCI:0000:01:00): 31, pid=7",
                     advice="a GPU fault: vllm#40756"),
                fail("container-restart", "container restart count went from 0 to 1"),
                fail("mtp", "MTP acceptance unmeasured (gone)", "cannot-judge"),
                fail("smoke", "something nobody foresaw", advice="")]
    lines = summary.verdict_lines(report(schema_version=2, healthy="False", failures=failures,
                                         kernel_xid_lines=["NVRM: Xid (PCI:0000:01:00): 31"]))
    assert lines[0] == "rig-a: UNHEALTHY - release abc123, 4 checks failed"
    failed = [line for line in lines if line.startswith(("  FAILED ", "  CANNOT JUDGE "))]
    assert failed == [
        "  FAILED [kernel-xid] new kernel Xid lines: NVRM: Xid (PCI:0000:01:00): 31, pid=7"
        " -> a GPU fault: vllm#40756",
        "  FAILED [container-restart] container restart count went from 0 to 1"
        " -> advice for container-restart",
        "  CANNOT JUDGE [mtp] MTP acceptance unmeasured (gone) -> advice for mtp",
        "  FAILED [smoke] something nobody foresaw"]            # no advice made up
    assert "1 Xid line, first: NVRM: Xid" in "\n".join(lines)


def test_advice_is_read_by_field_never_by_the_words_of_the_line():
    """A check's line that starts like another check's gets its own check's advice."""
    lines = summary.verdict_lines(report(schema_version=2, healthy=False, failures=[
        fail("soak", "smoke c=4 failed under the soak", advice="the soak's advice")]))
    assert lines[-1].endswith("-> the soak's advice")


def test_a_version_1_report_shows_its_failure_lines_without_guessing_advice():
    lines = summary.verdict_lines(report(healthy=False, failures=[
        "new kernel Xid lines: NVRM: Xid (PCI:0000:01:00): 31"]))
    assert lines[0] == "rig-a: UNHEALTHY - release abc123, 1 check failed"
    assert lines[-1] == "  FAILED new kernel Xid lines: NVRM: Xid (PCI:0000:01:00): 31"


def test_a_report_of_an_unknown_schema_version_is_shown_as_such_not_misread():
    for version in (3, "2", None):
        lines = summary.verdict_lines(report(schema_version=version, healthy=True),
                                      "reports/rig-a.json")
        assert lines == [f"rig-a: report of unknown schema version {version} - not read (a "
                         "newer role wrote it?)", "  full report: reports/rig-a.json"], lines


def test_a_gate_that_could_not_judge_is_said_even_when_nothing_failed():
    judged = {"mtp": {"result": "cannot-judge", "reason": "MTP acceptance unmeasured (gone)"},
              "speed": {"result": "off", "reason": "no canary gate on this run"}}
    lines = summary.verdict_lines(report(schema_version=2, judged=judged))
    assert lines[0] == "rig-a: HEALTHY - release abc123"
    assert "  cannot judge mtp: MTP acceptance unmeasured (gone)" in lines
    assert not [line for line in lines if "speed:" in line and "off" in line]


def test_mtp_long_prompts_and_downtime_share_one_line():
    lines = summary.verdict_lines(report(
        mtp={"mean_acceptance_length": 2.773, "acceptance_rate": 0.443}, downtime_s=12.5,
        long_prompt={"ok": True, "concurrency": 4, "prompt_tokens": [16390, 16388]}))
    assert ("  MTP 2.77 tokens per step (44 % of drafts accepted); long prompts: 4 at once of "
            "16388+ tokens answered; switch downtime 12.5 s") in lines
    failed = summary.verdict_lines(report(long_prompt={"ok": False, "concurrency": 4}))
    assert any("long prompts: 4 at once of ?+ tokens FAILED" in line for line in failed)
    # What smoke.py records when the engine ran out of memory: no usage on any request.
    oom = summary.verdict_lines(report(healthy=False,
                                       failures=[fail("long-prompt", "long prompts (...) failed")],
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
    bad.write_text(json.dumps(report(schema_version=2, healthy=False,
                                      failures=[fail("smoke", "smoke c=4 failed: empty")])))
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
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(report(schema_version=3, healthy=True)))
    unknown = subprocess.run(run + [str(newer), str(bad)], capture_output=True, text=True,
                             check=False)
    assert unknown.returncode == 2 and "unknown schema version 3" in unknown.stdout


def test_a_lan_bind_prints_the_certificate_fingerprint_clients_pin():
    fingerprint = ":".join(["7F"] * 32)
    lines = summary.verdict_lines(report(lan_bind="0.0.0.0:8000",
                                         tls_fingerprint_sha256=fingerprint))
    assert f"  LAN: TLS only on 0.0.0.0:8000, certificate SHA-256 {fingerprint} (clients pin it)" \
        in lines
    unread = summary.verdict_lines(report(lan_bind="0.0.0.0:8000", tls_fingerprint_sha256=""))
    assert any("certificate SHA-256 NOT READ" in line for line in unread)
    assert not [line for line in summary.verdict_lines(report()) if "LAN:" in line]
