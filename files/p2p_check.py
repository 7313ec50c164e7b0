#!/usr/bin/env python3
"""The GPUs' all-reduce, checked before a rig serves (issue 46, part 2): two RTX 3090s without
NVLink hang in NCCL's start-up, or add up garbage, on boards that grant a peer path they cannot
keep. Run in the serving image (its torch and NCCL), this does what tensor parallelism does at
every layer, two ranks adding up known values, in two arms:

  p2p      NCCL as it chooses (it takes a peer path where the driver offers one);
  no-p2p   NCCL_P2P_DISABLE=1 (through host memory).

Each arm runs at each size (--sizes, bytes of float32) in processes of its own under a hard
timeout (--timeout-s), every element checked. An arm is `healthy` (every size right), `hang`
(the timeout passed), `wrong-data` (a rank saw a wrong element) or `inconclusive` (it could not
run: no GPUs, an import or start-up error; its message kept). The decision takes `p2p` when it
is healthy, else `no-p2p` when that is; when every arm is inconclusive nothing was measured and
P2P stays off (`measured` false); else none: the rig must not serve.

    python3 p2p_check.py [--sizes 4096,16777216] [--timeout-s 60] [--backend nccl]

Prints one JSON object (p2p_result() builds it): {arms: {p2p: {result, seconds, detail},
no-p2p: {...}}, decision: {arm, nccl_p2p_disable, measured, why}}. Exit codes: 0 the rig may
serve (decision.arm set); 1 it must not; 2 bad input. --backend gloo runs the same on CPUs (the
tests here, and rigs served by vLLM's CPU build).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

ARMS = {"p2p": {}, "no-p2p": {"NCCL_P2P_DISABLE": "1"}}
RESULTS = ("healthy", "hang", "wrong-data", "inconclusive")
WORLD = 2


def worker(rank: int, port: int, sizes: list[int], backend: str) -> int:
    """One rank: the all-reduce at each size, every element compared; prints one JSON line.
    Rank r starts from (i % 1024) + r + 1, so every rank must end with 2 (i % 1024) + 3."""
    import torch
    import torch.distributed as dist

    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    wrong = {}
    for size in sizes:
        numel = max(1, size // 4)
        base = torch.arange(numel, dtype=torch.float32) % 1024
        tensor = (base + rank + 1).to(device)
        dist.all_reduce(tensor)
        want = (base * WORLD + WORLD * (WORLD + 1) / 2).to(device)
        wrong[str(size)] = int((tensor != want).sum().item())
    dist.destroy_process_group()
    print(json.dumps({"rank": rank, "wrong": wrong}), flush=True)
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _report(line: str) -> dict:
    """A rank's JSON line ({rank, wrong}), else {}."""
    try:
        found = json.loads(line)
    except ValueError:
        return {}
    return found if isinstance(found, dict) and "wrong" in found else {}


def arm_result(returncodes, outputs, timed_out: bool, sizes) -> tuple[str, str]:
    """(result, detail) of one arm from its ranks' exit codes and output lines."""
    if timed_out:
        return "hang", "the all-reduce did not finish within the timeout"
    reports, failed = [], []
    for rc, text in zip(returncodes, outputs, strict=False):
        found = [line for line in map(_report, str(text or "").splitlines()) if line]
        reports += found
        if rc != 0 or not found:
            last = str(text or "").strip().splitlines()
            failed.append(last[-1] if last else f"exit code {rc}")
    if failed or len(reports) != WORLD:
        return "inconclusive", " | ".join(failed)[:500]
    bad = {size: n for report in reports for size, n in report["wrong"].items() if n}
    if bad:
        return "wrong-data", "wrong elements by size (bytes): " + ", ".join(
            f"{size}: {n}" for size, n in sorted(bad.items(), key=lambda kv: int(kv[0])))
    return "healthy", f"every element right at {', '.join(str(s) for s in sizes)} bytes"


def run_arm(arm: str, sizes, timeout_s: float, backend: str, env=None) -> dict:
    """One arm: two ranks in processes of their own session, killed whole at the timeout."""
    env = {k: v for k, v in (os.environ if env is None else env).items()
           if k != "NCCL_P2P_DISABLE"} | ARMS[arm]
    port = free_port()
    argv = [sys.executable, os.path.abspath(__file__), "--worker", "--port", str(port),
            "--sizes", ",".join(map(str, sizes)), "--backend", backend]
    started = time.monotonic()
    ranks = [subprocess.Popen([*argv, "--rank", str(rank)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for rank in range(WORLD)]
    outputs, timed_out = [], False
    for process in ranks:
        left = max(0.1, timeout_s - (time.monotonic() - started))
        try:
            outputs.append(process.communicate(timeout=left)[0])
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for process in ranks:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        outputs = [p.communicate()[0] for p in ranks]
    result, detail = arm_result([p.returncode for p in ranks], outputs, timed_out, sizes)
    return {"result": result, "seconds": round(time.monotonic() - started, 2), "detail": detail}


def decision(arms: dict) -> dict:
    """The NCCL setting the rig serves with: `p2p` when healthy, else `no-p2p` when healthy.
    When neither is and either hung or added up wrong, none (arm ""): the rig must not serve.
    When no arm could run at all (every one inconclusive: no GPUs, no torch in the image),
    nothing was measured: P2P stays off, the rule without a check (`measured` false)."""
    results = {name: arm.get("result") for name, arm in arms.items()}
    if results.get("p2p") == "healthy":
        return {"arm": "p2p", "nccl_p2p_disable": False, "measured": True,
                "why": "the all-reduce is right with NCCL's own choice of path"}
    if results.get("no-p2p") == "healthy":
        return {"arm": "no-p2p", "nccl_p2p_disable": True, "measured": True,
                "why": f"with a peer path the all-reduce was {results.get('p2p') or 'not run'}; "
                       "through host memory it is right"}
    said = "; ".join(f"{name} {result}" for name, result in results.items())
    if results and set(results.values()) == {"inconclusive"}:
        return {"arm": "no-p2p", "nccl_p2p_disable": True, "measured": False,
                "why": f"the check could not run ({said}): P2P stays off, as without a check"}
    return {"arm": "", "nccl_p2p_disable": True, "measured": True,
            "why": f"no arm gives a right all-reduce: {said}"}


def p2p_result(arms: dict) -> dict:
    """The one object this prints: each arm's result and the decision."""
    return {"arms": arms, "decision": decision(arms)}


def parse_sizes(text: str) -> list[int]:
    sizes = [int(part) for part in str(text).split(",") if part.strip()]
    if not sizes or any(size < 4 for size in sizes):
        raise ValueError(f"--sizes {text!r}: bytes, 4 or more each, comma-separated")
    return sizes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,16777216")
    parser.add_argument("--timeout-s", type=float, default=60.0)
    parser.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    try:
        args = parser.parse_args(argv)
        sizes = parse_sizes(args.sizes)
        if args.timeout_s <= 0:
            raise ValueError("--timeout-s must be above 0")
    except SystemExit as exc:
        return 2 if exc.code else 0
    except ValueError as exc:
        sys.stderr.write(f"p2p_check: {exc}\n")
        return 2
    if args.worker:
        return worker(args.rank, args.port, sizes, args.backend)
    arms = {arm: run_arm(arm, sizes, args.timeout_s, args.backend) for arm in ARMS}
    result = p2p_result(arms)
    print(json.dumps(result, indent=2))
    return 0 if result["decision"]["arm"] else 1


if __name__ == "__main__":
    sys.exit(main())
