"""Kernel-log filters: only lines written since a deploy (or a rollback) began count."""

import importlib.util
from datetime import datetime, timezone
from pathlib import Path

import pytest

_PATH = Path(__file__).parents[1] / "roles/vllm_dual_fast/filter_plugins/vllm_dual_fast_health.py"
_spec = importlib.util.spec_from_file_location("health_filters", _PATH)
health = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(health)

XID = ("NVRM: Xid (PCI:0000:01:00): 31, pid=4242, name=python3, Ch 00000008, intr 00000000. "
       "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_1c000000.")


def _at(epoch, text, offset="+00:00"):
    stamp = datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S,%f")
    return f"{stamp}{offset} {text}"


def test_an_xid_from_before_the_rollback_is_not_held_against_it():
    log = [_at(1000, "eth0: link up"), _at(1100, XID), _at(1200, "docker0: port 1 forwarding")]
    assert health.kernel_lines_since(log, 1150) == [log[2]]
    assert health.xid_lines(health.kernel_lines_since(log, 1150)) == []


def test_an_xid_written_during_the_deploy_is_found():
    log = [_at(1000, "boot"), _at(1100, XID)]
    assert health.xid_lines(health.kernel_lines_since(log, "1050")) == [log[1]]


def test_the_time_zone_of_the_line_is_honoured():
    # 01:00 at +01:00 is 00:00 UTC: before a deploy that began at 00:30 UTC.
    line = "1970-01-01T01:00:00,000000+01:00 " + XID
    assert health.kernel_lines_since([line], 1800) == []
    assert health.kernel_lines_since([line], 0) == [line]


@pytest.mark.parametrize("lines", [["[12345.678] NVRM: Xid (PCI:0000:01:00): 31"], []])
def test_undated_logs_are_kept_whole(lines):
    assert health.kernel_lines_since(lines, 10**10) == lines


@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("fi-pinq: patched decode.py (2 allocations) flashinfer 0.7.2.post1", "patched"),
        ("fi-pinq: already-patched decode.py (2 allocations) flashinfer 0.7.2", "already-patched"),
        ("fi-pinq: upstream-fixed decode.py (0 allocations) flashinfer 0.9.0", "upstream-fixed"),
        ("fi-pinq: drift: decode.py: no allocation found flashinfer 0.8.0", "drift"),
    ],
)
def test_the_patch_state_comes_from_the_start_line(line, status):
    assert health.patch_at_start(line) == {"status": status, "line": line}


@pytest.mark.parametrize("line", ["", "INFO 11-30 vLLM API server started", None])
def test_no_start_line_means_no_start_state(line):
    assert health.patch_at_start(line) == {}
