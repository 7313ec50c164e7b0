"""files/p2p_check.py (issue 46, part 2): the all-reduce a TP=2 engine does at every layer, two
ranks of the real torch (its CPU build here, backend gloo; NCCL on GPUs in the serving image),
in two arms, every element checked, under a hard timeout. A peer path that hangs or adds up
garbage comes from a double (tests/doubles/nccl_fault: torch's all_reduce made to hang or to
be off by one while NCCL_P2P_DISABLE is not 1); this machine has no GPU, so NCCL itself cannot
start here: inconclusive, said as that."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "files/p2p_check.py"
FAULT = ROOT / "tests/doubles/nccl_fault"
SIZES = "4096,16777216"    # a small message and 16 MiB, as the issue asks

torch = pytest.importorskip("torch")


def check(*args, fault="", timeout_s=30, backend="gloo", both=False):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "VDF_P2P"))}
    if fault:
        env.update(VDF_P2P_FAULT=fault, PYTHONPATH=str(FAULT))
    if both:
        env.update(VDF_P2P_FAULT_BOTH="1")
    done = subprocess.run([sys.executable, str(SCRIPT), "--sizes", SIZES, "--timeout-s",
                           str(timeout_s), "--backend", backend, *args], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    return done.returncode, (json.loads(done.stdout) if done.stdout.strip() else {}), done


def test_a_right_all_reduce_in_both_arms_serves_with_nccl_s_own_choice():
    rc, found, done = check()
    assert rc == 0, done.stderr
    assert {arm: found["arms"][arm]["result"] for arm in ("p2p", "no-p2p")} == {
        "p2p": "healthy", "no-p2p": "healthy"}, found
    assert found["decision"] == {"arm": "p2p", "nccl_p2p_disable": False, "measured": True,
                                 "why": "the all-reduce is right with NCCL's own choice of path"}
    print(f"p2p check, gloo on CPUs: {found['arms']['p2p']['seconds']} s and "
          f"{found['arms']['no-p2p']['seconds']} s")


def test_a_peer_path_that_hangs_is_killed_at_the_timeout_and_p2p_turned_off():
    rc, found, done = check(fault="hang", timeout_s=15)
    assert rc == 0, done.stderr
    arms = found["arms"]
    assert arms["p2p"]["result"] == "hang" and arms["no-p2p"]["result"] == "healthy", found
    assert 15 <= arms["p2p"]["seconds"] < 25
    assert found["decision"]["nccl_p2p_disable"] is True
    assert found["decision"]["why"].startswith("with a peer path the all-reduce was hang")


def test_a_peer_path_that_adds_up_garbage_is_wrong_data_and_p2p_turned_off():
    rc, found, done = check(fault="wrong")
    assert rc == 0, done.stderr
    assert found["arms"]["p2p"]["result"] == "wrong-data", found
    assert "4096: 1024, 16777216: 4194304" in found["arms"]["p2p"]["detail"]
    assert found["decision"]["arm"] == "no-p2p"


def test_without_gpus_nccl_cannot_start_inconclusive_and_p2p_stays_off_unmeasured():
    rc, found, _ = check(backend="nccl", timeout_s=60)
    assert rc == 0
    assert {a["result"] for a in found["arms"].values()} == {"inconclusive"}, found
    assert found["decision"]["arm"] == "no-p2p" and found["decision"]["measured"] is False
    assert found["decision"]["nccl_p2p_disable"] is True
    assert found["decision"]["why"].startswith("the check could not run (p2p inconclusive")


def test_a_fault_in_both_arms_means_the_rig_must_not_serve():
    rc, found, _ = check(fault="wrong", both=True)
    assert rc == 1
    assert {a["result"] for a in found["arms"].values()} == {"wrong-data"}, found
    assert found["decision"] == {
        "arm": "", "nccl_p2p_disable": True, "measured": True,
        "why": "no arm gives a right all-reduce: p2p wrong-data; no-p2p wrong-data"}
    load = {}
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), load)    # noqa: S102 (our file)
    decided = load["decision"]({"p2p": {"result": "hang"}, "no-p2p": {"result": "wrong-data"}})
    assert decided == {"arm": "", "nccl_p2p_disable": True, "measured": True,
                       "why": "no arm gives a right all-reduce: p2p hang; no-p2p wrong-data"}
    mixed = load["decision"]({"p2p": {"result": "hang"}, "no-p2p": {"result": "inconclusive"}})
    assert mixed["arm"] == "" and mixed["measured"] is True


@pytest.mark.parametrize("args", [["--sizes", "0"], ["--sizes", "x"], ["--timeout-s", "0"]])
def test_bad_input_is_refused_before_anything_runs(args):
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 2 and "p2p_check:" in done.stderr, done.stderr


def test_an_arm_s_result_is_read_from_its_ranks():
    load = {}
    exec(compile(SCRIPT.read_text(), str(SCRIPT), "exec"), load)    # noqa: S102 (our file)
    arm_result = load["arm_result"]
    ok = json.dumps({"rank": 0, "wrong": {"4096": 0}})
    assert arm_result([0, 0], [ok, ok], False, [4096])[0] == "healthy"
    assert arm_result([0, 0], [ok, ok], True, [4096])[0] == "hang"
    assert arm_result([0, 1], [ok, "Traceback ...\nRuntimeError: NCCL error"], False, [4096]) == (
        "inconclusive", "RuntimeError: NCCL error")
    bad = json.dumps({"rank": 1, "wrong": {"4096": 3}})
    assert arm_result([0, 0], [ok, bad], False, [4096]) == (
        "wrong-data", "wrong elements by size (bytes): 4096: 3")
