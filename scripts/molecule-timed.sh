#!/usr/bin/env bash
# Runs Molecule scenarios phase by phase and prints each phase's wall time (the figures the
# closing notes quote) and a pass/fail line per scenario; the rigs are destroyed whatever happens,
# and a failed scenario does not keep the next ones from running (the exit status says it failed).
#   scripts/molecule-timed.sh default deploy
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
[ -t 1 ] || export NO_COLOR=1 PY_COLORS=0 ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
status=0
# A scenario's phases are its test_sequence (its molecule.yml over the base, .config/molecule/
# config.yml) up to verify: the last destroy is run and timed apart, whatever happened, and
# `dependency` is a no-op in every scenario.
phases_of() { python3 scripts/molecule_config.py "$1" phases; }
# The strategy a scenario's idempotence phase runs under (its provisioner env
# VDF_IDEMPOTENCE_STRATEGY; empty: as every other phase). That phase re-runs converge on rigs
# that are already converged, so nothing reboots in it and Mitogen can take it (docs/operations.md,
# "Faster runs with Mitogen"); converge itself stays on stock Ansible where it reboots a rig.
idempotence_strategy_of() { python3 scripts/molecule_config.py "$1" idempotence; }
PHASE_LOG="$(mktemp)" RIG=""
# What Ansible says when Docker's exec returned no output at all for its temporary folder, or
# runc could not start the command in the rig (exit 126: nothing of it ran).
DOCKER_EXEC_LOST='failed to resolve remote temporary directory from ansible-tmp-[0-9.-]+: .* returned empty string'
DOCKER_EXEC_LOST+='|OCI runtime exec failed: exec failed: unable to start container process'

# The rig of the scenario under way is destroyed however the script ends.
trap '[ -z "${RIG}" ] || molecule destroy -s "${RIG}" >/dev/null 2>&1; rm -f "${PHASE_LOG}"' EXIT

run_phase() {  # phase scenario: runs one Molecule phase, its output shown and kept in PHASE_LOG
  # Lines of Molecule's own that read like failures in a passing run, labelled where they appear:
  # a scenario "skipped" when create/prepare were already done, the create playbook's poll, and
  # its search for a `default` scenario (for state shared between scenarios; there is none here).
  local strategy=""
  if [ "$1" = idempotence ]; then
    strategy=$(idempotence_strategy_of "$2") || return 1
    [ -z "${strategy}" ] || echo "molecule-timed: $2 idempotence under ANSIBLE_STRATEGY=${strategy}"
  fi
  ${strategy:+env ANSIBLE_STRATEGY="${strategy}"} molecule "$1" -s "$2" 2>&1 \
    | sed -u -e 's/^\(.*Molecule executed 1 scenario (1 skipped)\)$/\1 [expected: its rig was already created and prepared]/' \
        -e "s|^\(CRITICAL 'molecule/default/molecule.yml' glob failed.  Exiting.\)$|\1 [expected: no default scenario here; Molecule goes on without shared state]|" \
        -e 's/^\(FAILED - RETRYING: \[localhost\]: Wait for instance(s) \(creation\|deletion\) to complete.*\)$/\1 [expected: Molecule polls until the container is up]/' \
    | tee "${PHASE_LOG}"
  return "${PIPESTATUS[0]}"
}

why_failed() {  # scenario phase: the failure's own lines, marked "why|" so the summary repeats them
  # (CI keeps only the end of the output: without these a failed phase says nothing of its cause).
  grep -aE 'fatal:|FAILED!|ERROR|CRITICAL|"msg":|^ *msg:|Traceback|Error:' "${PHASE_LOG}" \
    | grep -avF '[expected:' | tail -12 | cut -c1-240 | sed "s/^/   why| $1 $2: /"
}

for scenario in "$@"; do
  sequence=$(phases_of "${scenario}") \
    || { echo "molecule-timed: ${scenario}: no test_sequence with verify in its molecule.yml" >&2; status=1; continue; }
  read -r -a phases <<<"${sequence}"
  declare -A took=()
  result=passed
  RIG="${scenario}"
  for phase in "${phases[@]}"; do
    echo "== molecule ${scenario}: ${phase}"
    start=$(date +%s.%N)
    run_phase "${phase}" "${scenario}"
    rc=$?
    # `molecule create` also runs the scenario's prepare playbook: only a failure before prepare
    # began is Molecule's own container start, none of the project's code, and is tried once
    # more after a clean-up, saying why the first one failed (CI saw one fail, its cause not kept).
    # So is a prepare that failed in Docker's exec (DOCKER_EXEC_LOST below: seen in `fleet`'s
    # prepare, 2026-12-04): on fresh rigs, so no prepare ever runs twice on one rig.
    if [ "${rc}" -ne 0 ] && [ "${phase}" = create ] \
        && { ! grep -qF "[${scenario} > prepare] Executing" "${PHASE_LOG}" \
             || grep -qE "${DOCKER_EXEC_LOST}" "${PHASE_LOG}"; }; then
      why_failed "${scenario}" create
      echo "molecule-timed: ${scenario} create failed; removing what it left and creating once more"
      molecule destroy -s "${scenario}" >/dev/null 2>&1 || true
      run_phase create "${scenario}"
      rc=$?
    fi
    # Docker's exec can fail under load before the command ran or wrote anything, seen here in
    # 2026-12 with both lanes busy: its API ended the output stream of Ansible's mkdir ("failed to
    # resolve remote temporary directory ... returned empty string", community.docker issue 644,
    # open; a driver converge), and runc could not start a module ("OCI runtime exec failed ...
    # read init-p: connection reset by peer", rc 126; an existing idempotence). That is the
    # engine, not the role: converge (site.yml, which must converge from any partial run) and
    # idempotence (a failed run counts no change) are run once more, saying why. Verify is not:
    # its fault sequences do not start again halfway.
    if [ "${rc}" -ne 0 ] && { [ "${phase}" = converge ] || [ "${phase}" = idempotence ]; } \
        && grep -qE "${DOCKER_EXEC_LOST}" "${PHASE_LOG}"; then
      why_failed "${scenario}" "${phase}"
      echo "molecule-timed: ${scenario} ${phase} failed in Docker's exec, not in the role; running ${phase} once more"
      run_phase "${phase}" "${scenario}"
      rc=$?
    fi
    if [ "${rc}" -ne 0 ]; then
      echo "molecule-timed: ${scenario} ${phase} FAILED" >&2; result=FAILED; status=1
      why_failed "${scenario}" "${phase}"
      break
    fi
    # The first destroy clears a rig left by an earlier run; it is timed apart from the last one.
    took[$([ "${phase}" = destroy ] && echo cleanup || echo "${phase}")]=$(echo "$(date +%s.%N) - ${start}" | bc)
  done
  start=$(date +%s.%N)
  molecule destroy -s "${scenario}" >/dev/null 2>&1 || true
  took[destroy]=$(echo "$(date +%s.%N) - ${start}" | bc)
  RIG=""
  echo "== molecule ${scenario}: ${result}"
  total=0
  for phase in cleanup create prepare converge idempotence verify destroy; do
    if [ -z "${took[${phase}]:-}" ]; then printf '   %-12s %8s\n' "${phase}" -; continue; fi    # not run
    printf '   %-12s %8.1f\n' "${phase}" "${took[${phase}]}"
    total=$(echo "${total} + ${took[${phase}]}" | bc)
  done
  printf '   %-12s %8.1f\n' total "${total}"
  unset took
done
exit "${status}"
