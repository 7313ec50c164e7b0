"""molecule/doubles/dmesg-double, the kernel log's GPU lines: as dmesg it stamps them as the real
tool does, on the kernel's own clock by default and on a wall clock it can drift as a real host's
does after a suspend; as journalctl it adds them to a journal that keeps kernel lines, with the
time journald received them. The tools it wraps are stand-ins here (a temporary PATH), and once
this machine's Docker engine: a container that dies with exit status 134 (the vLLM double's
illegal-memory-access abort) shows as an Xid 31 line at once."""

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime

import pytest
from docker_engine import needs_docker
from kernel_log_stand_ins import install_kernel_log_tools

DOUBLE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "molecule/doubles/dmesg-double")
XID = "NVRM: Xid (PCI:0000:01:00): 31, pid=4242, name=python3"

@pytest.fixture
def tools(tmp_path):
    """A PATH with the double as dmesg and journalctl ahead of the stand-ins, no docker on it;
    run(tool, *args, **env) -> stdout, and the file the double reads written lines from."""
    double_bin, real_bin = install_kernel_log_tools(tmp_path)
    os.symlink(os.path.realpath(sys.executable), real_bin / "python3")
    lines = tmp_path / "lines"

    def run(tool, *args, **env):
        full_env = {"PATH": f"{double_bin}:{real_bin}", "DMESG_DOUBLE_LINES": str(lines),
                    "DMESG_DOUBLE_CONFIG": str(tmp_path / "dmesg-double.json"), **env}
        done = subprocess.run([str(double_bin / tool), *args], capture_output=True, text=True,
                              env=full_env, timeout=60, check=True)
        return done.stdout

    run.lines = lines
    run.config = tmp_path / "dmesg-double.json"
    run.calls = real_bin / "calls.log"
    return run


def write_line(run, at, text=XID):
    with open(run.lines, "a") as f:
        f.write(f"{at:.6f} {text}\n")


def stamp_of(output, text=XID):
    found = [line for line in output.splitlines() if line.endswith(text)]
    assert len(found) == 1, output
    return found[0][: -len(text) - 1]


def test_the_default_format_stamps_on_the_kernel_clock(tools):
    at = time.time() - 30
    write_line(tools, at)
    mono_before = time.clock_gettime(time.CLOCK_MONOTONIC)
    out = tools("dmesg")
    mono_after = time.clock_gettime(time.CLOCK_MONOTONIC)
    assert out.splitlines()[0] == "[    0.000000] Linux version 6.1.0"   # the real log first
    stamp = stamp_of(out)
    assert stamp.startswith("[") and stamp.endswith("]") and len(stamp.split(".")[1]) == 7, stamp
    # 30 s before now on the monotonic clock (the kernel's printk clock), to the microsecond.
    assert mono_before - 30 - 0.01 <= float(stamp.strip("[]")) <= mono_after - 30 + 0.01, stamp


def test_wall_clock_stamps_drift_and_kernel_clock_stamps_do_not(tools):
    at = time.time() - 10
    write_line(tools, at)
    raw = float(stamp_of(tools("dmesg")).strip("[]"))
    iso = stamp_of(tools("dmesg", "--time-format=iso", DMESG_DOUBLE_DRIFT_S="-300"))
    assert datetime.fromisoformat(iso.replace(",", ".")).timestamp() == pytest.approx(at - 300)
    ctime = stamp_of(tools("dmesg", "-T", DMESG_DOUBLE_DRIFT_S="-300"))
    assert ctime == time.strftime("[%a %b %e %H:%M:%S %Y]", time.localtime(at - 300))
    drifted_raw = float(stamp_of(tools("dmesg", DMESG_DOUBLE_DRIFT_S="-300")).strip("[]"))
    assert drifted_raw == pytest.approx(raw, abs=0.05)
    undrifted = stamp_of(tools("dmesg", "--time-format", "iso"))
    assert datetime.fromisoformat(undrifted.replace(",", ".")).timestamp() == pytest.approx(at)


def test_the_drift_comes_from_the_knob_file_and_the_environment_wins(tools):
    at = time.time() - 10
    write_line(tools, at)
    tools.config.write_text(json.dumps({"drift_s": -120}))

    def shown(**env):
        iso = stamp_of(tools("dmesg", "--time-format=iso", **env))
        return datetime.fromisoformat(iso.replace(",", ".")).timestamp()

    assert shown() == pytest.approx(at - 120)
    assert shown(DMESG_DOUBLE_DRIFT_S="60") == pytest.approx(at + 60)


def test_a_line_written_after_the_read_is_not_in_it(tools):
    write_line(tools, time.time() + 60)
    assert XID not in tools("dmesg")


def test_other_dmesg_calls_go_to_the_real_tool_alone(tools):
    write_line(tools, time.time())
    assert tools("dmesg", "--level=err") == "[    0.000000] Linux version 6.1.0\n"
    assert tools.calls.read_text().splitlines() == ["dmesg --level=err"]


def test_journalctl_adds_the_lines_journald_received_since(tools):
    now = time.time()
    write_line(tools, now - 100, "NVRM: Xid (PCI:0000:01:00): 31, pid=1, old")
    write_line(tools, now - 10)
    out = tools("journalctl", "_TRANSPORT=kernel", f"--since=@{now - 50}", "--quiet",
                "--no-pager", "--output=short-unix").splitlines()
    assert out[0] == "1796131000.000000 rig kernel: Linux version 6.1.0"   # the real journal
    assert [line.split(" ", 1)[1] for line in out[1:]] == [f"{os.uname().nodename} kernel: {XID}"]
    assert float(out[1].split(" ")[0]) == pytest.approx(now - 10)          # no drift here
    assert "pid=1, old" in tools("journalctl", "-k", "-o", "short-unix")
    assert tools("journalctl", "-k", "-o", "short-unix", "-n", "1").splitlines() == [
        f"{float(out[1].split(' ')[0]):.6f} {os.uname().nodename} kernel: {XID}"]


def test_a_journal_that_keeps_no_kernel_lines_gets_none(tools):
    write_line(tools, time.time() - 10)
    assert tools("journalctl", "-k", "-o", "short-unix", JOURNAL_KEEPS_KERNEL="0") == ""


def test_other_journal_queries_go_to_the_real_tool_alone(tools):
    write_line(tools, time.time() - 10)
    assert XID not in tools("journalctl", "-u", "docker", "-o", "short-unix")
    assert XID not in tools("journalctl", "-k")            # short, not short-unix: real only


@needs_docker
def test_a_fault_in_the_same_second_as_the_read_is_in_the_log():
    name = f"vdf-dmesg-double-test-{uuid.uuid4().hex[:8]}"
    try:
        subprocess.run(
            ["docker", "run", "--name", name, "vdf-target:debian13", "sh", "-c", "exit 134"],
            capture_output=True,
            timeout=60,
        )
        container_id = subprocess.run(
            ["docker", "inspect", "-f", "{{.Id}}", name], capture_output=True, text=True, check=True
        ).stdout.strip()
        log = subprocess.run(
            [sys.executable, DOUBLE, "--time-format=iso"], capture_output=True,
            text=True, timeout=60,
        ).stdout
        raw = subprocess.run(
            [sys.executable, DOUBLE], capture_output=True, text=True, timeout=60,
        ).stdout
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True)
    pid = int(container_id[:4], 16) + 1000
    assert f"NVRM: Xid (PCI:0000:01:00): 31, pid={pid}," in log
    line = [x for x in raw.splitlines() if f"31, pid={pid}," in x]
    assert line and line[0].startswith("["), raw
    # stamped within the last minute on the kernel clock
    now = time.clock_gettime(time.CLOCK_MONOTONIC)
    assert now - 60 < float(line[0][1:].split("]")[0]) <= now, line
