#!/usr/bin/env python3
"""Does the canary's speed gate ignore noise and still catch a slower release?

    bench/speed_noise/run.py [--seed 16] [--comparisons 20] [--tokens-per-s 200]
        [--max-tokens 64] [--slower 0.8] [--slower-ttft 1.2] [--time-limit-s 900]
        [--json-out bench/results/speed-noise.json] [--md-out bench/results/speed-noise.md]

Each speed run starts the vLLM double afresh on a loopback port (its per-rig knobs in a
temporary $HF_HOME/vllm-double.json) and measures it with files/smoke.py's run_speed, as the
role's health check does (c=1 and c=--concurrency, --rounds rounds, a prompt of its own per
request). Noise on a home dual-3090 rig is modelled twice over: per request (the double's
"rate_jitter_pct" and "ttft_jitter_s", seeded) and run to run (each run's "tokens_per_s" is the
nominal times a factor drawn uniform in [1 - drift, 1 + drift]: clocks and thermals differ
between a baseline and a canary measured minutes apart). The gate is speed_regressions of the
role's filter plugin with the role's arguments.

  unchanged: comparisons + 1 runs of one release; each run against the one before -> false
             regressions (target 0);
  slower:    comparisons runs of a release with tokens_per_s x --slower and TTFT x --slower-ttft,
             run i against unchanged run i -> caught (target all);
  old gate:  comparisons + 1 runs as smoke measured before issue 16 (--old-rounds rounds, one
             prompt reused so later rounds hit the prefix cache), judged without floors -> its
             false regressions under the same noise (the motivation).
  reference: the unchanged runs judged by the whole gate (speed_gate: the run before, and the
             first run as the rig's speed reference at --reference-drop-pct) -> false
             regressions (target 0);
  drift:     --drift-series series of --drift-steps + 1 runs, release i at tokens/s x
             --drift-factor ** i (each a little slower than the last), release i judged by the
             whole gate against release i - 1 and release 0 as the reference -> the step each
             series is first caught at (target: by --drift-steps); the same series judged
             without the reference (the gate before issue 25) for comparison: run-to-run
             noise can push one 9 % step past the 10 % limit, so it catches some by chance.

Prints a table and the ratios, writes the JSON and Markdown results. Every random draw comes
from --seed (the double's jitter too); the measured figures also carry this machine's
scheduling, so a borderline count can move between runs. Standard library only. No speed run
starts after --time-limit-s (the results then say "complete": false, exit 1).
"""

import argparse
import contextlib
import datetime
import importlib.util
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOUBLE_SRC = ROOT / "molecule" / "images" / "vllm-double" / "src"
FILES = ROOT / "files"
# The gate is the role's domain library, imported as Ansible and the tests import it (its modules
# import each other as ansible.module_utils.vllm_dual_fast_domain.*).
MODULE_UTILS = ROOT / "roles" / "vllm_dual_fast" / "module_utils"
MODEL = "bench"
# What the role passes (tasks/health.yml, defaults/main.yml).
ROLE_GATE = {"max_drop_pct": 10.0, "ttft_floor_s": 0.05, "rate_floor_tps": 1.0}
REFERENCE_DROP_PCT = 15.0    # vllm_dual_fast_gate_speed_reference_drop_pct
OLD_GATE = {"max_drop_pct": 10.0, "ttft_floor_s": 0.0, "rate_floor_tps": 0.0}


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module    # smoke_speed and smoke_long import from smoke
    spec.loader.exec_module(module)
    return module


smoke = load("smoke", FILES / "smoke.py")
smoke_speed = load("smoke_speed", FILES / "smoke_speed.py")
smoke_long = load("smoke_long", FILES / "smoke_long.py")
import ansible.module_utils  # noqa: E402

if str(MODULE_UTILS) not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(MODULE_UTILS))
from ansible.module_utils.vllm_dual_fast_domain import verdict as gate  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=1) as resp:  # noqa: S310 (loopback)
            return resp.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def double(knobs: dict, start_timeout_s: float = 20.0, serve_args=(), extra_env=None):
    """A fresh `vllm serve` of the double with these rig knobs (and serve flags, environment);
    yields its base URL."""
    with tempfile.TemporaryDirectory(prefix="speed-noise-") as tmp:
        hf = Path(tmp) / "hf"
        hf.mkdir()
        (hf / "vllm-double.json").write_text(json.dumps(knobs))
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("VLLM_", "NVIDIA_", "HF_", "VDF_"))}
        env.update({"PYTHONPATH": str(DOUBLE_SRC), "PYTHONDONTWRITEBYTECODE": "1",
                    "HF_HOME": str(hf), "VLLM_DOUBLE_STATE_DIR": str(Path(tmp) / "state"),
                    "VLLM_DOUBLE_STARTUP_S": "0", "NVIDIA_VISIBLE_DEVICES": "0,1",
                    **(extra_env or {})})
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        with open(Path(tmp) / "double.log", "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", MODEL,
                 "--host", "127.0.0.1", "--port", str(port), *serve_args],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + start_timeout_s
            while not healthy(url):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the double did not start: "
                                       + (Path(tmp) / "double.log").read_text()[-2000:])
                time.sleep(0.05)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


@contextlib.contextmanager
def one_prompt_reused():
    """smoke as it was before issue 16: every speed request has the same prompt (no nonce)."""
    saved = smoke_speed.nonce
    smoke_speed.nonce = lambda: None
    try:
        yield
    finally:
        smoke_speed.nonce = saved


def rig_knobs(args, rng: random.Random, slower: bool, factor: float = 1.0) -> dict:
    """One speed run's knobs: the nominal rate drifted for this run, the release's slowdown
    (slower: --slower and --slower-ttft; factor: a decode-rate factor of its own)."""
    drift = rng.uniform(1 - args.drift_pct / 100, 1 + args.drift_pct / 100)
    rate_factor, ttft_factor = (args.slower, args.slower_ttft) if slower else (factor, 1.0)
    return {"tokens_per_s": round(args.tokens_per_s * drift * rate_factor, 3),
            "ttft_s": round(args.ttft_s * ttft_factor, 4),
            "ttft_jitter_s": args.ttft_jitter_s, "rate_jitter_pct": args.rate_jitter_pct,
            "seed": rng.randrange(2**31), "drift": round(drift, 4)}


def figures(speed: dict) -> dict:
    """What the gate reads of a speed run, plus the tails smoke reports."""
    keep = ("tokens_per_s", "ttft_s", "tokens_per_s_p10", "ttft_s_p90", "requests", "ok")
    out = {key: {k: speed.get(key, {}).get(k) for k in keep} for key in ("c1", "cN")}
    return {**out, "concurrency": speed.get("concurrency")}


def speed_run(args, rng: random.Random, slower: bool = False, old: bool = False,
              factor: float = 1.0) -> dict:
    knobs = rig_knobs(args, rng, slower, factor)
    drift = knobs.pop("drift")
    rounds = args.old_rounds if old else args.rounds
    start = time.monotonic()
    with double(knobs) as url, (one_prompt_reused() if old else contextlib.nullcontext()):
        endpoint = smoke.Endpoint(url, None, timeout=60)
        speed, failures = smoke_speed.run_speed(endpoint, MODEL, args.concurrency, args.max_tokens,
                                          rounds)
    if failures:
        raise RuntimeError("speed run failed: " + "; ".join(failures[:3]))
    return {"knobs": knobs, "drift": drift, "rounds": rounds,
            "seconds": round(time.monotonic() - start, 3), "speed": figures(speed)}


def change_pct(now: dict, before: dict) -> dict:
    """now against before, in percent worse: decode rate drops at c=1 and c=N, TTFT rise."""
    def pct(key, field, sign):
        new, old = now[key][field], before[key][field]
        return round(sign * (new - old) / old * 100, 2) if new is not None and old else None
    return {"c1_rate_drop_pct": pct("c1", "tokens_per_s", -1),
            "cN_rate_drop_pct": pct("cN", "tokens_per_s", -1),
            "c1_ttft_rise_pct": pct("c1", "ttft_s", 1)}


def judge(pairs, limits: dict) -> list:
    """One verdict per (now run, before run): the gate's lines and the changes behind them."""
    return [{"regressions": gate.speed_regressions(now["speed"], before["speed"], **limits),
             **change_pct(now["speed"], before["speed"])} for now, before in pairs]


def judge_whole(runs, reference_drop_pct, with_reference=True) -> list:
    """Run i (i >= 1) against run i - 1 and, with_reference, run 0 as the rig's reference, by
    the role's whole speed gate (speed_gate): one verdict each, "regressions" its lines."""
    reference = {"release": "run-0", "set_at": "", "speed": runs[0]["speed"]} \
        if runs and with_reference else None
    verdicts = []
    for before, now in zip(runs, runs[1:]):
        result, found, _ = gate.speed_gate(now["speed"], before["speed"],
                                           reference=reference,
                                           reference_drop_pct=reference_drop_pct, **ROLE_GATE)
        verdicts.append({"result": result, "regressions": found,
                         **change_pct(now["speed"], runs[0]["speed"])})
    return verdicts


def first_caught(verdicts):
    """The step (1-based) a drift series is first flagged at, or None."""
    return next((i + 1 for i, v in enumerate(verdicts) if v["regressions"]), None)


def flagged(verdicts) -> int:
    return sum(1 for v in verdicts if v["regressions"])


def spread(verdicts, key: str) -> dict:
    values = [v[key] for v in verdicts if v[key] is not None]
    return {"min": min(values), "max": max(values)} if values else {"min": None, "max": None}


def collect(args, rng: random.Random, count: int, deadline: float, **kind) -> list:
    runs = []
    for _ in range(count):
        if time.monotonic() > deadline:
            break
        runs.append(speed_run(args, rng, **kind))
    return runs


def summary(name: str, verdicts, runs, target: str) -> dict:
    seconds = sum(r["seconds"] for r in runs)
    return {"name": name, "comparisons": len(verdicts), "flagged": flagged(verdicts),
            "rate": round(flagged(verdicts) / len(verdicts), 4) if verdicts else None,
            "target": target, "speed_runs": len(runs),
            "seconds_per_speed_run": round(seconds / len(runs), 2) if runs else None,
            "seconds_per_comparison": round(seconds / len(verdicts), 2) if verdicts else None,
            **{key: spread(verdicts, key) for key in
               ("c1_rate_drop_pct", "cN_rate_drop_pct", "c1_ttft_rise_pct")}}


def bench(args) -> dict:
    rng = random.Random(args.seed)  # noqa: S311 (timing noise, not a secret)
    deadline = time.monotonic() + args.time_limit_s
    started = time.monotonic()
    n = args.comparisons
    base = collect(args, rng, n + 1, deadline)
    slow = collect(args, rng, n, deadline, slower=True)
    old = collect(args, rng, n + 1, deadline, old=True)
    unchanged = judge(zip(base[1:], base), ROLE_GATE)
    no_floors = judge(zip(base[1:], base), OLD_GATE)
    caught = judge(zip(slow, base), ROLE_GATE)
    old_unchanged = judge(zip(old[1:], old), OLD_GATE)
    whole_unchanged = judge_whole(base, args.reference_drop_pct)
    series = []
    for _ in range(args.drift_series):
        runs = [speed_run(args, rng, factor=args.drift_factor ** step)
                for step in range(args.drift_steps + 1) if time.monotonic() <= deadline]
        if len(runs) < args.drift_steps + 1:
            break
        with_ref = judge_whole(runs, args.reference_drop_pct)
        without = judge_whole(runs, args.reference_drop_pct, with_reference=False)
        series.append({"runs": runs, "caught_at": first_caught(with_ref),
                       "caught_at_without_reference": first_caught(without),
                       "verdicts": with_ref})
    drift = {"name": f"{args.drift_steps} releases each x{args.drift_factor} (reference "
                     f"{args.reference_drop_pct:g} %)",
             "series": len(series),
             "caught_by_last_step": sum(1 for s in series
                                        if s["caught_at"] and s["caught_at"] <= args.drift_steps),
             "caught_at": [s["caught_at"] for s in series],
             "caught_at_without_reference": [s["caught_at_without_reference"] for s in series],
             "target": f"every series caught by step {args.drift_steps}"}
    cases = {
        "unchanged": summary("unchanged release, role's gate", unchanged, base[1:], "0 flagged"),
        "slower": summary("slower release, role's gate", caught, slow, "all flagged"),
        "unchanged_no_floors": summary(
            f"unchanged release, {args.rounds} rounds, distinct prompts, no floors", no_floors,
            base[1:], "0 flagged"),
        "old_gate_unchanged": summary(
            f"unchanged release, old gate ({args.old_rounds} rounds, one prompt, no floors)",
            old_unchanged, old[1:], "0 flagged"),
        "reference_unchanged": summary(
            f"unchanged release, whole gate with the first run as reference "
            f"({args.reference_drop_pct:g} %)", whole_unchanged, base[1:], "0 flagged"),
    }
    complete = (len(base) == n + 1 and len(slow) == n and len(old) == n + 1
                and len(series) == args.drift_series)
    return {
        "bench": "speed-noise",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "complete": complete, "wall_s": round(time.monotonic() - started, 1),
        "parameters": {k: getattr(args, k) for k in (
            "seed", "comparisons", "tokens_per_s", "max_tokens", "ttft_s", "ttft_jitter_s",
            "rate_jitter_pct", "drift_pct", "slower", "slower_ttft", "concurrency", "rounds",
            "old_rounds", "time_limit_s", "reference_drop_pct", "drift_series", "drift_steps",
            "drift_factor")},
        "gate": {"role": ROLE_GATE, "old": OLD_GATE,
                 "reference_drop_pct": args.reference_drop_pct},
        "drift": drift,
        "drift_series": series,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "loadavg_1m_after": round(os.getloadavg()[0], 2)},
        "cases": cases,
        "comparisons": {"unchanged": unchanged, "slower": caught,
                        "old_gate_unchanged": old_unchanged},
        "runs": {"unchanged": base, "slower": slow, "old_gate": old},
    }


def fmt_spread(value: dict) -> str:
    if value["min"] is None:
        return "-"
    return f"{value['min']:+.1f} .. {value['max']:+.1f}"


def table(result: dict) -> str:
    head = ("| case | comparisons | flagged | rate | target | s per comparison "
            "| c=1 rate drop % | c=N rate drop % | c=1 TTFT rise % |")
    lines = [head, "|" + " --- |" * 9]
    for case in result["cases"].values():
        rate = "-" if case["rate"] is None else f"{case['rate']:.2f}"
        lines.append(
            f"| {case['name']} | {case['comparisons']} | {case['flagged']} | {rate} "
            f"| {case['target']} | {case['seconds_per_comparison']} "
            f"| {fmt_spread(case['c1_rate_drop_pct'])} | {fmt_spread(case['cN_rate_drop_pct'])} "
            f"| {fmt_spread(case['c1_ttft_rise_pct'])} |")
    return "\n".join(lines)


def headline(result: dict) -> str:
    c = result["cases"]
    d = result["drift"]
    return (f"false regressions {c['unchanged']['flagged']}/{c['unchanged']['comparisons']} "
            f"({c['reference_unchanged']['flagged']}/{c['reference_unchanged']['comparisons']} "
            f"with the reference), "
            f"slower release caught {c['slower']['flagged']}/{c['slower']['comparisons']}, "
            f"old gate false regressions {c['old_gate_unchanged']['flagged']}/"
            f"{c['old_gate_unchanged']['comparisons']}, drift caught "
            f"{d['caught_by_last_step']}/{d['series']} by its last step (at steps "
            f"{d['caught_at']}; without the reference {d['caught_at_without_reference']})")


def markdown(result: dict) -> str:
    p = result["parameters"]
    return "\n".join([
        "# Speed gate under noise (bench/speed_noise/run.py)",
        "",
        f"Measured {result['date']} on {result['machine']['cpus']} CPUs "
        f"(load {result['machine']['loadavg_1m_after']} after), {result['wall_s']} s, "
        f"complete: {result['complete']}. Raw data: `speed-noise.json`.",
        "",
        f"Rig model (the vLLM double, started afresh per speed run): {p['tokens_per_s']} tokens/s "
        f"nominal, drifted per run uniform +-{p['drift_pct']} %; per request decode interval x "
        f"uniform [1 -+ {p['rate_jitter_pct']} %]; TTFT {p['ttft_s']} s + uniform "
        f"[0, {p['ttft_jitter_s']}] s. Speed runs: {p['max_tokens']} tokens per request, c=1 and "
        f"c={p['concurrency']}, {p['rounds']} rounds, a prompt of its own per request. Slower "
        f"release: tokens/s x {p['slower']}, TTFT x {p['slower_ttft']}. Old gate: "
        f"{p['old_rounds']} rounds, one prompt reused, no floors. Seed {p['seed']}.",
        "",
        f"Gate: `speed_regressions(now, before, {ROLE_GATE['max_drop_pct']:g}, "
        f"ttft_floor_s={ROLE_GATE['ttft_floor_s']:g}, "
        f"rate_floor_tps={ROLE_GATE['rate_floor_tps']:g})` "
        "as the role calls it; the spreads are now against before, in percent worse (min .. max).",
        "",
        table(result),
        "",
        f"Headline: {headline(result)}.",
        "",
        margins(result),
        "",
    ])


def margins(result: dict) -> str:
    """How far the noise stayed from the limit, and the slower release beyond it."""
    c, limit = result["cases"], ROLE_GATE["max_drop_pct"]
    worst = max((c["unchanged"][k]["max"] for k in ("c1_rate_drop_pct", "cN_rate_drop_pct")
                 if c["unchanged"][k]["max"] is not None), default=None)
    least = min((c["slower"][k]["min"] for k in ("c1_rate_drop_pct", "cN_rate_drop_pct")
                 if c["slower"][k]["min"] is not None), default=None)
    return (f"Margins: the unchanged release's worst decode-rate drop was {worst} % and the "
            f"slower release's smallest {least} %, against the {limit:g} % limit. The "
            f"unchanged release's TTFT rose up to {c['unchanged']['c1_ttft_rise_pct']['max']} %;"
            f" the gate counts a rise only above {limit:g} % and "
            f"{ROLE_GATE['ttft_floor_s'] * 1000:g} ms. Without the floors "
            f"the same runs give {c['unchanged_no_floors']['flagged']} false regressions in "
            f"{c['unchanged_no_floors']['comparisons']}.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add = parser.add_argument
    add("--seed", type=int, default=16)
    add("--comparisons", type=int, default=20, help="comparisons per case (default 20)")
    add("--tokens-per-s", type=float, default=200.0, help="nominal decode rate")
    add("--max-tokens", type=int, default=64, help="tokens per speed request")
    add("--ttft-s", type=float, default=0.06, help="base time to first token")
    add("--ttft-jitter-s", type=float, default=0.03, help="TTFT + uniform [0, this]")
    add("--rate-jitter-pct", type=float, default=5.0, help="per-request decode interval jitter")
    add("--drift-pct", type=float, default=3.0, help="run-to-run drift of the decode rate")
    add("--slower", type=float, default=0.8, help="slower release: tokens/s factor")
    add("--slower-ttft", type=float, default=1.2, help="slower release: TTFT factor")
    add("--concurrency", type=int, default=4, help="c=N of the speed run (the role's 4)")
    add("--rounds", type=int, default=5, help="rounds per level (smoke's default)")
    add("--old-rounds", type=int, default=2, help="rounds of the old gate")
    add("--reference-drop-pct", type=float, default=REFERENCE_DROP_PCT,
        help="the reference gate's limit (the role's default)")
    add("--drift-series", type=int, default=5, help="drift series (default 5)")
    add("--drift-steps", type=int, default=3, help="slower releases per series (default 3)")
    add("--drift-factor", type=float, default=0.91, help="each release's rate x this")
    add("--time-limit-s", type=float, default=1500.0, help="stop starting runs after this")
    add("--json-out", default=str(ROOT / "bench" / "results" / "speed-noise.json"))
    add("--md-out", default=str(ROOT / "bench" / "results" / "speed-noise.md"))
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.comparisons < 1 or args.rounds < 1 or args.old_rounds < 1:
        sys.stderr.write("speed_noise: --comparisons, --rounds and --old-rounds must be >= 1\n")
        return 2
    result = bench(args)
    print(table(result))
    c = result["cases"]
    for key in ("unchanged", "slower", "unchanged_no_floors", "old_gate_unchanged",
                "reference_unchanged"):
        rate = c[key]["rate"]
        print(f"{c[key]['name']}: {c[key]['flagged']}/{c[key]['comparisons']} flagged "
              f"(ratio {'-' if rate is None else f'{rate:.2f}'}), "
              f"{c[key]['seconds_per_comparison']} s per comparison")
    print(f"speed_noise: {headline(result)}; complete: {result['complete']}, "
          f"{result['wall_s']} s")
    Path(args.json_out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    Path(args.md_out).write_text(markdown(result))
    return 0 if result["complete"] else 1


if __name__ == "__main__":
    sys.exit(main())
