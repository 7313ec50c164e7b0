#!/usr/bin/env bash
# Runs Molecule scenarios phase by phase and prints each phase's wall time (the figures the
# closing notes quote); the instance is destroyed whatever happens.
#   scripts/molecule-timed.sh default deploy
set -euo pipefail
status=0
for scenario in "$@"; do
  phases=(dependency destroy create prepare converge idempotence verify)
  declare -A took=()
  trap 'molecule destroy -s "${scenario}" >/dev/null 2>&1 || true' EXIT
  for phase in "${phases[@]}"; do
    start=$(date +%s.%N)
    if ! molecule "${phase}" -s "${scenario}"; then
      echo "molecule-timed: ${scenario} ${phase} FAILED" >&2; status=1; break
    fi
    took[${phase}]=$(echo "$(date +%s.%N) - ${start}" | bc)
  done
  start=$(date +%s.%N)
  molecule destroy -s "${scenario}" >/dev/null 2>&1 || true
  took[destroy]=$(echo "$(date +%s.%N) - ${start}" | bc)
  trap - EXIT
  echo "== molecule ${scenario}: phase wall times (s)"
  for phase in create prepare converge idempotence verify destroy; do
    printf '   %-12s %8.1f\n' "${phase}" "${took[${phase}]:-0}"
  done
  [ "${status}" -eq 0 ] || exit "${status}"
  unset took
done
