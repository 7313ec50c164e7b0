"""files/race_check.py without a GPU: bookkeeping, child crash/hang classification, report, exit.

The GPU side (torch, FlashInfer) cannot exist in CI; the children here are test doubles: tiny
Python scripts that speak race_check's line protocol, die by a signal, hang or print garbage.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "files" / "race_check.py"

spec = importlib.util.spec_from_file_location("race_check", SCRIPT)
rc = importlib.util.module_from_spec(spec)
sys.modules["race_check"] = rc
spec.loader.exec_module(rc)

rb = rc.bench_module()    # files/race_bench.py: the bench's half
GEOMETRY = dict(rc.DEFAULT_GEOMETRY)

# A double of a trial child: argv = behaviour spec (JSON: trial id -> action), then trial ids.
# Actions: ok, wrong, segv (SIGSEGV after START), abort, hang (after START), gpufault (a
# crashed RESULT then exit 3, like race_check's own child), exit1 (exit 1 after START).
FAKE_CHILD = textwrap.dedent(
    """
    import json, os, signal, sys, time
    plan = json.loads(sys.argv[1])
    state = sys.argv[2]
    def emit(kind, payload):
        print("@@race " + kind + " " + json.dumps(payload), flush=True)
    print("some FlashInfer log line that is not protocol", flush=True)
    for tid in map(int, sys.argv[3:]):
        action = plan.get(str(tid), "ok")
        marker = os.path.join(state, "done-%d" % tid)
        emit("START", {"trial": tid})
        if action.endswith("-once") and os.path.exists(marker):
            action = "ok"
        open(marker, "w").close()
        action = action.replace("-once", "")
        if action == "ok":
            emit("RESULT", {"trial": tid, "outcome": "ok", "max_error": 0.001})
        elif action == "wrong":
            emit("RESULT", {"trial": tid, "outcome": "wrong", "max_error": 2.5})
        elif action == "nan":
            emit("RESULT", {"trial": tid, "outcome": "wrong", "max_error": float("nan")})
        elif action == "segv":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif action == "abort":
            os.kill(os.getpid(), signal.SIGABRT)
        elif action == "hang":
            time.sleep(60)
        elif action == "gpufault":
            emit("RESULT", {"trial": tid, "outcome": "crashed", "reason": "CUDA error: illegal"})
            os._exit(3)
        elif action == "exit1":
            sys.stderr.write("Traceback: boom\\n")
            sys.exit(1)
        elif action == "fatal":
            emit("FATAL", {"reason": "ModuleNotFoundError: No module named 'flashinfer'"})
            sys.exit(2)
    """
)


@pytest.fixture()
def fake_child(tmp_path):
    script = tmp_path / "fake_child.py"
    script.write_text(FAKE_CHILD)
    state = tmp_path / "state"
    state.mkdir()
    launched = []

    def make(plan):
        def make_argv(ids):
            launched.append(list(ids))
            return [sys.executable, str(script), json.dumps(plan), str(state)] + [
                str(i) for i in ids]
        make_argv.launched = launched
        return make_argv

    return make


def by_trial(results):
    return {r["trial"]: r for r in results}


# ------------------------------------------------------------------ inputs


def test_trial_lengths_deterministic_and_shaped():
    a1, b1 = rc.trial_lengths(7, "batch4-then-8", 3, GEOMETRY)
    a2, b2 = rc.trial_lengths(7, "batch4-then-8", 3, GEOMETRY)
    assert (a1, b1) == (a2, b2)
    assert (len(a1), len(b1)) == (4, 8)
    assert all(GEOMETRY["min_len"] <= n <= GEOMETRY["max_len"] for n in a1 + b1)
    assert rc.trial_lengths(7, "batch4-then-8", 4, GEOMETRY) != (a1, b1)
    a, b = rc.trial_lengths(7, "batch32-then-1", 0, GEOMETRY)
    assert (len(a), len(b)) == (32, 1)


def test_next_step_lengths_are_plus_one():
    a, b = rc.trial_lengths(1, "mtp-next-step", 0, GEOMETRY)
    assert b == [n + 1 for n in a]


def _check_table(table, lens, page):
    indptr, indices, last = table
    assert indptr[0] == 0 and len(indptr) == len(lens) + 1
    for i, n in enumerate(lens):
        count = indptr[i + 1] - indptr[i]
        assert count == -(-n // page)
        assert 1 <= last[i] <= page
        assert (count - 1) * page + last[i] == n
    assert len(indices) == indptr[-1]


def test_page_tables_disjoint_for_new_requests():
    lens_a, lens_b = [17, 16, 1], [33, 5]
    ta, tb, total = rc.page_tables(lens_a, lens_b, 16, False, random.Random(0))  # noqa: S311
    _check_table(ta, lens_a, 16)
    _check_table(tb, lens_b, 16)
    assert not set(ta[1]) & set(tb[1])
    assert sorted(ta[1] + tb[1]) == list(range(total))


def test_page_tables_next_step_reuses_pages():
    lens_a = [16, 20]
    lens_b = [17, 21]  # the first request crosses into a new page
    ta, tb, total = rc.page_tables(lens_a, lens_b, 16, True, random.Random(1))  # noqa: S311
    _check_table(ta, lens_a, 16)
    _check_table(tb, lens_b, 16)
    assert set(ta[1]) <= set(tb[1]) and len(tb[1]) == len(ta[1]) + 1
    assert tb[1][0] == ta[1][0] and tb[1][2:] == ta[1][1:]
    assert total == 4  # 2 pages each for 17 and 21 tokens


# ------------------------------------------------------------------ bookkeeping


def test_tally_counts_and_max_error():
    t = rc.new_tally()
    rc.add_result(t, {"trial": 0, "outcome": "ok", "max_error": 0.01})
    rc.add_result(t, {"trial": 1, "outcome": "wrong", "max_error": 3.0})
    rc.add_result(t, {"trial": 2, "outcome": "crashed", "reason": "x"})
    rc.add_result(t, {"trial": 3, "outcome": "hung"})
    rc.add_result(t, {"trial": 4, "outcome": "wrong", "max_error": float("nan")})
    assert (t["trials"], t["ok"], t["wrong"], t["crashed"], t["hung"], t["bad"]) == (5, 1, 2, 1,
                                                                                     1, 4)
    assert t["max_error"] == 3.0 and t["nonfinite"] == 1
    assert [e["trial"] for e in t["examples"]] == [1, 2, 3, 4]
    with pytest.raises(ValueError):
        rc.add_result(t, {"trial": 5, "outcome": "maybe"})


def test_merge_tallies_sums():
    a, b = rc.new_tally(), rc.new_tally()
    rc.add_result(a, {"trial": 0, "outcome": "ok", "max_error": 0.5})
    rc.add_result(b, {"trial": 0, "outcome": "hung"})
    total = rc.merge_tallies([a, b])
    assert total["trials"] == 2 and total["bad"] == 1 and total["hung"] == 1
    assert total["max_error"] == 0.5
    assert "examples" not in total


def test_describe_exit():
    assert rc.describe_exit(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert rc.describe_exit(3) == "exit status 3"


def test_gpu_fault_classification():
    assert rc._is_gpu_fault(RuntimeError("CUDA error: an illegal memory access was encountered"))
    assert not rc._is_gpu_fault(ValueError("q_len_per_req must be 1"))


def test_stats_quantiles():
    s = rb.stats([float(x) for x in range(1, 11)])
    assert s["median"] == 5.5 and s["min"] == 1.0 and s["max"] == 10.0
    assert math.isclose(s["p10"], 1.9) and math.isclose(s["p90"], 9.1)
    assert rb.stats([]) == {"n": 0}


def test_shards_cover_every_trial_once():
    shards = rc._shards(list(range(10)), 3)
    assert len(shards) == 3
    assert sorted(i for s in shards for i in s) == list(range(10))
    assert rc._shards([0, 1], 8) == [[0], [1]]


# ------------------------------------------------------------------ children


def test_all_ok_in_one_child(fake_child):
    make = fake_child({})
    results = rc.run_trials(make, [0, 1, 2], hang_timeout=5, startup_timeout=10)
    assert [r["outcome"] for r in sorted(results, key=lambda r: r["trial"])] == ["ok"] * 3
    assert make.launched == [[0, 1, 2]]
    assert all(r["seconds"] >= 0 for r in results)


def test_signal_crash_costs_only_the_trial_in_flight(fake_child):
    make = fake_child({"1": "segv", "3": "abort"})
    results = by_trial(rc.run_trials(make, [0, 1, 2, 3, 4], hang_timeout=5, startup_timeout=10))
    assert sorted(results) == [0, 1, 2, 3, 4]
    assert results[1]["outcome"] == "crashed" and "SIGSEGV" in results[1]["reason"]
    assert results[3]["outcome"] == "crashed" and "SIGABRT" in results[3]["reason"]
    assert [results[i]["outcome"] for i in (0, 2, 4)] == ["ok"] * 3
    assert make.launched == [[0, 1, 2, 3, 4], [2, 3, 4], [4]]


def test_hang_is_killed_and_counted(fake_child):
    make = fake_child({"1": "hang"})
    t0 = time.monotonic()
    results = by_trial(rc.run_trials(make, [0, 1, 2], hang_timeout=1.0, startup_timeout=10))
    assert time.monotonic() - t0 < 20
    assert results[1]["outcome"] == "hung"
    assert results[0]["outcome"] == results[2]["outcome"] == "ok"
    assert make.launched == [[0, 1, 2], [2]]


def test_child_reported_gpu_fault_then_restart(fake_child):
    make = fake_child({"0": "gpufault", "2": "wrong"})
    results = by_trial(rc.run_trials(make, [0, 1, 2], hang_timeout=5, startup_timeout=10))
    assert results[0]["outcome"] == "crashed" and "illegal" in results[0]["reason"]
    assert results[1]["outcome"] == "ok" and results[2]["outcome"] == "wrong"
    assert make.launched == [[0, 1, 2], [1, 2]]


def test_python_death_with_traceback_is_a_crash(fake_child):
    make = fake_child({"1": "exit1-once"})
    results = by_trial(rc.run_trials(make, [0, 1, 2], hang_timeout=5, startup_timeout=10))
    assert results[1]["outcome"] == "crashed"
    assert "exit status 1" in results[1]["reason"] and "boom" in results[1]["reason"]


def test_on_result_sees_every_trial(fake_child):
    seen = []
    rc.run_trials(fake_child({"1": "segv"}), [0, 1, 2], hang_timeout=5, startup_timeout=10,
                  on_result=lambda r: seen.append((r["trial"], r["outcome"])))
    assert sorted(seen) == [(0, "ok"), (1, "crashed"), (2, "ok")]


def test_fatal_makes_the_check_unavailable(fake_child):
    with pytest.raises(rc.CheckUnavailable, match="flashinfer"):
        rc.run_trials(fake_child({"0": "fatal"}), [0, 1], hang_timeout=5, startup_timeout=10)


def test_child_dying_before_any_trial_is_unavailable(tmp_path):
    script = tmp_path / "die.py"
    script.write_text("import sys; sys.stderr.write('ImportError: libcuda.so.1'); sys.exit(1)\n")
    with pytest.raises(rc.CheckUnavailable, match="libcuda"):
        rc.run_trials(lambda ids: [sys.executable, str(script)], [0], hang_timeout=5,
                      startup_timeout=10)


def test_child_silent_at_start_is_unavailable(tmp_path):
    script = tmp_path / "slow.py"
    script.write_text("import time; time.sleep(60)\n")
    t0 = time.monotonic()
    with pytest.raises(rc.CheckUnavailable, match="started no trial"):
        rc.run_trials(lambda ids: [sys.executable, str(script)], [0], hang_timeout=5,
                      startup_timeout=1.0)
    assert time.monotonic() - t0 < 15


def test_probe_info_and_failure(tmp_path):
    ok = tmp_path / "probe_ok.py"
    ok.write_text('print("@@race INFO " + \'{"flashinfer_version": "9.9"}\', flush=True)\n')
    assert rc.run_probe([sys.executable, str(ok)], 10) == {"flashinfer_version": "9.9"}
    bad = tmp_path / "probe_bad.py"
    bad.write_text("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)\n")
    with pytest.raises(rc.CheckUnavailable, match="SIGSEGV"):
        rc.run_probe([sys.executable, str(bad)], 10)


# ------------------------------------------------------------------ patch status


def test_patch_status_from_external_patcher(tmp_path):
    patcher = tmp_path / "patcher.py"
    patcher.write_text(
        "import json, sys\n"
        "assert sys.argv[1:3] == ['--check', '--json'], sys.argv\n"
        "print(json.dumps({'status': 'already-patched', 'flashinfer_version': '0.7.2.post1',"
        " 'lib_root': sys.argv[-1]}))\n")
    out = rc.patch_status(patcher, "/x/flashinfer")
    assert out["status"] == "already-patched" and out["exit"] == 0
    assert out["lib_root"] == "/x/flashinfer"


def test_patch_status_tolerates_absence_and_garbage(tmp_path):
    assert rc.patch_status(tmp_path / "nope.py", None)["status"] == "unknown"
    garbage = tmp_path / "garbage.py"
    garbage.write_text("print('not json'); raise SystemExit(1)\n")
    out = rc.patch_status(garbage, None)
    assert out["status"] == "unknown" and out["exit"] == 1


# ------------------------------------------------------------------ report and exit codes


def _report(installed_bad, pinned_bad=5, **extra):
    def tally(bad):
        return {"trials": 10, "ok": 10 - bad, "wrong": bad, "crashed": 0, "hung": 0, "bad": bad,
                "max_error": 0.5 if bad else 0.001}
    report = {"flashinfer_version": "0.7.2.post1", "patch": {"status": "patched"},
              "gpu": "NVIDIA H200", "driver": "580",
              "totals": {"installed": tally(installed_bad), "pinned": tally(pinned_bad)}}
    report.update(extra)
    return report


def test_exit_codes():
    assert rc.exit_code_for(_report(0)) == rc.EXIT_OK == 0
    assert rc.exit_code_for(_report(1)) == rc.EXIT_BAD == 1
    assert rc.exit_code_for({"unavailable": "no GPU"}) == rc.EXIT_UNAVAILABLE == 2
    assert rc.exit_code_for({}) == 2
    assert rc.exit_code_for({"bench": {"batches": {}}}) == 0


def test_summary_line_mentions_both_modes():
    line = rc.summary_line(_report(0, pinned_bad=7))
    assert "pinned: 7 of 10 bad" in line and "as installed: 0 of 10 bad" in line
    assert "0.7.2.post1" in line and "patched" in line and "NVIDIA H200" in line
    assert line.endswith("-> OK")
    assert rc.summary_line(_report(2)).endswith("-> RACE")
    assert "could not run: no torch" in rc.summary_line({"unavailable": "no torch"})


def test_bench_summary_ratios():
    bench = {"batches": {"4": {"4x(plan+run)": {"ratio_installed_over_pinned":
                                                {"gpu_us": 1.01, "host_us": 0.99}}}}}
    assert rb.bench_summary(bench) == (
        "bench 4x(plan+run) as installed / pinned: b4 gpu 1.010 host 0.990")
    assert rb.bench_summary({"batches": {}}) == ""


# ------------------------------------------------------------------ the CLI end to end

FAKE_SELF = textwrap.dedent(
    """
    import json, os, signal, sys
    flag, spec = sys.argv[1], json.loads(sys.argv[2])
    def emit(kind, payload):
        print("@@race " + kind + " " + json.dumps(payload), flush=True)
    if flag == "--probe-child":
        emit("INFO", {"flashinfer_version": "0.0-double", "installed_buffer_pinned": False,
                      "split_kv": {}})
    elif flag == "--trial-child":
        bad_installed = os.environ.get("DOUBLE_INSTALLED_BAD") == "1"
        oom = os.environ.get("DOUBLE_OOM")
        for tid in spec["trials"]:
            emit("START", {"trial": tid})
            if oom == "result":
                emit("RESULT", {"trial": tid, "outcome": "crashed", "reason":
                                "OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB"})
                os._exit(3)
            if oom == "stderr":
                sys.stderr.write("torch.OutOfMemoryError: CUDA out of memory. Tried to "
                                 "allocate 2.00 GiB\\n")
                sys.exit(1)
            if spec["mode"] == "pinned" and tid == 1:
                os.kill(os.getpid(), signal.SIGSEGV)
            bad = spec["mode"] == "pinned" or (bad_installed and tid == 0)
            emit("RESULT", {"trial": tid, "outcome": "wrong" if bad else "ok",
                            "max_error": 1.5 if bad else 0.002})
    elif flag == "--bench-child":
        s = {"median": 10.0, "p10": 9.0, "p90": 11.0}
        step = {"pinned": {"host_us": s, "gpu_us": s}, "installed": {"host_us": s, "gpu_us": s},
                "ratio_installed_over_pinned": {"host_us": 1.0, "gpu_us": 1.0}}
        emit("BENCH", {"1": {"4x(plan+run)": step}})
    """
)


@pytest.fixture()
def doubled_self(tmp_path, monkeypatch):
    script = tmp_path / "fake_self.py"
    script.write_text(FAKE_SELF)
    monkeypatch.setattr(rc, "_self_argv",
                        lambda flag, spec: [sys.executable, str(script), flag, json.dumps(spec)])
    monkeypatch.setattr(rc, "gpu_facts", lambda: {"gpu": "GPU double", "driver": "0.0"})
    return tmp_path


def test_cli_compare_and_bench_report(doubled_self, capsys):
    out = doubled_self / "report.json"
    code = rc.main(["--trials", "3", "--compare", "--bench", "--allow-pinned", "--jobs", "2",
                    "--quiet",
                    "--patcher", str(doubled_self / "absent.py"), "--out", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    assert report["totals"]["installed"]["bad"] == 0
    assert report["totals"]["pinned"] == dict(report["totals"]["pinned"], trials=9, bad=9,
                                              crashed=3, wrong=6)
    assert report["patch"]["status"] == "unknown"
    assert report["flashinfer_version"] == "0.0-double" and report["gpu"] == "GPU double"
    assert report["bench"]["batches"]["1"]["4x(plan+run)"]["pinned"]["gpu_us"]["median"] == 10
    line = capsys.readouterr().out.strip()
    assert "pinned: 9 of 9 bad" in line and "as installed: 0 of 9 bad" in line
    assert report["exit_code"] == 0


def test_cli_bad_installed_exits_1(doubled_self, monkeypatch, capsys):
    monkeypatch.setenv("DOUBLE_INSTALLED_BAD", "1")
    code = rc.main(["--trials", "2", "--jobs", "1", "--quiet", "--json",
                    "--scenarios", "batch4-then-8"])
    assert code == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["totals"]["installed"]["wrong"] == 1 and "pinned" not in report["totals"]
    assert "-> RACE" in captured.err


def test_cli_without_torch_exits_2(tmp_path):
    doubles = tmp_path / "doubles"
    doubles.mkdir()
    (doubles / "torch.py").write_text("raise ImportError('torch double: not installed')\n")
    env = dict(os.environ, PYTHONPATH=str(doubles))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--trials", "1", "--json", "--quiet"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2, proc.stderr
    report = json.loads(proc.stdout)
    assert "torch double" in report["unavailable"]
    assert "could not run" in proc.stderr


def test_cli_without_gpu_exits_2(tmp_path):
    doubles = tmp_path / "doubles"
    doubles.mkdir()
    (doubles / "torch.py").write_text(
        "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n")
    env = dict(os.environ, PYTHONPATH=str(doubles))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--trials", "1", "--quiet"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 2
    assert "torch sees no CUDA GPU" in proc.stdout


def test_module_imports_without_torch():
    code = ("import importlib.util, sys; "
            f"s = importlib.util.spec_from_file_location('r', {str(SCRIPT)!r}); "
            "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
            "print('torch' in sys.modules, 'flashinfer' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.stdout.split() == ["False", "False"]


# ------------------------------------------------------------------ rig use against bench use
#
# Doubles of torch and flashinfer (no GPU here) on the children's PYTHONPATH, so race_check.py
# runs end to end with its own probe and trial children: the flashinfer double logs how the
# wrapper is built and planned; knobs (environment) make the buffer pinned, the GPU nearly
# full or a trial's allocation fail as torch does.

TORCH_DOUBLE = textwrap.dedent(
    '''
    """torch double for race_check's children: permissive tensors, a GPU that is not there."""
    import os

    __version__ = "0.0-double"


    class _Dtype:
        def __init__(self, name, size):
            self.name, self.size = name, size

        def __repr__(self):
            return "torch." + self.name


    uint8, int32, long = _Dtype("uint8", 1), _Dtype("int32", 4), _Dtype("int64", 8)
    bfloat16, float16, float32 = _Dtype("bfloat16", 2), _Dtype("float16", 2), _Dtype("float32", 4)


    class version:
        cuda = "0.0-double"


    class OutOfMemoryError(RuntimeError):
        pass


    class Tensor:
        def __init__(self, shape=(1,), dtype=None, pinned=False):
            self.shape, self.dtype, self._pinned = tuple(shape), dtype or float32, pinned

        def numel(self):
            n = 1
            for d in self.shape:
                n *= d
            return n

        def element_size(self):
            return self.dtype.size

        def is_pinned(self):
            return self._pinned

        def __len__(self):
            return self.shape[0] if self.shape else 1

        def __getitem__(self, key):
            return self

        def __getattr__(self, name):
            return lambda *a, **k: self

        def __float__(self):
            return 0.0

        def __bool__(self):
            return True

        def __mul__(self, other):
            return self

        __rmul__ = __add__ = __sub__ = __truediv__ = __mul__


    def _shape(shape):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            return tuple(shape[0])
        return tuple(shape)


    def empty(*shape, dtype=None, device=None, pin_memory=False, **kw):
        return Tensor(_shape(shape), dtype, pinned=pin_memory)


    zeros = empty


    def tensor(data, dtype=None, device=None):
        return Tensor((len(data),), dtype)


    def randn(shape, dtype=None, device=None, generator=None):
        if generator is not None and os.environ.get("TORCH_DOUBLE_OOM") == "trial":
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has "
                                   "a total capacity of 23.56 GiB of which 18.00 MiB is free.")
        return Tensor(shape, dtype)


    class Generator:
        def __init__(self, device=None):
            pass

        def manual_seed(self, seed):
            return self


    def device(kind, index=0):
        return f"{kind}:{index}"


    def __getattr__(name):  # einsum, softmax, stack, equal, ...
        return lambda *a, **k: Tensor()


    class cuda:
        OutOfMemoryError = OutOfMemoryError

        @staticmethod
        def is_available():
            return True

        @staticmethod
        def current_device():
            return 0

        @staticmethod
        def get_device_capability(dev=None):
            return (8, 6)

        @staticmethod
        def get_device_name(dev=None):
            return "GPU double"

        @staticmethod
        def synchronize():
            pass

        @staticmethod
        def _sleep(cycles):
            pass

        @staticmethod
        def mem_get_info(dev=None):
            free = int(os.environ.get("TORCH_DOUBLE_FREE_MIB", "20000"))
            return free << 20, 24576 << 20

        @staticmethod
        def memory_reserved(dev=None):
            return 136 << 20

        max_memory_reserved = memory_reserved
    '''
)

FLASHINFER_DOUBLE = textwrap.dedent(
    '''
    """flashinfer double: logs how race_check builds and plans the decode wrapper."""
    import json, os
    import torch

    __version__ = "0.0-double"


    def _log(event, **fields):
        with open(os.environ["FI_DOUBLE_LOG"], "a") as f:
            f.write(json.dumps(dict(fields, event=event, pid=os.getpid()), default=repr) + "\\n")


    class BatchDecodeWithPagedKVCacheWrapper:
        def __init__(self, float_workspace_buffer, kv_layout="NHD", **kwargs):
            _log("init", kv_layout=kv_layout, kwargs=kwargs)
            pinned = os.environ.get("FI_DOUBLE_PINNED") == "1"  # upstream; patched: False
            self._pin_memory_int_workspace_buffer = torch.empty(
                (8 * 1024 * 1024,), dtype=torch.uint8, pin_memory=pinned, device="cpu")

        def plan(self, indptr, indices, last_page_len, *sizes, **kwargs):
            _log("plan", sizes=list(sizes), kwargs=kwargs,
                 buffer_pinned=self._pin_memory_int_workspace_buffer.is_pinned())
            self._plan_info = [0] * 9 + [1]

        def run(self, q, paged_kv_cache, **kwargs):
            return torch.Tensor(q.shape)
    '''
)


@pytest.fixture()
def gpu_doubles(tmp_path):
    """PYTHONPATH with the torch and flashinfer doubles, and the flashinfer double's log."""
    doubles = tmp_path / "gpu-doubles"
    (doubles / "flashinfer").mkdir(parents=True)
    (doubles / "torch.py").write_text(TORCH_DOUBLE)
    (doubles / "flashinfer" / "__init__.py").write_text(FLASHINFER_DOUBLE)
    log = tmp_path / "flashinfer-double.log"

    def run(*args, **knobs):
        env = dict(os.environ, PYTHONPATH=str(doubles), FI_DOUBLE_LOG=str(log), **knobs)
        proc = subprocess.run([sys.executable, str(SCRIPT), "--quiet", "--json",
                               "--patcher", str(tmp_path / "absent.py"), *args],
                              capture_output=True, text=True, timeout=120, env=env)
        events = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        report = json.loads(proc.stdout) if proc.stdout.strip() else {}
        return proc, report, events

    return run


def test_rig_run_builds_the_wrapper_as_vllm_does(gpu_doubles):
    proc, report, events = gpu_doubles("--trials", "2", "--scenarios", "batch4-then-8")
    assert proc.returncode == 0, proc.stderr
    inits = [e for e in events if e["event"] == "init"]
    assert inits and all(e["kwargs"] == {"use_tensor_cores": True, "backend": "fa2"}
                         for e in inits)  # the double's GPU is an SM86, like a rig's 3090
    plans = [e for e in events if e["event"] == "plan"]
    assert plans and all(e["sizes"] == [12, 2, 256, 16] for e in plans)
    assert all(e["kwargs"] == {
        "pos_encoding_mode": "NONE", "window_left": -1, "logits_soft_cap": None,
        "q_data_type": "torch.bfloat16", "kv_data_type": "torch.bfloat16",
        "o_data_type": "torch.bfloat16", "sm_scale": 1 / 16, "non_blocking": True,
        "fixed_split_size": -1, "disable_split_kv": False} for e in plans)
    assert report["modes"] == ["installed"] and "pinned" not in report["totals"]
    assert report["totals"]["installed"] == dict(report["totals"]["installed"], trials=2, ok=2)
    assert "tensor-core (fa2, as vLLM)" in report["summary"]


def test_rig_run_never_plans_on_a_pinned_installed_buffer(gpu_doubles):
    # An unpatched FlashInfer in the serving image: its trials would provoke the race there.
    proc, report, events = gpu_doubles("--trials", "2", FI_DOUBLE_PINNED="1")
    assert proc.returncode == 2, proc.stderr
    assert report["unavailable_kind"] == "refused" and "pinned" in report["unavailable"]
    assert [e for e in events if e["event"] == "plan"] == []
    assert "could not run: refused" in proc.stderr


def test_bench_may_run_an_unpatched_flashinfer(gpu_doubles):
    proc, report, events = gpu_doubles("--trials", "1", "--scenarios", "mtp-next-step",
                                       "--allow-pinned", FI_DOUBLE_PINNED="1")
    assert proc.returncode == 0, proc.stderr
    assert any(e["event"] == "plan" and e["buffer_pinned"] for e in events)


def test_compare_is_refused_on_a_rig_before_touching_the_gpu(gpu_doubles):
    for flags in (["--compare"], ["--bench"], ["--compare", "--bench"]):
        proc, report, events = gpu_doubles("--trials", "2", *flags)
        assert proc.returncode == 2, (flags, proc.stderr)
        assert report["unavailable_kind"] == "refused", flags
        assert "--allow-pinned" in report["unavailable"]
        assert events == []  # no child: not even the probe imported flashinfer


def test_child_refuses_pinned_trials_without_the_bench_flag(capsys):
    spec = {"geometry": GEOMETRY, "seed": 1, "mode": "pinned", "scenario": "batch4-then-8",
            "trials": [0]}
    assert rc.child_main(spec) == 2
    line = capsys.readouterr().out.strip()
    assert line.startswith("@@race FATAL ")
    assert json.loads(line[len("@@race FATAL "):])["kind"] == "refused"


def test_out_of_memory_in_a_trial_could_not_run(gpu_doubles):
    proc, report, _ = gpu_doubles("--trials", "3", TORCH_DOUBLE_OOM="trial")
    assert proc.returncode == 2, proc.stderr
    assert report["unavailable_kind"] == "out-of-memory"
    assert "could not run: out of GPU memory" in report["summary"]
    assert "CUDA out of memory" in report["summary"]
    assert "totals" not in report or report["totals"]["installed"]["crashed"] == 0


def test_too_little_free_memory_is_refused_by_the_probe(gpu_doubles):
    proc, report, events = gpu_doubles("--trials", "3", TORCH_DOUBLE_FREE_MIB="200")
    assert proc.returncode == 2, proc.stderr
    assert report["unavailable_kind"] == "out-of-memory"
    assert "200 MiB free" in report["unavailable"] and "needs about" in report["unavailable"]
    assert [e for e in events if e["event"] == "plan"] == []


def test_out_of_memory_is_recognised():
    class OutOfMemoryError(RuntimeError):  # torch.cuda.OutOfMemoryError's name
        pass

    assert rc.is_out_of_memory(OutOfMemoryError("Tried to allocate 2.00 GiB"))
    assert rc.is_out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 1 GiB"))
    assert rc.is_out_of_memory("plan failed: cudaErrorMemoryAllocation")
    assert not rc.is_out_of_memory(RuntimeError("CUDA error: an illegal memory access"))
    assert not rc.is_out_of_memory("Unsupported group_size: 6")
    # torch 2.11's text on the H200 (bench/results/race-rig-oom-*.json): the pointers cut
    seen = ("AcceleratorError: CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation' "
            "in https://docs.nvidia.com/cuda/cuda-runtime-api/group__CUDART__TYPES.html for "
            "more information.\nCUDA kernel errors might be asynchronously reported at some "
            "other API call, so the stacktrace below might be incorrect.")
    assert rc.is_out_of_memory(seen)
    assert rc.oom_message(seen).startswith("out of GPU memory")
    assert rc.oom_message(seen).endswith(": AcceleratorError: CUDA error: out of memory")


def test_out_of_memory_reported_by_a_child_is_not_a_bad_trial(doubled_self, capsys,
                                                               monkeypatch):
    # The child's two ways: a crashed RESULT saying OOM (the old child's way), or dying with
    # torch's traceback on stderr.
    for how in ("result", "stderr"):
        monkeypatch.setenv("DOUBLE_OOM", how)
        code = rc.main(["--trials", "3", "--quiet", "--scenarios", "batch4-then-8"])
        line = capsys.readouterr().out.strip().splitlines()[-1]
        assert code == 2, (how, line)
        assert "could not run: out of GPU memory" in line, how


def test_decode_path_is_vllms_tensor_core_path_for_a_group_of_6():
    g = dict(GEOMETRY)
    assert g["num_qo_heads"] // g["num_kv_heads"] == 6 and g["use_tensor_cores"] is True
    assert rc.decode_wrapper_kwargs(g, (8, 6)) == {"use_tensor_cores": True, "backend": "fa2"}
    assert rc.decode_wrapper_kwargs(g, (9, 0)) == {"use_tensor_cores": True, "backend": "auto"}
    kw = rc.plan_kwargs(g)
    assert kw["fixed_split_size"] == -1 and kw["disable_split_kv"] is False
    assert kw["window_left"] == -1 and kw["logits_soft_cap"] is None
    # the bench's CUDA-core comparison: FlashInfer refuses fixed_split_size there
    cuda_cores = dict(g, use_tensor_cores=False)
    assert rc.decode_wrapper_kwargs(cuda_cores) == {"use_tensor_cores": False}
    assert "fixed_split_size" not in rc.plan_kwargs(cuda_cores)


def test_memory_estimate_small_and_grows_with_the_lengths():
    need = rc.memory_estimate_mib(GEOMETRY, rc.SCENARIOS)
    assert 256 < need < 1024
    assert rc.memory_estimate_mib(GEOMETRY, ["batch4-then-8"]) < need  # 12 requests, not 33
    assert rc.memory_estimate_mib(dict(GEOMETRY, max_len=8192), rc.SCENARIOS) > need
    assert rc.max_pages(GEOMETRY, ["batch32-then-1"]) == 33 * (4096 // 16 + 1)
