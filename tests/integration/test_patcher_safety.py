"""Crash safety (SIGKILL at each step of a run, stopped there by the patcher's own test hook) and
concurrent runs on one tree."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flashinfer_releases import PATCHER, load_patcher, release_tree

VERSION = "0.7.2.post1"
# Each step a run goes through, where FI_PINQ_TEST_STOP_AT stops it for the kill: what decode.py
# must then hold, and whether the run's temporary file is left (the next writer removes it).
STEPS = [
    ("start", "original", False),      # the interpreter up, nothing read
    ("parsed", "original", False),     # decode.py read and classified, no lock yet
    ("locked", "original", False),     # the tree lock held, before the second read
    ("write", "original", True),       # the new file half written to its temporary file
    ("rename", "original", True),      # the new file complete and checked, not renamed
    ("renamed", "patched", False),     # renamed over decode.py, the folder not yet fsynced
]


@pytest.fixture()
def decode_only(tmp_path):
    """A tree holding just the real decode.py: what the patcher reads and writes by default."""
    lib = tmp_path / "site" / "flashinfer"
    lib.mkdir(parents=True)
    shutil.copyfile(release_tree(VERSION) / "flashinfer" / "decode.py", lib / "decode.py")
    return lib


def start(lib, pause="", stop_at=""):
    env = {**os.environ, "FI_PINQ_TEST_PAUSE": pause, "FI_PINQ_TEST_STOP_AT": stop_at}
    return subprocess.Popen(
        [sys.executable, str(PATCHER), "--lib-root", str(lib), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def wait_stopped(proc, timeout_s=60):
    """Whether proc stopped itself (SIGSTOP: state T in /proc) before it ended or time ran out."""
    stat = Path(f"/proc/{proc.pid}/stat")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "T":
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("step, holds, temp_left", STEPS, ids=[s[0] for s in STEPS])
def test_sigkill_at_each_step_leaves_the_original_or_the_patched_file(decode_only, step, holds,
                                                                     temp_left):
    decode = decode_only / "decode.py"
    original = decode.read_bytes()
    patched = load_patcher().patch_source(original, "decode.py")
    compile(patched, "decode.py", "exec")  # the only two states allowed; both compile
    proc = start(decode_only, stop_at=step)
    try:
        assert wait_stopped(proc), f"the run never reached {step!r}: {proc.communicate()}"
    finally:
        proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert decode.read_bytes() == {"original": original, "patched": patched}[holds]
    temps = [p.name for p in decode_only.iterdir() if p.name.startswith(".fi-pinq-")]
    assert bool(temps) == temp_left, temps
    # The next run finishes the job and removes what the killed one left, under the lock.
    assert start(decode_only).wait(timeout=60) == 0
    assert sorted(p.name for p in decode_only.iterdir()) == [".fi-pinq.lock", "decode.py"]
    assert decode.read_bytes() == patched


def test_eight_concurrent_runs_one_writer(decode_only):
    decode = decode_only / "decode.py"
    original = decode.read_bytes()
    procs = [start(decode_only, pause="0.05") for _ in range(8)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out)["status"])
    assert sorted(results) == ["already-patched"] * 7 + ["patched"], results
    assert decode.read_bytes() == load_patcher().patch_source(original, "decode.py")
