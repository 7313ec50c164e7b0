#!/usr/bin/env bash
# On the lent GPU machine: prove the canary's use of files/race_check.py (bench/results/README.md,
# "Rig use"). For each FlashInfer in the carry folder built by build_flashinfer_slim.sh:
#   1. unpatched, the rig argv: refused before any plan() (exit 2), nothing provoked;
#   2. patched on disk with files/patcher.py, the rig argv as health.yml runs it
#      (race_check.py --patcher patcher.py: installed trials only, vLLM's decode path, 1 child);
#   3. out of GPU memory beside a stand-in "engine" (a process holding all but OOM_A_LEAVE MiB):
#      a. held before the check starts (room for a CUDA context, not for the check: the probe's
#      free-memory check; with 700 MiB left the probe's own allocations fail instead), b. taken
#      right after the probe (the trial child fails): all must be exit 2, "could not run";
#   4. the bench: --allow-pinned --compare on the same files, which must still find the race.
# The kernel log's Xid lines are counted before and after each step when dmesg can be read.
# Writes race-rig-<version>.json, race-rig-oom-<a|b>-<version>.json, race-bench-<version>.json
# and rig.log into OUT.
#
#   OUT=/some/dir TRIALS=50 BENCH_TRIALS=50 JOBS=12 bench/race/rig_on_gpu.sh
#   STEPS="unpatched oom-a" OOM_A_LEAVE=1000 bench/race/rig_on_gpu.sh   # some steps only
#
# Exit: 0 when every step gave the exit code it must (rig 0, refusals and OOM 2, bench 0 with
# pinned bad trials), else 1.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CARRY=${VDF_CARRY:-$ROOT/.device/race}
OUT=${OUT:-$ROOT/bench/results/raw}
TRIALS=${TRIALS:-50}
BENCH_TRIALS=${BENCH_TRIALS:-50}
JOBS=${JOBS:-12}
STEPS=${STEPS:-unpatched rig oom-a oom-b bench}
OOM_A_LEAVE=${OOM_A_LEAVE:-1000}  # MiB left free: a context fits, the check's estimate does not
PY=${PYTHON:-python3}
WORK=${VDF_WORK:-/tmp/vdf-race}
CHECK=$ROOT/files/race_check.py
PATCHER=$ROOT/files/patcher.py
export PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=$WORK/fi-home

mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/rig.log") 2>&1
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
"$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$WORK/deps" \
    "$CARRY"/deps/*.whl || exit 2

xids() { dmesg 2>/dev/null | grep -c 'NVRM: Xid' || true; }
dmesg >/dev/null 2>&1 && echo "dmesg readable: Xid lines so far $(xids)" || echo "dmesg not readable here"
status=0
want() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
expect() {  # expect NAME WANT GOT
    if [ "$2" = "$3" ]; then echo "== $1: exit $3 (as it must)"; else echo "== $1: exit $3, MUST BE $2"; status=1; fi
}
timed() {  # timed NAME CMD...: run, print wall seconds and the Xid lines it added
    local name=$1 t0 x0 rc; shift
    x0=$(xids); t0=$(date +%s%N)
    "$@"; rc=$?
    echo "== $name: $(( ($(date +%s%N) - t0) / 1000000 )) ms, Xid lines added: $(( $(xids) - x0 ))"
    return $rc
}
hog() {  # hog LEAVE_MIB [WAIT_FILE PATTERN]: hold all but LEAVE_MIB of the GPU until killed
    "$PY" - "$@" <<'EOF' &
import sys, time, torch
leave = int(sys.argv[1]) << 20
if len(sys.argv) > 3:  # wait for the check's probe to pass, then take the room
    while sys.argv[3] not in open(sys.argv[2], errors="replace").read():
        time.sleep(0.02)
torch.cuda.init()
free, total = torch.cuda.mem_get_info()
held = torch.empty(max(free - leave, 0), dtype=torch.uint8, device="cuda")
free2, _ = torch.cuda.mem_get_info()
print(f"hog: holding {held.numel() >> 20} MiB, {free2 >> 20} MiB free of {total >> 20}", flush=True)
time.sleep(600)
EOF
    HOG=$!
}

for whl in "$CARRY"/wheels/flashinfer_python-*.whl; do
    v=$(basename "$whl" | cut -d- -f2)
    case " ${VERSIONS:-$v} " in *" $v "*) ;; *) continue ;; esac
    site=$WORK/fi-$v
    rm -rf "$site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$whl" || exit 2
    export PYTHONPATH=$site:$WORK/deps

    if want unpatched; then
        echo "== FlashInfer $v unpatched: the rig argv"
        timed "unpatched $v" "$PY" "$CHECK" --patcher "$PATCHER" --trials 5 \
            --out "$OUT/race-rig-unpatched-$v.json"
        expect "unpatched $v (refused)" 2 $?
    fi

    "$PY" "$PATCHER" --lib-root "$site/flashinfer" --json > "$WORK/patch-$v.json" || exit 2
    echo "== FlashInfer $v patched: $(grep -c 'pin_memory=False' "$site/flashinfer/decode.py") unpinned allocations in decode.py"

    if want rig; then
        echo "== FlashInfer $v patched: the rig argv (as health.yml runs it), $TRIALS trials per scenario"
        timed "rig $v" "$PY" "$CHECK" --patcher "$PATCHER" --trials "$TRIALS" \
            --out "$OUT/race-rig-$v.json"
        expect "rig $v" 0 $?
    fi

    if want oom-a; then
        echo "== FlashInfer $v: out of GPU memory (a) held before the check, $OOM_A_LEAVE MiB left"
        hog "$OOM_A_LEAVE"; sleep 8
        timed "oom-a $v" "$PY" "$CHECK" --patcher "$PATCHER" --trials 3 \
            --out "$OUT/race-rig-oom-a-$v.json"
        expect "oom-a $v" 2 $?
        kill "$HOG"; wait "$HOG" 2>/dev/null
    fi

    if want oom-b; then
        echo "== FlashInfer $v: out of GPU memory (b) taken right after the probe"
        : > "$WORK/oom-b.log"
        hog 64 "$WORK/oom-b.log" "probe:"
        timed "oom-b $v" "$PY" "$CHECK" --patcher "$PATCHER" --trials 3 \
            --out "$OUT/race-rig-oom-b-$v.json" 2> >(tee "$WORK/oom-b.log" >&2)
        expect "oom-b $v" 2 $?
        kill "$HOG"; wait "$HOG" 2>/dev/null
    fi

    if want bench; then
        echo "== FlashInfer $v patched: the bench, --allow-pinned --compare, $BENCH_TRIALS trials"
        timed "bench $v" "$PY" "$CHECK" --patcher "$PATCHER" --allow-pinned --compare \
            --trials "$BENCH_TRIALS" --jobs "$JOBS" --hang-timeout 3 \
            --out "$OUT/race-bench-$v.json"
        expect "bench $v" 0 $?
        "$PY" - "$OUT/race-bench-$v.json" <<'EOF' || status=1
import json, sys
r = json.load(open(sys.argv[1]))
bad = r.get("totals", {}).get("pinned", {}).get("bad", 0)
print(f"== bench pinned bad trials: {bad}")
sys.exit(0 if bad > 0 else 1)
EOF
    fi
done
echo "== done, status $status"
exit "$status"
