#!/usr/bin/env bash
# On a GPU machine with torch (the lent H200, or a rig inside the vLLM image): for each FlashInfer
# in the carry folder built by build_flashinfer_slim.sh, install it with pip --target, patch its
# decode.py ON DISK with files/patcher.py, and run files/race_check.py --allow-pinned --compare
# --bench (a bench machine: the pinned trials fault on purpose).
# Writes race-<version>-<decode path>.json, patch-<version>.json and run.log into OUT (default
# bench/results/raw). Decode paths: cuda-core (use_tensor_cores=False) and tensor-core (True).
#
#   OUT=/some/dir TRIALS=200 VERSIONS="0.7.2.post1" DECODE_PATHS="cuda-core" bench/race/run_on_gpu.sh
#   RUNS="0.7.2.post1:cuda-core 0.6.16.post3:tensor-core" bench/race/run_on_gpu.sh   # pairs
#
# Exit: 0 when every release, as installed after the patch, had no bad trial; else the worst
# race_check exit code (1 bad trials, 2 could not run).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CARRY=${VDF_CARRY:-$ROOT/.device/race}
OUT=${OUT:-$ROOT/bench/results/raw}
TRIALS=${TRIALS:-200}
JOBS=${JOBS:-12}
BENCH_REPEATS=${BENCH_REPEATS:-200}
HANG_TIMEOUT=${HANG_TIMEOUT:-3}
PY=${PYTHON:-python3}
WORK=${VDF_WORK:-/tmp/vdf-race}
EXTRA=${RACE_CHECK_ARGS:-}
export PYTHONUNBUFFERED=1 FLASHINFER_WORKSPACE_BASE=$WORK/fi-home

mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/run.log") 2>&1
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'

"$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$WORK/deps" \
    "$CARRY"/deps/*.whl || exit 2
worst=0
for whl in "$CARRY"/wheels/flashinfer_python-*.whl; do
    v=$(basename "$whl" | cut -d- -f2)
    paths=${DECODE_PATHS:-cuda-core tensor-core}
    if [ -n "${RUNS:-}" ]; then  # e.g. RUNS="0.7.2.post1:cuda-core 0.6.16.post3:tensor-core"
        paths=$(for r in $RUNS; do [ "${r%%:*}" = "$v" ] && echo "${r#*:}"; done)
    fi
    [ -n "$paths" ] || continue
    case " ${VERSIONS:-$v} " in *" $v "*) ;; *) continue ;; esac
    site=$WORK/fi-$v
    rm -rf "$site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$site" "$whl" || exit 2
    export PYTHONPATH=$site:$WORK/deps
    echo "== FlashInfer $v: patch decode.py on disk with files/patcher.py"
    "$PY" "$ROOT/files/patcher.py" --lib-root "$site/flashinfer" --json > "$OUT/patch-$v.json"
    rc=$?
    cat "$OUT/patch-$v.json"
    if [ "$rc" -ne 0 ]; then echo "patcher exit $rc: not running the check unpatched" >&2; exit 2; fi
    grep -n "pin_memory=" "$site/flashinfer/decode.py" | head -n 8
    for path in $paths; do
        flag=--tensor-cores; [ "$path" = cuda-core ] && flag=--cuda-cores
        echo "== FlashInfer $v, $path decode: race_check --compare --bench" \
            "($TRIALS trials per scenario and mode)"
        # shellcheck disable=SC2086
        "$PY" "$ROOT/files/race_check.py" --trials "$TRIALS" --allow-pinned --compare --bench \
            --jobs "$JOBS" \
            --hang-timeout "$HANG_TIMEOUT" --bench-repeats "$BENCH_REPEATS" $flag \
            --out "$OUT/race-$v-$path.json" $EXTRA
        rc=$?
        echo "== FlashInfer $v, $path decode: race_check exit $rc"
        [ "$rc" -gt "$worst" ] && worst=$rc
    done
done
"$PY" "$ROOT/bench/race/summarize.py" "$OUT"/race-*.json || true
exit "$worst"
