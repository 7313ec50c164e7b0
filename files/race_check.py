#!/usr/bin/env python3
"""Reproduce FlashInfer's plan()/copy race (vllm#40756) on a GPU and say whether it is closed.

FlashInfer's decode wrapper writes its schedule into one page-locked host buffer
(`_pin_memory_int_workspace_buffer`) and copies it to the GPU with an unguarded
`cudaMemcpyAsync`. When the stream is busy, a second plan() overwrites that buffer before the
first copy ran, and the first run() executes with the second schedule: wrong output, hangs or
an illegal memory access (Xid 31). files/patcher.py unpins the buffer; this check shows whether
the FlashInfer that is installed still has the race.

Each trial, in a Qwen-like per-rank decode geometry (12 query heads, 2 KV heads, head_dim 256,
page 16, bf16, NHD, split-KV): run plan A + run A alone as the reference, then stall the stream
(torch.cuda._sleep), plan A, run A, plan B, run B, synchronise, and compare A's output
bit-exactly with A alone, and A alone with a float32 PyTorch reference. Scenarios: a batch of 4
then 8, 32 then 1, and the same batch with every length +1 (the next MTP step). The wrapper is
built and planned the way vLLM's FlashInfer backend does it (tensor-core decode, see
decode_wrapper_kwargs and plan_kwargs).

Trials run in child processes with a hang timeout: an illegal memory access or a hang costs
the trial in flight (counted as crashed or hung) and the child is replaced for the rest.

Two uses, kept apart:

  rig (the default; the canary runs this inside the serving container, next to the engine):
    python3 race_check.py --patcher /path/to/patcher.py [--trials N] [--jobs 1]
  Runs only the installed FlashInfer's trials, and only when its plan buffer is NOT pinned (the
  patched files): trials on a pinned buffer provoke the race on purpose, and on a real GPU they
  end in illegal memory accesses that the driver logs as Xid 31. A pinned installed buffer is
  refused (exit 2) before any plan() runs.

  bench (a GPU that serves nothing: the lent test machine, bench/race/run_on_gpu.sh):
    python3 race_check.py --allow-pinned --compare [--bench] [--cuda-cores] ...
  --compare also runs every trial with a pinned buffer swapped in, in memory, after the wrapper
  is built (the installed files are not touched): "pinned: X of N bad; as installed: Y of N bad".
  --bench times plan, plan+run and 4 x plan+run at batch 1, 4 and 32, pinned against as installed.
  Both need --allow-pinned (without it they are refused, exit 2), as do trials on an unpatched
  FlashInfer: the flag says "this GPU may fault; it serves nothing".

GPU memory: one child at a time by default (--jobs 1), about 1.1 GiB each: its CUDA context
(about 620 MiB on an H200 with torch 2.11 and CUDA 13) plus at most 510 MiB that torch reserved
(measured, bench/results/race-rig-*.json) against memory_estimate_mib()'s 629 MiB for the
default geometry. The probe refuses to start when less than that estimate is free after its
own context.
An out-of-memory error (torch.cuda.OutOfMemoryError, "CUDA out of memory",
cudaErrorMemoryAllocation) in the probe or in a trial means the check could not run (exit 2,
"could not run: out of GPU memory ..."), never a bad trial: next to an engine that holds 90 %
of the card that is a fact about the room left, not about the race.

Output: progress on stderr; the last stdout line is the one-line summary (ending "-> OK",
"-> RACE" or "could not run: ..."); --json prints the report instead and the summary on stderr.

Exit codes: 0 the installed FlashInfer had no bad trial; 1 bad trials (wrong, crashed or hung);
2 the check could not run or was refused (no GPU, torch or FlashInfer missing, kernels not
buildable, out of GPU memory, a pinned buffer without --allow-pinned).

Standard library only at import time: torch and flashinfer are imported in the children.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import random
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Sequence

EXIT_OK = 0
EXIT_BAD = 1
EXIT_UNAVAILABLE = 2

MARK = "@@race "  # prefix of the protocol lines a child prints on stdout
OUTCOMES = ("ok", "wrong", "crashed", "hung")
MODES = ("installed", "pinned")

DEFAULT_GEOMETRY: Dict[str, Any] = {
    "num_qo_heads": 12,
    "num_kv_heads": 2,
    "head_dim": 256,
    "page_size": 16,
    "dtype": "bfloat16",
    "kv_layout": "NHD",
    "min_len": 512,
    "max_len": 4096,
    "stall_cycles": 20_000_000,
    "workspace_mib": 128,
    "tolerance": 0.05,  # A alone against the float32 reference (bf16 output rounding)
    # The decode path vLLM takes (see decode_wrapper_kwargs): True, the tensor-core path (the
    # fa2 batch-prefill kernel planned by the decode wrapper). False, the CUDA-core decode
    # kernel, is a bench-only comparison: FlashInfer 0.6 has it for GQA groups 1-4 and 8 only,
    # so it cannot run this group of 6 ("Unsupported group_size: 6").
    "use_tensor_cores": True,
}

# name -> (batch of plan A, batch of plan B, B is A's batch with every length + 1)
SCENARIOS: Dict[str, Dict[str, Any]] = {
    "batch4-then-8": {"batch_a": 4, "batch_b": 8, "next_step": False},
    "batch32-then-1": {"batch_a": 32, "batch_b": 1, "next_step": False},
    "mtp-next-step": {"batch_a": 4, "batch_b": 4, "next_step": True},
}


class CheckUnavailable(Exception):
    """The check could not run here, or was refused (exit 2).

    kind: None (could not run), "out-of-memory" or "refused" (a pinned buffer on a GPU that may
    serve, or bench-only flags without --allow-pinned).
    """

    def __init__(self, message: str, kind: str | None = None):
        super().__init__(message)
        self.kind = kind


# --------------------------------------------------------------------------------------------
# The decode path vLLM uses for this geometry.
#
# vllm/v1/attention/backends/flashinfer.py, 0.27.1 and 0.33.0 alike: the metadata builder's
# _get_decode_wrapper() builds BatchDecodeWithPagedKVCacheWrapper(workspace, layout,
# use_cuda_graph=..., paged_kv_*_buffer=..., use_tensor_cores=True, backend=...). The
# tensor-core flag is no longer chosen from the GQA group size (older vLLM took it for groups
# above 4, or from an environment variable): it is always True ("at least as good as cuda
# cores ... in latest gpus"), so the 12/2 group of 6 runs FlashInfer's fa2 prefill kernel.
# backend: 0.27.1 passes "auto" (nvfp4 KV: "trtllm-gen"); 0.33.0 passes "fa2" below SM90
# (_use_fa2_native_decode, so an RTX 3090) and "auto" otherwise; FlashInfer's "auto" picks
# fa2 for a bf16 query and cache in both 0.6.16.post3 and 0.7.2.post1, so both give fa2 here.
# (XQA/trtllm-gen decode, used instead of the wrapper on SM90 with NVIDIA's cubins and on
# SM100, never runs on the rigs' SM86.) fast_plan_decode() then calls wrapper.plan() with
# pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q/kv/o data types,
# sm_scale (1/sqrt(head_dim) for Qwen), non_blocking=True, fixed_split_size=-1 and
# disable_split_kv=False (batch-invariant mode aside); 0.33.0 also passes seq_lens (the same
# KV lengths plan() derives from the page table otherwise) and q_len_per_req (1 for a drafter
# step). Not mirrored: CUDA-graph wrappers (fixed batch size; same plan buffer), and the
# rig's fp8 KV cache (a different kernel instance; the race is in the host buffer, not in it).
# --------------------------------------------------------------------------------------------


def decode_wrapper_kwargs(geometry: Dict[str, Any], capability: Sequence[int] = (8, 6)
                          ) -> Dict[str, Any]:
    """Keyword arguments of BatchDecodeWithPagedKVCacheWrapper after (workspace, layout)."""
    if not geometry.get("use_tensor_cores", True):
        return {"use_tensor_cores": False}  # bench comparison: the CUDA-core decode kernel
    backend = "fa2" if tuple(capability) < (9, 0) else "auto"
    return {"use_tensor_cores": True, "backend": backend}


def plan_kwargs(geometry: Dict[str, Any]) -> Dict[str, Any]:
    """Keyword arguments of wrapper.plan() after the page table and the five sizes, as vLLM
    passes them (data types by name; the child turns them into torch dtypes)."""
    kwargs: Dict[str, Any] = {
        "pos_encoding_mode": "NONE", "window_left": -1, "logits_soft_cap": None,
        "q_data_type": geometry["dtype"], "kv_data_type": geometry["dtype"],
        "o_data_type": geometry["dtype"], "sm_scale": float(geometry["head_dim"]) ** -0.5,
        "non_blocking": True, "disable_split_kv": False,
    }
    if geometry.get("use_tensor_cores", True):
        kwargs["fixed_split_size"] = -1  # FlashInfer refuses it on the CUDA-core path
    return kwargs


def decode_path_name(geometry: Dict[str, Any]) -> str:
    return ("tensor-core (fa2, as vLLM)" if geometry.get("use_tensor_cores", True)
            else "CUDA-core (bench)")


# --------------------------------------------------------------------------------------------
# Out-of-memory and GPU memory needed
# --------------------------------------------------------------------------------------------

OOM_MARKERS = ("outofmemoryerror", "out of memory", "cudaerrormemoryallocation",
               "cuda_error_out_of_memory")


def is_out_of_memory(text: str | BaseException) -> bool:
    """True for torch.cuda.OutOfMemoryError, "CUDA out of memory", cudaErrorMemoryAllocation."""
    if isinstance(text, BaseException):
        text = f"{type(text).__name__}: {text}"
    low = str(text).lower()
    return any(m in low for m in OOM_MARKERS)


def oom_message(reason: str) -> str:
    reason = " ".join(str(reason).split())
    if reason.startswith("out of GPU memory"):
        return reason
    # torch appends a pointer to the error table and a note on asynchronous reports: cut them
    for tail in (" Search for `cudaError", " CUDA kernel errors might be asynchronously"):
        if tail in reason:
            reason = reason[:reason.index(tail)].rstrip()
    return ("out of GPU memory (the serving engine holds the rest; see memory_estimate_mib): "
            + reason[:300])


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}
INT_WORKSPACE_MIB = 8  # FlashInfer's int workspace on the GPU (and its host twin)


def max_pages(geometry: Dict[str, Any], scenarios: Iterable[str]) -> int:
    """KV-cache pages the largest trial of these scenarios can need."""
    page = int(geometry["page_size"])
    per_req = -(-int(geometry["max_len"]) // page) + 1  # +1: a next-step length crossing a page
    most = 1
    for name in scenarios:
        spec = SCENARIOS[name]
        reqs = spec["batch_a"] if spec["next_step"] else spec["batch_a"] + spec["batch_b"]
        most = max(most, reqs * per_req)
    return most


def memory_estimate_mib(geometry: Dict[str, Any], scenarios: Iterable[str]) -> int:
    """GPU memory one child allocates (beyond its CUDA context), in MiB, with some slack."""
    scenarios = list(scenarios)
    g = geometry
    elt = DTYPE_BYTES.get(str(g["dtype"]), 2)
    page_bytes = 2 * int(g["page_size"]) * int(g["num_kv_heads"]) * int(g["head_dim"]) * elt
    cache = max_pages(g, scenarios) * page_bytes
    # The float32 reference of the longest request: its pages as float, K and V per KV head,
    # scores and probabilities; queries and outputs of the largest batch (a few per trial).
    longest = int(g["max_len"]) + int(g["page_size"])
    ref = (longest * 2 * int(g["num_kv_heads"]) * int(g["head_dim"]) * 4 * 3
           + longest * int(g["num_qo_heads"]) * 4 * 3)
    batch = max([1] + [max(SCENARIOS[s]["batch_a"], SCENARIOS[s]["batch_b"]) for s in scenarios])
    io = 8 * batch * int(g["num_qo_heads"]) * int(g["head_dim"]) * 4
    total = (int(g["workspace_mib"]) + INT_WORKSPACE_MIB) * (1 << 20) + cache + ref + io
    return int(total * 1.25 / (1 << 20)) + 64  # allocator rounding and kernels' own scratch


# --------------------------------------------------------------------------------------------
# Trial inputs: pure Python, deterministic per (seed, scenario, trial), shared by both modes.
# --------------------------------------------------------------------------------------------


def trial_lengths(seed: int, scenario: str, trial: int, geometry: Dict[str, Any]):
    """KV lengths of plan A and plan B for one trial."""
    spec = SCENARIOS[scenario]
    rng = random.Random(f"{seed}:{scenario}:{trial}")  # noqa: S311 (test inputs)
    lo, hi = int(geometry["min_len"]), int(geometry["max_len"])
    lens_a = [rng.randint(lo, hi) for _ in range(spec["batch_a"])]
    if spec["next_step"]:
        lens_b = [n + 1 for n in lens_a]
    else:
        lens_b = [rng.randint(lo, hi) for _ in range(spec["batch_b"])]
    return lens_a, lens_b


def page_tables(lens_a: Sequence[int], lens_b: Sequence[int], page_size: int, next_step: bool,
                rng: random.Random):
    """CSR page tables (indptr, indices, last_page_len) for A and B over one shuffled pool.

    In the next-step scenario B continues A's requests on A's pages (one more page where the
    extra token crosses a page boundary); otherwise B's requests have pages of their own.
    """
    def pages(n: int) -> int:
        return (n + page_size - 1) // page_size

    if next_step:
        per_req = [pages(max(a, b)) for a, b in zip(lens_a, lens_b)]
        total = sum(per_req)
    else:
        total = sum(pages(n) for n in lens_a) + sum(pages(n) for n in lens_b)
    pool = list(range(total))
    rng.shuffle(pool)

    def table(lens: Sequence[int], owned: List[List[int]]):
        indptr, indices, last = [0], [], []
        for n, own in zip(lens, owned):
            use = own[: pages(n)]
            indices.extend(use)
            indptr.append(len(indices))
            last.append(n - (pages(n) - 1) * page_size)
        return indptr, indices, last

    cursor = 0

    def take(count: int) -> List[int]:
        nonlocal cursor
        out = pool[cursor: cursor + count]
        cursor += count
        return out

    if next_step:
        owned = [take(c) for c in per_req]
        return table(lens_a, owned), table(lens_b, owned), total
    owned_a = [take(pages(n)) for n in lens_a]
    owned_b = [take(pages(n)) for n in lens_b]
    return table(lens_a, owned_a), table(lens_b, owned_b), total


# --------------------------------------------------------------------------------------------
# Bookkeeping
# --------------------------------------------------------------------------------------------


def new_tally() -> Dict[str, Any]:
    return {"trials": 0, "ok": 0, "wrong": 0, "crashed": 0, "hung": 0, "bad": 0,
            "max_error": 0.0, "nonfinite": 0, "max_seconds_ok": 0.0,
            "peak_reserved_mib": 0.0, "examples": []}


def add_result(tally: Dict[str, Any], result: Dict[str, Any], keep_examples: int = 5) -> None:
    outcome = result.get("outcome")
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    tally["trials"] += 1
    tally[outcome] += 1
    if outcome != "ok":
        tally["bad"] += 1
        if len(tally["examples"]) < keep_examples:
            tally["examples"].append({k: v for k, v in result.items() if k != "outcome"}
                                     | {"outcome": outcome})
    if outcome == "ok" and isinstance(result.get("seconds"), (int, float)):
        tally["max_seconds_ok"] = max(tally["max_seconds_ok"], float(result["seconds"]))
    if isinstance(result.get("peak_reserved_mib"), (int, float)):
        tally["peak_reserved_mib"] = max(tally.get("peak_reserved_mib", 0.0),
                                         float(result["peak_reserved_mib"]))
    err = result.get("max_error")
    if isinstance(err, (int, float)):
        if err != err or err in (float("inf"), float("-inf")):
            tally["nonfinite"] += 1  # NaN/inf output: counted, kept out of max_error (JSON)
        else:
            tally["max_error"] = max(tally["max_error"], float(err))


def merge_tallies(tallies: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    total = new_tally()
    for t in tallies:
        for key in ("trials", "ok", "wrong", "crashed", "hung", "bad", "nonfinite"):
            total[key] += t[key]
        total["max_error"] = max(total["max_error"], t["max_error"])
        total["max_seconds_ok"] = max(total["max_seconds_ok"], t.get("max_seconds_ok", 0.0))
        total["peak_reserved_mib"] = max(total["peak_reserved_mib"],
                                         t.get("peak_reserved_mib", 0.0))
    del total["examples"]
    return total


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


# --------------------------------------------------------------------------------------------
# Running trials in children
# --------------------------------------------------------------------------------------------


class _Child:
    """One child process, its protocol lines read by a thread so waits can time out."""

    def __init__(self, argv: Sequence[str], env: Dict[str, str] | None = None):
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stderr_tail)
        self.proc = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=self.stderr, stdin=subprocess.DEVNULL,
            env=env, start_new_session=True, text=True, errors="replace",
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(MARK):
                self.lines.put(line[len(MARK):].rstrip("\n"))
        self.lines.put(None)

    def next_event(self, timeout: float):
        """(kind, payload) of the next protocol line, ("eof", None) or ("timeout", None)."""
        try:
            line = self.lines.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return "timeout", None
        if line is None:
            return "eof", None
        kind, _, rest = line.partition(" ")
        try:
            payload = json.loads(rest) if rest else None
        except ValueError:
            payload = {"raw": rest}
        return kind, payload

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def stderr_tail(self, limit: int = 600) -> str:
        self.stderr.seek(0)
        data = self.stderr.read().decode("utf-8", "replace").strip()
        self.stderr.close()
        return data[-limit:]


def run_trials(make_argv: Callable[[List[int]], Sequence[str]], trial_ids: Sequence[int], *,
               hang_timeout: float, startup_timeout: float,
               env: Dict[str, str] | None = None, max_fruitless: int = 2,
               on_result: Callable[[Dict[str, Any]], None] | None = None) -> List[Dict]:
    """Run trials in children; a crash or hang costs the trial in flight, never the run.

    make_argv(ids) gives the command of a child that runs those trials in order, printing
    `@@race START {"trial": i}` before and `@@race RESULT {"trial": i, "outcome": ...}` after
    each one (`@@race FATAL {"reason": ..., "kind": ...}` when it cannot run at all). A child
    that dies or stops answering is replaced by one for the trials not yet done. Raises
    CheckUnavailable when children keep failing before any trial starts, and on an
    out-of-memory error (a FATAL, a crashed RESULT or a dead child's stderr saying so): that
    is the room left beside the engine, not a bad trial.
    """
    pending = list(trial_ids)
    results: List[Dict[str, Any]] = []
    fruitless = 0

    def record(result: Dict[str, Any]) -> None:
        results.append(result)
        if result["trial"] in pending:
            pending.remove(result["trial"])
        if on_result is not None:
            on_result(result)

    while pending:
        child = _Child(make_argv(list(pending)), env=env)
        inflight: int | None = None
        started_at = trial_start = time.monotonic()
        deadline = started_at + startup_timeout
        progressed = False
        fatal: str | None = None
        fatal_kind: str | None = None
        while True:
            kind, payload = child.next_event(deadline - time.monotonic())
            if kind == "START":
                inflight = int(payload["trial"])
                trial_start = time.monotonic()
                deadline = trial_start + hang_timeout
            elif kind == "RESULT":
                result = dict(payload)
                if result.get("outcome") == "crashed" and is_out_of_memory(
                        str(result.get("reason", ""))):
                    child.kill()
                    child.stderr_tail()
                    raise CheckUnavailable(oom_message(result["reason"]), "out-of-memory")
                result.setdefault("trial", inflight)
                if inflight is not None:
                    result.setdefault("seconds", round(time.monotonic() - trial_start, 4))
                record(result)
                progressed = True
                inflight = None
                deadline = time.monotonic() + hang_timeout
            elif kind == "FATAL":
                fatal = (payload or {}).get("reason", "child reported a fatal error")
                fatal_kind = (payload or {}).get("kind")
                child.kill()
                child.stderr_tail()
                break
            elif kind == "timeout":
                child.kill()
                tail = child.stderr_tail()
                if inflight is not None:
                    record({"trial": inflight, "outcome": "hung",
                            "reason": f"no result within {hang_timeout:g} s; child killed"})
                    progressed = True
                elif not progressed:
                    fatal = (f"child started no trial within {startup_timeout:g} s"
                             + (f": {tail}" if tail else ""))
                break
            elif kind == "eof":
                code = child.wait()
                tail = child.stderr_tail()
                if is_out_of_memory(tail):
                    raise CheckUnavailable(oom_message(tail[-300:]), "out-of-memory")
                if inflight is not None:
                    record({"trial": inflight, "outcome": "crashed",
                            "reason": describe_exit(code) + (f": {tail[-300:]}" if tail else "")})
                    progressed = True
                elif pending and not progressed:
                    fatal = (f"child ended ({describe_exit(code)}) before any trial"
                             + (f": {tail}" if tail else ""))
                break
            # other kinds (INFO, ...) are ignored here
        if fatal is not None:
            if fatal_kind is None and is_out_of_memory(fatal):
                fatal_kind = "out-of-memory"
            if fatal_kind == "out-of-memory":
                fatal = oom_message(fatal)
            raise CheckUnavailable(fatal, fatal_kind)
        fruitless = 0 if progressed else fruitless + 1
        if fruitless >= max_fruitless:
            raise CheckUnavailable("children keep ending without running a trial")
    return results


def run_probe(argv: Sequence[str], timeout: float, env: Dict[str, str] | None = None):
    """Run a child that prints `@@race INFO {...}` (or FATAL); return the INFO payload."""
    child = _Child(argv, env=env)
    deadline = time.monotonic() + timeout
    info = None
    while True:
        kind, payload = child.next_event(deadline - time.monotonic())
        if kind == "INFO":
            info = payload
        elif kind == "FATAL":
            child.kill()
            child.stderr_tail()
            reason = (payload or {}).get("reason", "probe failed")
            fatal_kind = (payload or {}).get("kind")
            if fatal_kind == "out-of-memory" or (fatal_kind is None
                                                 and is_out_of_memory(reason)):
                raise CheckUnavailable(oom_message(reason), "out-of-memory")
            raise CheckUnavailable(reason, fatal_kind)
        elif kind == "timeout":
            child.kill()
            raise CheckUnavailable(f"probe did not finish within {timeout:g} s: "
                                   + child.stderr_tail())
        elif kind == "eof":
            code = child.wait()
            tail = child.stderr_tail()
            if info is None or code != 0:
                if is_out_of_memory(tail):
                    raise CheckUnavailable(oom_message(tail[-300:]), "out-of-memory")
                raise CheckUnavailable(f"probe {describe_exit(code)}: {tail}")
            return info


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def exit_code_for(report: Dict[str, Any]) -> int:
    if report.get("unavailable"):
        return EXIT_UNAVAILABLE
    installed = report.get("totals", {}).get("installed")
    if installed is None:
        return EXIT_OK if report.get("bench") else EXIT_UNAVAILABLE
    return EXIT_OK if installed["bad"] == 0 else EXIT_BAD


def _fmt_tally(t: Dict[str, Any]) -> str:
    return (f"{t['bad']} of {t['trials']} bad ({t['wrong']} wrong, {t['crashed']} crashed, "
            f"{t['hung']} hung, max err {t['max_error']:.3g})")


def summary_line(report: Dict[str, Any]) -> str:
    path = decode_path_name(report.get("geometry", DEFAULT_GEOMETRY))
    head = (f"race_check: FlashInfer {report.get('flashinfer_version', '?')} {path} decode "
            f"(patch: {report.get('patch', {}).get('status', 'unknown')}) "
            f"on {report.get('gpu', '?')} (driver {report.get('driver', '?')})")
    if report.get("unavailable"):
        return f"{head}: could not run: {report['unavailable']}"
    parts = []
    totals = report.get("totals", {})
    if "pinned" in totals:
        parts.append("pinned: " + _fmt_tally(totals["pinned"]))
    if "installed" in totals:
        parts.append("as installed: " + _fmt_tally(totals["installed"]))
    bench = report.get("bench")
    if bench and bench.get("summary"):
        parts.append(bench["summary"])
    verdict = {EXIT_OK: "OK", EXIT_BAD: "RACE", EXIT_UNAVAILABLE: "NOT RUN"}[
        exit_code_for(report)]
    return f"{head}: " + "; ".join(parts) + f" -> {verdict}"


def patch_status(patcher: Path | None, lib_root: str | None, timeout: float = 60.0):
    """Ask files/patcher.py (an external command) for the patch status; tolerate its absence."""
    if patcher is None or not patcher.is_file():
        return {"status": "unknown", "reason": f"patcher not found: {patcher}"}
    argv = [sys.executable, str(patcher), "--check", "--json"]
    if lib_root:
        argv += ["--lib-root", lib_root]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"status": "unknown", "reason": f"patcher did not run: {exc}"}
    for line in reversed(proc.stdout.strip().splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            out = {"status": str(data.get("status", "unknown")), "exit": proc.returncode}
            for key in ("flashinfer_version", "lib_root", "files"):
                if key in data:
                    out[key] = data[key]
            return out
    return {"status": "unknown", "exit": proc.returncode,
            "reason": (proc.stderr or proc.stdout).strip()[-300:]}


def gpu_facts() -> Dict[str, str]:
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    first = proc.stdout.strip().splitlines()[:1]
    if proc.returncode != 0 or not first or "," not in first[0]:
        return {}
    name, driver = (s.strip() for s in first[0].split(",", 1))
    return {"gpu": name, "driver": driver}


# --------------------------------------------------------------------------------------------
# Child side (torch and flashinfer from here on)
# --------------------------------------------------------------------------------------------


def _emit(kind: str, payload: Any = None) -> None:
    sys.stdout.write(MARK + kind + ("" if payload is None else " " + json.dumps(payload)) + "\n")
    sys.stdout.flush()


def _is_gpu_fault(exc: BaseException) -> bool:
    text = f"{type(exc).__name__}: {exc}".lower()
    return any(word in text for word in (
        "cuda", "illegal", "acceleratorerror", "launch failure", "misaligned", "device-side",
        "unspecified launch", "ecc error"))


PINNED_REFUSAL = ("refused: the installed FlashInfer's plan buffer is pinned (not patched): its "
                  "trials would provoke the race (illegal memory accesses, Xid 31) on this GPU; "
                  "only with --allow-pinned, on a GPU that serves nothing")


def _fatal_payload(exc: BaseException) -> Dict[str, Any]:
    """FATAL line of a child: the reason and, for out-of-memory or a refusal, its kind."""
    if isinstance(exc, CheckUnavailable):
        return {"reason": str(exc), "kind": exc.kind}
    reason = f"{type(exc).__name__}: {exc}"[:800]
    return {"reason": reason, "kind": "out-of-memory" if is_out_of_memory(exc) else None}


class _Env:
    """torch, flashinfer and the buffers one child reuses across trials."""

    def __init__(self, geometry: Dict[str, Any], allow_pinned: bool = False,
                 pages: int = 4096):
        import torch

        if not torch.cuda.is_available():
            raise CheckUnavailable("torch sees no CUDA GPU")
        import flashinfer

        self.torch = torch
        self.flashinfer = flashinfer
        self.g = geometry
        self.allow_pinned = allow_pinned
        self.dtype = getattr(torch, geometry["dtype"])
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.capability = tuple(torch.cuda.get_device_capability(self.device))
        self.pages = max(int(pages), 1)
        self.cache = None
        # vLLM zeroes its workspace too (FlashInfer: "must be initialized to 0 for its first use")
        self.float_ws = torch.zeros(int(geometry["workspace_mib"]) << 20, dtype=torch.uint8,
                                    device=self.device)

    def wrapper(self, mode: str):
        torch = self.torch
        if mode not in MODES:
            raise ValueError(mode)
        if mode == "pinned" and not self.allow_pinned:
            raise CheckUnavailable("refused: pinned trials provoke the race on purpose; only "
                                   "with --allow-pinned, on a GPU that serves nothing", "refused")
        w = self.flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.float_ws, self.g["kv_layout"], **decode_wrapper_kwargs(self.g, self.capability))
        installed = w._pin_memory_int_workspace_buffer
        if mode == "installed" and installed.is_pinned() and not self.allow_pinned:
            raise CheckUnavailable(PINNED_REFUSAL, "refused")  # before any plan() ran
        if mode == "pinned":
            # In memory only: the same shape and dtype, page-locked, as upstream allocates it.
            w._pin_memory_int_workspace_buffer = torch.empty(
                installed.shape, dtype=installed.dtype, pin_memory=True, device="cpu")
        return w

    def warm(self, w) -> None:
        """Load (or JIT-build) the decode kernels before the first timed trial."""
        table = ([0, 1], [0], [self.g["page_size"]])
        cache = self.kv_cache(1, None)
        q = self.torch.zeros((1, self.g["num_qo_heads"], self.g["head_dim"]), dtype=self.dtype,
                             device=self.device)
        self.plan(w, table)
        w.run(q, cache)
        self.torch.cuda.synchronize()
        self.reference(q, cache, table)  # cuBLAS and friends initialise here, not in a trial
        self.torch.cuda.synchronize()

    def kv_cache(self, num_pages: int, gen):
        """A view of num_pages pages of one cache allocated once (for the largest trial)."""
        torch, g = self.torch, self.g
        shape = (num_pages, 2, g["page_size"], g["num_kv_heads"], g["head_dim"])
        if self.cache is None or self.cache.shape[0] < num_pages:
            self.cache = None  # release the smaller one before allocating the larger
            self.cache = torch.empty((max(num_pages, self.pages),) + shape[1:],
                                     dtype=self.dtype, device=self.device)
        view = self.cache[:num_pages]
        view.normal_(generator=gen)
        return view

    def plan(self, w, table) -> None:
        torch, g = self.torch, self.g
        indptr, indices, last = table
        kwargs = plan_kwargs(g)
        for key in ("q_data_type", "kv_data_type", "o_data_type"):
            kwargs[key] = getattr(torch, kwargs[key])
        w.plan(
            torch.tensor(indptr, dtype=torch.int32),
            torch.tensor(indices, dtype=torch.int32),
            torch.tensor(last, dtype=torch.int32),
            g["num_qo_heads"], g["num_kv_heads"], g["head_dim"], g["page_size"], **kwargs)

    def reference(self, q, cache, table):
        """float32 attention of each request over its pages (GQA, softmax scale 1/sqrt(d)).

        Query head h reads KV head h // group, as FlashInfer does; computed per KV head, so no
        copy of K and V is widened to the query heads (keeps the check's memory small).
        """
        torch, g = self.torch, self.g
        indptr, indices, last = table
        kvh, d = g["num_kv_heads"], g["head_dim"]
        group = g["num_qo_heads"] // kvh
        scale = d ** -0.5
        outs = []
        idx = torch.tensor(indices, dtype=torch.long, device=self.device)
        for i in range(len(last)):
            pages = idx[indptr[i]:indptr[i + 1]]
            n = (len(pages) - 1) * g["page_size"] + last[i]
            kv = cache[pages]  # (pages, 2, page, kv_heads, d)
            k = kv[:, 0].reshape(-1, kvh, d)[:n].float()
            v = kv[:, 1].reshape(-1, kvh, d)[:n].float()
            qi = q[i].float().reshape(kvh, group, d)
            s = torch.einsum("kgd,nkd->kgn", qi, k) * scale
            outs.append(torch.einsum("kgn,nkd->kgd", torch.softmax(s, dim=-1), v)
                        .reshape(g["num_qo_heads"], d))
        return torch.stack(outs)

    def split_kv(self, w) -> bool | None:
        info = getattr(w, "_plan_info", None)
        try:
            return bool(int(list(info)[9]))
        except (TypeError, ValueError, IndexError):
            return None

    def peak_mib(self) -> float:
        return round(self.torch.cuda.max_memory_reserved(self.device) / (1 << 20), 1)

    def device_mib(self) -> Dict[str, float]:
        free, total = self.torch.cuda.mem_get_info(self.device)
        return {"free": round(free / (1 << 20), 1), "total": round(total / (1 << 20), 1)}


def _trial(env: _Env, w, seed: int, scenario: str, trial: int) -> Dict[str, Any]:
    torch, g = env.torch, env.g
    spec = SCENARIOS[scenario]
    lens_a, lens_b = trial_lengths(seed, scenario, trial, g)
    rng = random.Random(f"{seed}:{scenario}:{trial}:pages")  # noqa: S311 (test inputs)
    table_a, table_b, num_pages = page_tables(lens_a, lens_b, g["page_size"], spec["next_step"],
                                              rng)
    gen = torch.Generator(device=env.device)
    gen.manual_seed(rng.getrandbits(62))
    cache = env.kv_cache(num_pages, gen)
    q_a = torch.randn((len(lens_a), g["num_qo_heads"], g["head_dim"]), dtype=env.dtype,
                      device=env.device, generator=gen)
    q_b = torch.randn((len(lens_b), g["num_qo_heads"], g["head_dim"]), dtype=env.dtype,
                      device=env.device, generator=gen)

    torch.cuda.synchronize()
    env.plan(w, table_a)
    alone = w.run(q_a, cache).clone()
    torch.cuda.synchronize()

    torch.cuda._sleep(int(g["stall_cycles"]))  # the stream is busy: copies queue behind this
    env.plan(w, table_a)
    out_a = w.run(q_a, cache)
    env.plan(w, table_b)
    w.run(q_b, cache)
    torch.cuda.synchronize()

    ref = env.reference(q_a, cache, table_a)
    exact = bool(torch.equal(out_a, alone))
    err = float((out_a.float() - ref).abs().max().item())
    err_alone = float((alone.float() - ref).abs().max().item())
    result = {"trial": trial, "max_error": err, "alone_error": err_alone, "bit_exact": exact,
              "peak_reserved_mib": env.peak_mib()}
    if exact and err_alone <= g["tolerance"]:
        result["outcome"] = "ok"
    else:
        result["outcome"] = "wrong"
        result["max_diff_vs_alone"] = float((out_a.float() - alone.float()).abs().max().item())
        result["lens_a"] = lens_a
        result["lens_b"] = lens_b
    return result


def child_main(spec: Dict[str, Any]) -> int:
    """Run the trials named in spec; protocol lines on stdout (see run_trials)."""
    allow = bool(spec.get("allow_pinned"))
    if spec.get("mode") == "pinned" and not allow:
        # Refused before torch is even imported: a pinned trial provokes the race.
        _emit("FATAL", {"reason": "refused: pinned trials need --allow-pinned",
                        "kind": "refused"})
        return EXIT_UNAVAILABLE
    try:
        env = _Env(spec["geometry"], allow_pinned=allow,
                   pages=max_pages(spec["geometry"], [spec["scenario"]]))
        w = env.wrapper(spec["mode"])
        env.warm(w)
    except Exception as exc:  # import or build errors, out of memory: cannot run here
        _emit("FATAL", _fatal_payload(exc))
        return EXIT_UNAVAILABLE
    for trial in spec["trials"]:
        _emit("START", {"trial": trial})
        try:
            result = _trial(env, w, spec["seed"], spec["scenario"], trial)
        except Exception as exc:
            if is_out_of_memory(exc):  # before the fault test: its text says "CUDA" too
                _emit("FATAL", _fatal_payload(exc))
                return EXIT_UNAVAILABLE
            if _is_gpu_fault(exc):
                _emit("RESULT", {"trial": trial, "outcome": "crashed",
                                 "reason": f"{type(exc).__name__}: {exc}"[:300]})
                os._exit(3)  # the CUDA context is gone; leave without touching it again
            _emit("FATAL", _fatal_payload(exc))
            return EXIT_UNAVAILABLE
        _emit("RESULT", result)
    return EXIT_OK


def probe_main(spec: Dict[str, Any]) -> int:
    """Import, build the wrapper, check the room and the buffer, run one plan+run per scenario.

    Nothing is planned before the installed buffer's pinning is known: a pinned buffer is
    refused here unless spec["allow_pinned"]. Each plan+run is synchronised before the next
    plan, so even a pinned buffer cannot race in the probe.
    """
    try:
        allow = bool(spec.get("allow_pinned"))
        env = _Env(spec["geometry"], allow_pinned=True,
                   pages=max_pages(spec["geometry"], spec["scenarios"]))
        torch = env.torch
        need = memory_estimate_mib(env.g, spec["scenarios"])
        room = env.device_mib()
        held = torch.cuda.memory_reserved(env.device) / (1 << 20)  # the workspace, so far
        if room["free"] < need - held:
            raise CheckUnavailable(
                f"out of GPU memory: {room['free']:.0f} MiB free of {room['total']:.0f} MiB "
                f"after this process's CUDA context and workspace; the check needs about "
                f"{need - held:.0f} MiB more ({need} MiB in all)", "out-of-memory")
        w = env.wrapper("installed")
        buf = w._pin_memory_int_workspace_buffer
        pinned = bool(buf.is_pinned())
        if pinned and not allow:
            raise CheckUnavailable(PINNED_REFUSAL, "refused")
        info: Dict[str, Any] = {
            "flashinfer_version": getattr(env.flashinfer, "__version__", "?"),
            "flashinfer_path": str(Path(env.flashinfer.__file__).parent),
            "torch_version": torch.__version__,
            "cuda_runtime": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(env.device),
            "capability": "{}.{}".format(*env.capability),
            "installed_buffer_pinned": pinned,
            "installed_buffer_bytes": int(buf.numel() * buf.element_size()),
            "decode_wrapper_kwargs": decode_wrapper_kwargs(env.g, env.capability),
            "plan_kwargs": plan_kwargs(env.g),
            "memory": {"estimate_mib": need, "free_mib_at_start": room["free"],
                       "total_mib": room["total"]},
            "split_kv": {},
        }
        for name in spec["scenarios"]:
            lens_a, lens_b = trial_lengths(spec["seed"], name, 0, env.g)
            rng = random.Random(0)  # noqa: S311 (test inputs)
            ta, tb, n = page_tables(lens_a, lens_b, env.g["page_size"],
                                    SCENARIOS[name]["next_step"], rng)
            cache = env.kv_cache(n, torch.Generator(device=env.device))
            flags = []
            for table, lens in ((ta, lens_a), (tb, lens_b)):
                env.plan(w, table)
                q = torch.randn((len(lens), env.g["num_qo_heads"], env.g["head_dim"]),
                                dtype=env.dtype, device=env.device)
                w.run(q, cache)
                torch.cuda.synchronize()
                flags.append(env.split_kv(w))
            info["split_kv"][name] = flags
        backend = getattr(w, "resolved_backend", None) or getattr(w, "_backend", None)
        if isinstance(backend, str):
            info["backend"] = backend
        end = env.device_mib()
        info["memory"].update(peak_reserved_mib=env.peak_mib(),
                              device_used_mib_at_end=round(end["total"] - end["free"], 1))
    except Exception as exc:
        _emit("FATAL", _fatal_payload(exc))
        return EXIT_UNAVAILABLE
    _emit("INFO", info)
    return EXIT_OK


# --------------------------------------------------------------------------------------------
# Parent
# --------------------------------------------------------------------------------------------


def _self_argv(flag: str, spec: Dict[str, Any]) -> List[str]:
    return [sys.executable, os.path.abspath(__file__), flag, json.dumps(spec)]


def _shards(ids: Sequence[int], jobs: int) -> List[List[int]]:
    jobs = max(1, min(jobs, len(ids))) if ids else 1
    return [list(ids[i::jobs]) for i in range(jobs)] if ids else []


def bench_only_refusal(args: argparse.Namespace) -> str:
    """Why these arguments are refused on a GPU that may serve ("" when they are not)."""
    if getattr(args, "allow_pinned", False):
        return ""
    flags = [f for f, on in (("--compare", args.compare), ("--bench", args.bench)) if on]
    if not flags:
        return ""
    verb = "runs" if len(flags) == 1 else "run"
    return (f"refused: {' and '.join(flags)} {verb} FlashInfer with a pinned plan buffer, which "
            "provokes the race on purpose (illegal memory accesses, Xid 31 in the kernel log): "
            "a bench tool; add --allow-pinned only on a GPU that serves nothing. On a rig run "
            "without them: the installed FlashInfer's trials only")


def run_check(args: argparse.Namespace, log: Callable[[str], None],
              checkpoint: Callable[[Dict[str, Any]], None] = lambda report: None
              ) -> Dict[str, Any]:
    """Probe, bench, trials; checkpoint(report) after each step so a cut-off run keeps data."""
    geometry = dict(DEFAULT_GEOMETRY)
    for key in ("num_qo_heads", "num_kv_heads", "head_dim", "page_size", "min_len", "max_len",
                "stall_cycles", "use_tensor_cores"):
        value = getattr(args, key, None)
        if value is not None:
            geometry[key] = value
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        raise SystemExit(f"unknown scenario(s) {unknown}; known: {sorted(SCENARIOS)}")
    allow_pinned = bool(getattr(args, "allow_pinned", False))
    modes = ["installed", "pinned"] if args.compare else ["installed"]
    report: Dict[str, Any] = {
        "tool": "race_check", "geometry": geometry, "seed": args.seed,
        "trials_per_scenario": args.trials, "modes": modes,
        "use": "bench" if allow_pinned else "rig",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    refused = bench_only_refusal(args)
    if refused:  # before anything touches the GPU
        report["unavailable"], report["unavailable_kind"] = refused, "refused"
        return report
    report.update(gpu_facts())
    try:
        from importlib import metadata

        report["flashinfer_version"] = metadata.version("flashinfer-python")
    except Exception:  # not installed as a distribution: the probe reports what it imports
        report["flashinfer_version"] = "?"
    patcher = Path(args.patcher) if args.patcher else Path(__file__).with_name("patcher.py")
    # The patcher finds FlashInfer itself, the same way, in this same interpreter.
    report["patch"] = patch_status(patcher, None)
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    base = {"geometry": geometry, "seed": args.seed, "allow_pinned": allow_pinned}
    try:
        info = run_probe(_self_argv("--probe-child", dict(base, scenarios=scenarios)),
                         args.startup_timeout, env=env)
    except CheckUnavailable as exc:
        report["unavailable"] = str(exc)
        report["unavailable_kind"] = exc.kind
        return report
    for key, value in info.items():
        if key not in report or key == "flashinfer_version":  # nvidia-smi's GPU name wins
            report[key] = value
    log(f"probe: FlashInfer {info.get('flashinfer_version')} on {info.get('gpu')}, "
        f"installed buffer pinned={info.get('installed_buffer_pinned')}, "
        f"wrapper {info.get('decode_wrapper_kwargs')} (backend {info.get('backend')}), "
        f"split-KV {info.get('split_kv')}, memory {info.get('memory')}")

    if args.bench:
        report["bench"] = bench_module().bench_report(args, base, env, _self_argv)
        checkpoint(report)  # the bench runs first: it is short, and a cut-off run keeps it

    report["scenarios"] = {}
    totals: Dict[str, List[Dict[str, Any]]] = {m: [] for m in modes}
    lock = threading.Lock()
    t_start = time.monotonic()
    try:
        for name in scenarios if args.trials > 0 else []:
            report["scenarios"][name] = {}
            for mode in modes:
                tally = new_tally()

                def on_result(result, tally=tally):
                    with lock:
                        add_result(tally, result)

                def make_argv(ids, mode=mode, name=name):
                    return _self_argv("--trial-child",
                                      dict(base, mode=mode, scenario=name, trials=ids))

                shards = _shards(list(range(args.trials)), args.jobs)
                errors: List[BaseException] = []

                def worker(ids, make_argv=make_argv, on_result=on_result, errors=errors):
                    try:
                        run_trials(make_argv, ids, hang_timeout=args.hang_timeout,
                                   startup_timeout=args.startup_timeout, env=env,
                                   on_result=on_result)
                    except BaseException as exc:  # re-raised in the parent thread below
                        errors.append(exc)

                threads = [threading.Thread(target=worker, args=(ids,)) for ids in shards]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                if errors:
                    raise errors[0]
                report["scenarios"][name][mode] = tally
                totals[mode].append(tally)
                report["totals"] = {m: merge_tallies(totals[m]) for m in modes if totals[m]}
                report["partial"] = True
                checkpoint(report)
                log(f"{name} / {mode}: {_fmt_tally(tally)} "
                    f"[{time.monotonic() - t_start:.0f} s]")
    except CheckUnavailable as exc:
        report["unavailable"] = str(exc)
        report["unavailable_kind"] = exc.kind
        return report
    report.pop("partial", None)
    if args.trials > 0:
        report["totals"] = {m: merge_tallies(totals[m]) for m in modes}
        checkpoint(report)

    report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return report


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description="Reproduce FlashInfer's plan() host-buffer race (vllm#40756) on this GPU.",
        epilog="Exit: 0 installed FlashInfer had no bad trial, 1 bad trials, 2 could not run.")
    p.add_argument("--trials", type=int, default=50, help="trials per scenario and mode")
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help="comma-separated, from: " + ", ".join(SCENARIOS))
    p.add_argument("--compare", action="store_true",
                   help="bench only (needs --allow-pinned): also run every trial with a pinned "
                   "buffer swapped in (in memory)")
    p.add_argument("--bench", action="store_true",
                   help="bench only (needs --allow-pinned): time plan/run, pinned vs installed")
    p.add_argument("--allow-pinned", action="store_true",
                   help="this GPU serves nothing and may fault: allow --compare, --bench and "
                   "trials on an unpatched (pinned) FlashInfer")
    p.add_argument("--json", action="store_true",
                   help="print the JSON report on stdout (the readable line goes to stderr)")
    p.add_argument("--out", help="also write the JSON report to this file")
    p.add_argument("--jobs", type=int, default=1,
                   help="child processes at a time (each one a CUDA context and about "
                   "memory_estimate_mib() of GPU memory)")
    p.add_argument("--hang-timeout", type=float, default=10.0, help="seconds per trial")
    p.add_argument("--startup-timeout", type=float, default=600.0,
                   help="seconds for a child to import and load (or JIT-build) the kernels")
    p.add_argument("--seed", type=int, default=40756)
    p.add_argument("--patcher", help="patcher.py to ask for the patch status "
                   "(default: the one beside this file)")
    p.add_argument("--num-qo-heads", type=int, dest="num_qo_heads")
    p.add_argument("--num-kv-heads", type=int, dest="num_kv_heads")
    p.add_argument("--head-dim", type=int, dest="head_dim")
    p.add_argument("--page-size", type=int, dest="page_size")
    p.add_argument("--min-len", type=int, dest="min_len")
    p.add_argument("--max-len", type=int, dest="max_len")
    p.add_argument("--tensor-cores", action="store_const", const=True, dest="use_tensor_cores",
                   default=None, help="use_tensor_cores=True: vLLM's decode path, the default")
    p.add_argument("--cuda-cores", action="store_const", const=False, dest="use_tensor_cores",
                   help="bench comparison: the CUDA-core decode kernel (not what vLLM runs)")
    p.add_argument("--stall-cycles", type=int, dest="stall_cycles",
                   help="GPU cycles of torch.cuda._sleep queued before plan A")
    p.add_argument("--bench-batches", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 4, 32])
    p.add_argument("--bench-repeats", type=int, default=200)
    p.add_argument("--bench-warmup", type=int, default=20)
    p.add_argument("--bench-timeout", type=float, default=600.0)
    p.add_argument("--busy-cycles", type=int, default=2_000_000)
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return p


def bench_module():
    """race_bench.py, beside this file: the bench's half (--bench, on a GPU that serves
    nothing). A rig never loads it: --bench is refused there before anything runs."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    import race_bench  # noqa: PLC0415 (only the bench needs it)
    return race_bench


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 2 and argv[0] in ("--trial-child", "--probe-child", "--bench-child"):
        spec = json.loads(argv[1])
        if argv[0] == "--bench-child":
            return bench_module().bench_main(spec)
        return {"--trial-child": child_main, "--probe-child": probe_main}[argv[0]](spec)
    args = build_parser().parse_args(argv)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    if not args.quiet:
        log("race_check: " + " ".join(shlex.quote(a) for a in argv))
    def checkpoint(partial: Dict[str, Any]) -> None:
        if args.out:
            Path(args.out).write_text(json.dumps(partial, indent=1, sort_keys=True) + "\n")

    report = run_check(args, log, checkpoint)
    code = exit_code_for(report)
    report["exit_code"] = code
    line = summary_line(report)
    report["summary"] = line
    text = json.dumps(report, indent=1, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text + "\n")
    if args.json:
        print(text)
        print(line, file=sys.stderr)
    else:
        print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
