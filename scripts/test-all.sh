#!/usr/bin/env bash
# The README's test command (`make test`): every step in order, each one's output as it runs,
# then a short summary (lint, pytest counts, each Molecule scenario's result and phase times,
# total time) whether the run passed or failed. The full log is kept in .ci/last-run.log.
#   scripts/test-all.sh [scenario ...]    (default: the Makefile's SCENARIOS)
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=.ci/last-run.log
SUMMARY="$(mktemp)"
mkdir -p .ci && : >"${LOG}"
started=$(date +%s)
failed=0
[ -t 1 ] || export NO_COLOR=1 PY_COLORS=0 ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0

step() {  # name command...: runs one step, records its result and wall time
  local name="$1" t0 rc; shift
  t0=$(date +%s)
  echo "== ${name}: $*" | tee -a "${LOG}"
  "$@" 2>&1 | tee -a "${LOG}"
  rc=${PIPESTATUS[0]}
  printf '%-10s %-6s %5ss\n' "${name}" "$([ "${rc}" -eq 0 ] && echo ok || echo FAILED)" "$(( $(date +%s) - t0 ))" >>"${SUMMARY}"
  [ "${rc}" -eq 0 ] || failed=1
  return "${rc}"
}

summary() {
  echo
  echo "== summary of make test ($(date -u +%FT%TZ))"
  cat "${SUMMARY}"
  grep -aE '^=+ .*(passed|failed|error).* in [0-9.]+s' "${LOG}" | tail -1 | sed 's/^=* */pytest:    /; s/ =*$//'
  grep -aE '^(== molecule [a-z0-9_-]+: (passed|FAILED)|   (cleanup|create|prepare|converge|idempotence|verify|destroy|total) +[0-9.]+$)' "${LOG}" \
    | sed 's/^== //'
  echo "total:     $(( ($(date +%s) - started) / 60 )) min $(( ($(date +%s) - started) % 60 )) s, $([ "${failed}" -eq 0 ] && echo PASSED || echo FAILED)"
  rm -f "${SUMMARY}"
}
trap summary EXIT

leftovers() {  # what the tests left where a person's real files go: new reports, dangling images
  local found
  found=$(find reports -newer "${MARK}" -print 2>/dev/null; docker images -q -f dangling=true | grep -vxF -f "${MARK}" || true)
  [ -z "${found}" ] && { echo "nothing left in reports/ and no dangling image"; return 0; }
  echo "make test left these behind (tests must write into their own temporary folders):"
  echo "${found}" | sed 's/^/  /'
  return 1
}

MARK="$(mktemp)"    # its time is the run's start; its lines, the dangling images before it
step setup make --no-print-directory setup || exit 1
docker images -q -f dangling=true >"${MARK}"
step lint make --no-print-directory lint
step pytest make --no-print-directory pytest
step molecule ./scripts/molecule-timed.sh "$@"
step leftovers leftovers
rm -f "${MARK}"
exit "${failed}"
