"""files/pull_report.py, the pull script's Python: the pull state it writes, the report tagged
with it, the signed upload's envelope (files/schemas/signed-report.schema.json) and the names the
rig answers to. The script itself runs it in tests/integration/test_pull_script.py."""

import datetime
import json

import pytest
from vllm_double_fixtures import load_file_module

pull_report = load_file_module("pull_report")
signed_reports = load_file_module("signed_reports")
AT = datetime.datetime(2026, 12, 6, 4, 0, tzinfo=datetime.timezone.utc)


def test_the_pull_state_types_its_numbers_and_dates_its_next_try():
    state = pull_report.pull_state(["state=failed", "ref=v1", "rc=1", "next_try=1796529600",
                                    "attempts=2", "reason=a=b"], now=AT)
    assert state == {"state": "failed", "ref": "v1", "rc": 1, "attempts": 2, "reason": "a=b",
                     "next_try": "2026-12-06T04:00:00+00:00", "at": AT.isoformat()}


def test_a_report_is_tagged_with_the_pull_state_and_none_is_the_host_alone(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps({"host": "rig-a", "healthy": True}))
    (tmp_path / "pull.json").write_text(json.dumps({"state": "applied"}))
    tagged = pull_report.tagged_report(str(tmp_path / "report.json"), "rig-a",
                                       str(tmp_path / "pull.json"))
    assert tagged == {"host": "rig-a", "healthy": True, "pull": {"state": "applied"}}
    # The first run here failed before health: no report, and a pull state not yet written.
    assert pull_report.tagged_report(str(tmp_path / "none.json"), "rig-a",
                                     str(tmp_path / "none.json")) == {"host": "rig-a", "pull": {}}


@pytest.mark.parametrize("unsigned", ["", "this rig has no report key; enrol it again"])
def test_the_envelope_carries_the_exact_bytes_signed_and_reads_back_as_such(tmp_path, unsigned):
    report = tmp_path / "upload-report.json"
    report.write_bytes(b'{\n  "host": "rig-a"\n}')
    if not unsigned:
        (tmp_path / "upload-report.json.sig").write_text("-----BEGIN SSH SIGNATURE-----\nx\n")
    upload = pull_report.envelope(str(report), unsigned)
    assert upload["report"] == '{\n  "host": "rig-a"\n}'
    # What the fleet report reads of it (files/signed_reports.py): the same format, namespace.
    read = signed_reports.parse_upload(json.dumps(upload).encode())
    assert read["report"] == {"host": "rig-a"}
    assert (read["why"] is None) == (not unsigned), read
    if unsigned:
        assert unsigned in read["why"]


def test_the_names_include_localhost_and_the_short_hostname():
    import platform
    names = pull_report.own_names()
    assert {"localhost", "127.0.0.1", platform.node().split(".")[0]} <= set(names)
