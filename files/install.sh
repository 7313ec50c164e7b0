#!/bin/sh
# fi-pinq hook: a vLLM container's entrypoint runs this before `exec vllm serve ...`, e.g.
#   sh /opt/vdf-patches/install.sh && exec vllm serve ...
# It runs patcher.py (next to this script; the folder may be mounted read-only) with the
# container's python against the FlashInfer that vLLM will import, prints ONE line with the
# outcome, and exits non-zero on anything but success, so a `set -e` entrypoint never serves
# an unpatched FlashInfer (vllm#40756).
#
# Environment: FI_PINQ_LIB_ALL=1 also patches prefill.py, sparse.py, pod.py;
# FI_PINQ_LIB_ROOT=DIR names the flashinfer package folder; FI_PINQ_PYTHON picks the interpreter.
# Exit codes: the patcher's (0 ok, 1 unexpected error, 2 drift/refused); 127 no python found.
set -u

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd) || exit 1

py=${FI_PINQ_PYTHON:-}
if [ -z "$py" ]; then
    if command -v python3 >/dev/null 2>&1; then
        py=python3
    elif command -v python >/dev/null 2>&1; then
        py=python
    else
        echo "fi-pinq: FAILED (exit 127): no python3 or python on PATH; not serving unpatched" >&2
        exit 127
    fi
fi

set -- "$here/patcher.py"
case ${FI_PINQ_LIB_ALL:-} in
    1 | true | yes) set -- "$@" --all ;;
esac

# No bytecode next to patcher.py: its folder is read-only.
out=$(PYTHONDONTWRITEBYTECODE=1 "$py" "$@" 2>&1)
rc=$?
line=$(printf '%s\n' "$out" | tail -n 1)

if [ "$rc" -eq 0 ]; then
    printf '%s\n' "$line"
    exit 0
fi
[ -n "$line" ] || line="patcher.py printed nothing"
printf 'fi-pinq: FAILED (exit %s): %s\n' "$rc" "${line#fi-pinq: }" >&2
exit "$rc"
