#!/usr/bin/env python3
"""The bench half of files/race_check.py: how much an unpinned plan buffer costs, timed against
the pinned one, on a GPU that serves nothing (bench/race/run_on_gpu.sh).

    python3 race_check.py --allow-pinned --bench [--bench-batches 1,4,32] ...

race_check.py runs it: the parent (bench_report) starts one child (`race_check.py
--bench-child SPEC`, which calls bench_main here) and reads its BENCH line. Both need
--allow-pinned: the pinned buffer provokes the race on purpose. A rig never loads this file
(the release does not hold it; --bench is refused there before anything runs).
Standard library only at import time: torch is imported by race_check's _Env in the child.
"""

from __future__ import annotations

import random
import time
from typing import Any, Dict, Sequence

from race_check import (
    EXIT_OK,
    EXIT_UNAVAILABLE,
    MODES,
    CheckUnavailable,
    _Child,
    _emit,
    _Env,
    _fatal_payload,
    describe_exit,
    page_tables,
)

# --------------------------------------------------------------------------------------------
# Child side
# --------------------------------------------------------------------------------------------



def stats(samples: Sequence[float]) -> Dict[str, float]:
    s = sorted(samples)
    if not s:
        return {"n": 0}

    def q(p: float) -> float:
        k = (len(s) - 1) * p
        lo = int(k)
        hi = min(lo + 1, len(s) - 1)
        return s[lo] + (s[hi] - s[lo]) * (k - lo)

    return {"n": len(s), "median": q(0.5), "p10": q(0.1), "p90": q(0.9),
            "min": s[0], "max": s[-1]}


def bench_main(spec: Dict[str, Any]) -> int:
    """Per-step host and GPU time, pinned against as installed, interleaved in one process.

    Steps: plan; plan+run; 4 x plan+run (the MTP drafter's pattern, same schedule each time so
    the pinned buffer cannot be overwritten with different bytes); plan on a busy stream (host
    time: does plan() wait for the stream?). Times in microseconds.
    """
    if not spec.get("allow_pinned"):
        _emit("FATAL", {"reason": "refused: the bench runs a pinned buffer; needs --allow-pinned",
                        "kind": "refused"})
        return EXIT_UNAVAILABLE
    try:
        env = _Env(spec["geometry"], allow_pinned=True)
    except Exception as exc:
        _emit("FATAL", _fatal_payload(exc))
        return EXIT_UNAVAILABLE
    torch, g = env.torch, env.g
    wrappers = {mode: env.wrapper(mode) for mode in MODES}
    repeats, warmup = int(spec["repeats"]), int(spec["warmup"])
    out: Dict[str, Any] = {}
    for batch in spec["batches"]:
        rng = random.Random(f"bench:{batch}")  # noqa: S311 (test inputs)
        lens = [rng.randint(g["min_len"], g["max_len"]) for _ in range(batch)]
        table, _, n = page_tables(lens, [], g["page_size"], False, rng)
        cache = env.kv_cache(n, torch.Generator(device=env.device))
        q = torch.randn((batch, g["num_qo_heads"], g["head_dim"]), dtype=env.dtype,
                        device=env.device)

        def plan_only(w, table=table):
            env.plan(w, table)

        def plan_run(w, table=table, q=q, cache=cache):
            env.plan(w, table)
            w.run(q, cache)

        def mtp(w, table=table, q=q, cache=cache):
            for _ in range(4):
                env.plan(w, table)
                w.run(q, cache)

        steps = {"plan": plan_only, "plan+run": plan_run, "4x(plan+run)": mtp}
        res: Dict[str, Any] = {}
        for step, fn in steps.items():
            samples = {m: {"host_us": [], "gpu_us": []} for m in MODES}
            for i in range(warmup + repeats):
                order = MODES if i % 2 == 0 else tuple(reversed(MODES))
                for mode in order:
                    w = wrappers[mode]
                    torch.cuda.synchronize()
                    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
                    t0 = time.perf_counter()
                    start.record()
                    fn(w)
                    t1 = time.perf_counter()
                    end.record()
                    end.synchronize()
                    if i >= warmup:
                        samples[mode]["host_us"].append((t1 - t0) * 1e6)
                        samples[mode]["gpu_us"].append(start.elapsed_time(end) * 1e3)
            res[step] = {m: {k: stats(v) for k, v in samples[m].items()} for m in MODES}
        # plan() while the stream is busy (~1 ms of _sleep queued): host time only
        busy = {m: [] for m in MODES}
        for i in range(warmup + repeats):
            order = MODES if i % 2 == 0 else tuple(reversed(MODES))
            for mode in order:
                torch.cuda.synchronize()
                torch.cuda._sleep(int(spec["busy_cycles"]))
                t0 = time.perf_counter()
                env.plan(wrappers[mode], table)
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                if i >= warmup:
                    busy[mode].append((t1 - t0) * 1e6)
        res["plan (busy stream)"] = {m: {"host_us": stats(busy[m])} for m in MODES}
        for step in res.values():
            for kind in ("host_us", "gpu_us"):
                if kind in step["pinned"] and step["pinned"][kind].get("median"):
                    step.setdefault("ratio_installed_over_pinned", {})[kind] = (
                        step["installed"][kind]["median"] / step["pinned"][kind]["median"])
        out[str(batch)] = res
    _emit("BENCH", out)
    return EXIT_OK


def bench_summary(bench: Dict[str, Any]) -> str:
    """One phrase: median ratios as installed / pinned of the MTP step, per batch."""
    parts = []
    for batch, res in bench.get("batches", {}).items():
        r = res.get("4x(plan+run)", {}).get("ratio_installed_over_pinned", {})
        if "gpu_us" in r and "host_us" in r:
            parts.append(f"b{batch} gpu {r['gpu_us']:.3f} host {r['host_us']:.3f}")
    if not parts:
        return ""
    return "bench 4x(plan+run) as installed / pinned: " + ", ".join(parts)


# --------------------------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------------------------


def bench_report(args, base: Dict[str, Any], env: Dict[str, str], self_argv) -> Dict[str, Any]:
    """The report's "bench" section: the child's timings and their summary, or the error that
    stopped it. self_argv(flag, spec) is race_check's argv for one of its children."""
    spec = dict(base, batches=args.bench_batches, repeats=args.bench_repeats,
                warmup=args.bench_warmup, busy_cycles=args.busy_cycles)
    try:
        batches = run_bench(self_argv("--bench-child", spec), args.bench_timeout, env)
    except CheckUnavailable as exc:
        return {"error": str(exc)}
    bench = {"batches": batches, "repeats": args.bench_repeats, "warmup": args.bench_warmup}
    bench["summary"] = bench_summary(bench)
    return bench


def run_bench(argv: Sequence[str], timeout: float, env: Dict[str, str]) -> Dict[str, Any]:
    child = _Child(argv, env=env)
    deadline = time.monotonic() + timeout
    while True:
        kind, payload = child.next_event(deadline - time.monotonic())
        if kind == "BENCH":
            child.wait()
            child.stderr_tail()
            return payload
        if kind == "FATAL":
            child.kill()
            child.stderr_tail()
            raise CheckUnavailable((payload or {}).get("reason", "bench failed"))
        if kind in ("timeout", "eof"):
            child.kill()
            code = child.proc.returncode
            raise CheckUnavailable(f"bench {kind} ({describe_exit(code)}): "
                                   + child.stderr_tail())
