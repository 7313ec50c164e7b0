"""The P2P check's record and what it decides (module_utils/vllm_dual_fast_domain/p2p.py, issue 46
part 2): when a run checks again, what it keeps (files/schemas/p2p-check.schema.json), the
NCCL_P2P_DISABLE the release is made with, and what the report and the verdict show. The check
itself runs for real in tests/integration/test_p2p_check.py; its output here is what it printed
there (a hang in the peer arm, the double's)."""

import base64
import json
import sys
from pathlib import Path

import jsonschema
import pytest
from ansible.module_utils.vllm_dual_fast_domain import p2p

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "roles/vllm_dual_fast/filter_plugins"))
import vllm_dual_fast as filters  # noqa: E402
import vllm_dual_fast_summary as summary  # noqa: E402

RECORD_SCHEMA = json.loads((ROOT / "files/schemas/p2p-check.schema.json").read_text())
REPORT_SCHEMA = json.loads((ROOT / "files/schemas/health-report.schema.json").read_text())
IDENTITY = "GPU-00000000-0000-0000-0000-000000000000, 94.02.42.00.A1, 580.95.05"
KEY = p2p.p2p_check_key(IDENTITY + "\n", "sha256:aa", "nccl", False)
HANG = {"arms": {"p2p": {"result": "hang", "seconds": 60.02,
                         "detail": "the all-reduce did not finish within the timeout"},
                 "no-p2p": {"result": "healthy", "seconds": 3.1, "detail": "every element right"}},
        "decision": {"arm": "no-p2p", "nccl_p2p_disable": True, "measured": True,
                     "why": "with a peer path the all-reduce was hang; through host memory it "
                            "is right"}}


def slurped(record):
    return {"content": base64.b64encode(json.dumps(record).encode()).decode()}


def test_the_key_is_what_the_answer_holds_for():
    assert KEY == {"gpu_identity": IDENTITY, "image_id": "sha256:aa", "backend": "nccl",
                   "nvlink": False}
    assert p2p.p2p_check_key(IDENTITY, "sha256:aa", "nccl", "False") == KEY
    assert p2p.p2p_check_key(IDENTITY, "sha256:aa", "nccl", "True")["nvlink"] is True


def test_a_run_checks_when_nothing_kept_holds_for_its_key():
    record = p2p.p2p_check_record(KEY, {"rc": 0, "stdout": json.dumps(HANG)}, "t")
    assert p2p.p2p_check_due({}, KEY, "changed")                      # never checked
    assert not p2p.p2p_check_due(slurped(record), KEY, "changed")     # same GPUs, driver, image
    for changed in ({"image_id": "sha256:bb"}, {"gpu_identity": IDENTITY.replace("580", "590")},
                    {"backend": "gloo"}, {"nvlink": True}):
        assert p2p.p2p_check_due(slurped(record), {**KEY, **changed}, "changed"), changed
    assert p2p.p2p_check_due(slurped(record), KEY, "always")
    assert not p2p.p2p_check_due({}, KEY, "never")
    assert p2p.p2p_check_due(slurped({**record, "schema_version": 0}), KEY, "changed")
    with pytest.raises(ValueError, match="one of changed, always, never"):
        p2p.p2p_check_due({}, KEY, "sometimes")


def test_the_record_of_a_check_follows_its_schema_and_gives_its_decision():
    record = p2p.p2p_check_record(KEY, {"rc": 0, "stdout": json.dumps(HANG)}, "2026-12-06T22:00")
    jsonschema.validate(record, RECORD_SCHEMA)
    assert p2p.p2p_decision(record) == "no-p2p"
    assert p2p.p2p_stored(slurped(record)) == record
    refused = {**HANG, "decision": {"arm": "", "nccl_p2p_disable": True, "measured": True,
                                    "why": "no arm gives a right all-reduce: p2p hang; no-p2p "
                                           "hang"}}
    assert p2p.p2p_decision(p2p.p2p_check_record(KEY, {"rc": 1, "stdout": json.dumps(refused)},
                                                 "t")) == ""


@pytest.mark.parametrize("run", [
    {"rc": 125, "stdout": "", "stderr": "docker: Error response from daemon: could not select "
                                         "device driver \"\" with capabilities: [[gpu]]."},
    {"rc": 2, "stdout": "", "stderr": "p2p_check: --timeout-s must be above 0"},
    {"rc": 0, "stdout": "Traceback (most recent call last):"},
    {"failed": True, "msg": "The command action failed to execute in the expected time frame "
                            "(240) and was terminated"},
])
def test_a_check_that_did_not_run_to_its_end_decides_nothing_and_says_why(run):
    record = p2p.p2p_check_record(KEY, run, "t")
    jsonschema.validate(record, RECORD_SCHEMA)
    assert p2p.p2p_decision(record) == "" and record["decision"]["measured"] is False
    assert record["decision"]["why"].startswith("the check did not run to its end")


def test_the_decision_sets_nccl_s_peer_path_and_without_one_the_nvlink_rule_holds():
    base = {"nvlink": False}
    assert "NCCL_P2P_DISABLE" not in filters.serve_environment({**base, "p2p_decision": "p2p"})
    assert filters.serve_environment({**base, "p2p_decision": "no-p2p"})["NCCL_P2P_DISABLE"] == "1"
    assert filters.serve_environment({"nvlink": True, "p2p_decision": "no-p2p"})[
        "NCCL_P2P_DISABLE"] == "1"
    assert filters.serve_environment({**base, "p2p_decision": ""})["NCCL_P2P_DISABLE"] == "1"
    assert "NCCL_P2P_DISABLE" not in filters.serve_environment({"nvlink": True})


def test_the_report_shows_the_last_check_and_the_verdict_says_it():
    record = p2p.p2p_check_record(KEY, {"rc": 0, "stdout": json.dumps(HANG)}, "2026-12-06T22:00")
    shown = p2p.p2p_report(slurped(record))
    assert shown == {"checked_at": "2026-12-06T22:00", "arm": "no-p2p", "nccl_p2p_disable": True,
                     "measured": True, "why": HANG["decision"]["why"],
                     "arms": {"p2p": {"result": "hang", "seconds": 60.02},
                              "no-p2p": {"result": "healthy", "seconds": 3.1}}}
    assert p2p.p2p_report({}) == {} and p2p.p2p_report({"content": "bm90IGpzb24="}) == {}
    line = summary.p2p_line(shown)
    assert line.startswith("P2P check: peer path off (NCCL_P2P_DISABLE=1): with a peer path")
    assert line.endswith("[p2p hang, no-p2p healthy]")
    unmeasured = {**shown, "measured": False, "arms": {}}
    assert ", not measured:" in summary.p2p_line(unmeasured)


def test_the_health_report_carries_the_check_within_its_schema():
    import test_health_report as reports  # the health report's own evidence builder

    record = p2p.p2p_check_record(KEY, {"rc": 0, "stdout": json.dumps(HANG)}, "t")
    report = reports.report_of({**reports.evidence(), "p2p_check": slurped(record)})
    assert report["p2p"]["arm"] == "no-p2p"
    jsonschema.validate(report, REPORT_SCHEMA)
    assert reports.report_of(reports.evidence())["p2p"] == {}
    assert any(line.startswith("  P2P check: peer path off")
               for line in summary.verdict_lines(report)), summary.verdict_lines(report)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**report, "p2p": {**report["p2p"], "arm": "maybe"}}, REPORT_SCHEMA)
