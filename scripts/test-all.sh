#!/usr/bin/env bash
# The README's test command (`make test`): set-up (the virtualenv then lint, beside the engine
# and images), then two lanes at once, then a short summary (lint, pytest counts, each Molecule
# scenario's result and phase times, total time) whether the run passed or failed. A Molecule
# run keeps about one core busy (the modules' Python on the rig, then Ansible on the controller,
# in turn), so on two cores a second lane uses the other: lane "scenarios" runs the Molecule
# scenarios, lane "pytest" runs pytest, then the scenarios named in VDF_AFTER_PYTEST (default
# "fleet existing", so that both lanes take about as long: deploy and driver took 38 and 26 min
# in CI, pytest, fleet and existing 23, 34 and 4 here). No two scenarios share a rig, a package
# cache or a port. VDF_LANES=1 runs everything in one lane, VDF_LANES=3 in three (below). Each lane's output is printed as it comes,
# its lines marked [lint], [scenarios] or [pytest]; the logs are .ci/last-run.log (all) and
# .ci/lane-<lane>.log.
#   scripts/test-all.sh [scenario ...]    (default: the Makefile's SCENARIOS)
# shellcheck disable=SC2030,SC2031  # a lane's subshell logs to its own LOG; tee, to the run's
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
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
  printf '%-22s %-6s %5ss\n' "${name}" "$([ "${rc}" -eq 0 ] && echo ok || echo FAILED)" "$(( $(date +%s) - t0 ))" >>"${SUMMARY}"
  return "${rc}"
}

lane() {  # name function: runs a lane's steps in the background (its own log; lines marked)
  local name="$1" fn="$2"
  ( LOG=".ci/lane-${name}.log"; : >"${LOG}"; "${fn}" ) 2>&1 | sed -u "s/^/[${name}] /" | tee -a "${LOG}" &
  LANE_PIDS+=("$!")
}

summary() {
  local log; log="$(cat .ci/lane-*.log 2>/dev/null)"    # each lane's lines in order, unmarked
  echo
  echo "== summary of make test ($(date -u +%FT%TZ))"
  cat "${SUMMARY}"
  grep -aE '^=+ .*(passed|failed|error).* in [0-9.]+s' <<<"${log}" | tail -1 | sed 's/^=* */pytest:    /; s/ =*$//'
  # A line per scenario, its phases' seconds on it: CI keeps only the last lines of the output.
  awk '/^== molecule [a-z0-9_-]+: (passed|FAILED)$/ { if (line) print line; sub(/^== /, ""); line = $0; next }
       line && /^   (cleanup|create|prepare|converge|idempotence|verify|destroy|total) +([0-9.]+|-)$/ {
         line = line sprintf("  %s %s", $1, $2); next }
       END { if (line) print line }' <<<"${log}"
  grep -aE '^FAILED tests/' <<<"${log}" | cut -c1-240 | sed 's/^/   why| pytest: /'
  grep -aE '^   why\| ' <<<"${log}"
  grep -q FAILED "${SUMMARY}" && failed=1
  echo "total:     $(( ($(date +%s) - started) / 60 )) min $(( ($(date +%s) - started) % 60 )) s, $([ "${failed}" -eq 0 ] && echo PASSED || echo FAILED)"
  rm -f "${SUMMARY}"
}
trap summary EXIT

leftovers() {  # what the tests left where a person's real files go: new reports, dangling images
  local found
  found=$(find reports -newer "${MARK}" -print 2>/dev/null; docker images -q -f dangling=true | grep -vxF -f "${MARK}" || true)
  [ -z "${found}" ] && { echo "nothing left in reports/ and no dangling image"; return 0; }
  echo "make test left these behind (tests must write into their own temporary folders):"
  while IFS= read -r line; do echo "  ${line}"; done <<<"${found}"
  return 1
}

# The scenarios of each lane, in the order given. With VDF_LANES=3 a third lane runs the
# scenarios in VDF_OWN_LANE (default "fleet") from the start, and pytest is followed by
# VDF_AFTER_PYTEST's (default "driver"). Measured once (docs/testing.md, "Tests"): no faster than two
# lanes on two cores, since every scenario slowed beside the others.
if [ "${VDF_LANES:-2}" -ge 3 ]; then
  after_default="driver" own_default="fleet"
else
  after_default="fleet existing" own_default=""
fi
AFTER_PYTEST=() SCENARIOS=() OWN_LANE=() LANE_PIDS=()
for scenario in "$@"; do
  if [[ " ${VDF_AFTER_PYTEST:-${after_default}} " == *" ${scenario} "* ]]; then AFTER_PYTEST+=("${scenario}")
  elif [ "${VDF_LANES:-2}" -ge 3 ] && [[ " ${VDF_OWN_LANE:-${own_default}} " == *" ${scenario} "* ]]; then
    OWN_LANE+=("${scenario}")
  else SCENARIOS+=("${scenario}"); fi
done
scenarios_lane() { step molecule ./scripts/molecule-timed.sh "${SCENARIOS[@]}"; }
own_lane() { step molecule-own-lane ./scripts/molecule-timed.sh "${OWN_LANE[@]}"; }
pytest_lane() {
  # Set-up is done: -o keeps make from probing the engine and images again while rigs run.
  step pytest make --no-print-directory -o venv -o images -o host-packages pytest
  step molecule-after-pytest ./scripts/molecule-timed.sh "${AFTER_PYTEST[@]}"
}

MARK="$(mktemp)"    # its time is the run's start; its lines, the dangling images before it
rm -f .ci/lane-*.log
# Set-up in two lanes, both mostly waiting on downloads: the virtualenv and then lint (it needs
# nothing else), beside the engine, images and host packages (`make system`).
venv_lane() {
  step venv make --no-print-directory venv && step bytecode make --no-print-directory bytecode \
    && step lint make --no-print-directory lint
}
LANE_PIDS=()
lane lint venv_lane
VENV_PID="${LANE_PIDS[0]}"; LANE_PIDS=()
step setup make --no-print-directory system || { wait "${VENV_PID}"; exit 1; }
wait "${VENV_PID}"
grep -q '^venv .*FAILED' "${SUMMARY}" && exit 1    # nothing runs without the virtualenv
docker images -q -f dangling=true >"${MARK}"
trap 'trap - INT TERM; kill 0' INT TERM    # a stopped run stops both lanes
if [ "${VDF_LANES:-2}" -ge 3 ]; then
  echo "== three lanes at once, lines marked: [scenarios] ${SCENARIOS[*]:-}; [own] ${OWN_LANE[*]:-};" \
    "[pytest] pytest ${AFTER_PYTEST[*]:-}" | tee -a "${LOG}"
  lane scenarios scenarios_lane
  lane own own_lane
  lane pytest pytest_lane
elif [ "${VDF_LANES:-2}" -ge 2 ]; then
  echo "== two lanes at once, lines marked: [scenarios] ${SCENARIOS[*]:-}; [pytest] pytest ${AFTER_PYTEST[*]:-}" \
    | tee -a "${LOG}"
  lane scenarios scenarios_lane
  lane pytest pytest_lane
else
  one_lane() { pytest_lane; scenarios_lane; }
  lane one one_lane
fi
wait "${LANE_PIDS[@]}"
step leftovers leftovers
rm -f "${MARK}"
! grep -q FAILED "${SUMMARY}"    # the status: every step of both lanes passed (the summary follows)
