#!/usr/bin/env bash
# Gets a Docker engine that can run what the scenarios need (privileged containers with a private
# cgroup namespace: the systemd rigs), changing as little of this machine as possible:
#   1. an engine that already answers is used as it is, after a probe shows it can run them;
#   2. an installed but stopped engine is started (as "vdf-dockerd", log in the state folder);
#   3. with no engine, the distribution's own docker.io is installed from the machine's sources;
#   4. only when that engine fails the probe (Debian 12's 20.10 here: "unable to apply caps"),
#      Debian 13's docker.io is installed through a private APT configuration, after printing
#      which of the machine's packages that upgrades and why (it needs Debian 13's libc).
# A failed probe is remembered in the state folder by the engine's package version, so the next
# set-up skips that engine and goes straight to Debian 13's. Every package is named before apt
# installs it. `docker-engine.sh stop` (make engine-stop) stops a daemon this script started.
# PID 1 is not systemd on these machines, so the daemon runs in its own session, not as a unit.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STATE_DIR="${VDF_STATE_DIR:-/var/lib/vllm-dual-fast-dev}"
LOG="${STATE_DIR}/dockerd.log"
PIDFILE="${STATE_DIR}/dockerd.pid"
APT_DIR="${STATE_DIR}/apt"
# One line per engine that failed the probe here: "docker.io=<package version> <when>".
FAILED_PROBES="${STATE_DIR}/engine-probe-failed"
# Each probe imports its own image, tagged with this run's process id (two runs at once never
# remove each other's) and labelled, and removes it when the probe ends: no image is left, tagged
# or dangling. Images are only ever removed by that tag or, dangling, by that label.
PROBE_REPO=vdf-engine-probe
PROBE_LABEL=vdf.engine-probe=1
PROBE_IMAGE="${PROBE_REPO}:probe-$$"

say() { echo "docker-engine: $*"; }
engine_answers() { timeout 5 docker info >/dev/null 2>&1; }
engine_version() { docker info --format '{{.ServerVersion}}' 2>/dev/null || echo unknown; }
installed_engine_key() { echo "docker.io=$(dpkg-query -W -f '${Version}' docker.io 2>/dev/null || echo none)"; }
candidate_engine_key() { echo "docker.io=$(apt-cache policy docker.io | awk '/Candidate/ {print $2}')"; }
failed_probe_date() { awk -v key="$1" '$1 == key {print $2; exit}' "${FAILED_PROBES}" 2>/dev/null || true; }
probe_failed_before() { [ -n "$(failed_probe_date "$1")" ]; }
# An engine no docker.io package installed (docker-ce, a static dockerd) has no version to key on:
# nothing is remembered for it, or every such engine would be skipped from then on.
remember_failed_probe() {
  [ "${1#*=}" = none ] && return 0
  probe_failed_before "$1" || echo "$1 $(date -u +%Y-%m-%dT%H:%MZ)" >>"${FAILED_PROBES}"
}

# Docker 20.10 (Debian 12's) fails the probe ("unable to apply caps") where this process's
# capability bounding set lacks a capability the kernel has (these VMs lack CAP_SYS_RESOURCE);
# 26.1 (Debian 13's) passes there. Versions between were not measured, so they are probed.
bounding_set_is_reduced() {
  local last bnd
  last="$(cat /proc/sys/kernel/cap_last_cap 2>/dev/null || echo 0)"
  bnd="$(awk '/^CapBnd:/ {print $2}' /proc/self/status)"
  [ "$(( 16#${bnd:-0} ))" -ne "$(( (1 << (last + 1)) - 1 ))" ]
}

# Why an engine (docker.io=<version>) is known to fail the probe here; nothing when it is not.
known_probe_failure() {
  local major="${1#docker.io=}"; major="${major%%.*}"
  if probe_failed_before "$1"; then
    echo "it failed the probe on this machine on $(failed_probe_date "$1") (delete ${FAILED_PROBES} to probe it again)"
  elif [[ "${major}" =~ ^[0-9]+$ ]] && [ "${major}" -le 20 ] && bounding_set_is_reduced; then
    echo "Docker 20.10 and older fail it where the capability bounding set is reduced, as here (CapBnd $(awk '/^CapBnd:/ {print $2}' /proc/self/status))"
  fi
}

# A one-file image made from this machine's own `true` and the libraries it links: no registry.
build_probe_image() {
  local bin; bin="$(type -P true)"
  # shellcheck disable=SC2046  # word splitting of the library list is wanted
  tar -ch "${bin}" $(ldd "${bin}" | grep -o '/[^ ]*') 2>/dev/null \
    | docker import -c "CMD [\"${bin}\"]" -c "LABEL ${PROBE_LABEL}" - "${PROBE_IMAGE}" >/dev/null
}

remove_probe_image() {
  docker image rm -f "${PROBE_IMAGE}" >/dev/null 2>&1 || true
  # Leftovers of probes that were killed: the tag of a run that no longer exists, and any
  # dangling image with the probe's label. Before the label, probes re-imported one fixed tag,
  # leaving the image before dangling each time: that tag goes too.
  local tag
  for tag in $(docker images "${PROBE_REPO}" --format '{{.Tag}}' 2>/dev/null); do
    case "${tag}" in
      probe-*) kill -0 "${tag#probe-}" 2>/dev/null || docker image rm -f "${PROBE_REPO}:${tag}" >/dev/null 2>&1 || true ;;
      latest) docker image rm "${PROBE_REPO}:latest" >/dev/null 2>&1 || true ;;
    esac
  done
  docker image prune -f --filter "label=${PROBE_LABEL}" >/dev/null 2>&1 || true
}

# What the Molecule targets and the simulated rig ask of the engine: 0 it can, 1 it cannot, 2 the
# probe image could not be made (tar, ldd or docker import): no verdict on the engine.
engine_runs_rigs() {
  local err
  trap remove_probe_image EXIT
  build_probe_image || { remove_probe_image; return 2; }
  if err="$(docker run --rm --privileged --cgroupns=private --tmpfs /run "${PROBE_IMAGE}" 2>&1)"; then
    remove_probe_image
    return 0
  fi
  say "probe: a privileged container failed to start: $(echo "${err}" | head -1 | cut -c1-200)"
  remove_probe_image
  return 1
}

# /run is not a tmpfs on these machines, so dockerd's and its containerd's PID files outlive a
# restart. dockerd refuses to start while its file names any live process ("process with PID N is
# still running"), and it takes a live PID in containerd's file for a running containerd and waits
# on a socket no one serves. After a restart those PIDs belong to other processes: such a file goes.
DAEMON_PIDFILES="${VDF_DAEMON_PIDFILES:-/run/docker.pid:dockerd /run/docker/containerd/containerd.pid:containerd}"
remove_stale_daemon_pidfiles() {
  local entry file name pid
  for entry in ${DAEMON_PIDFILES}; do
    file="${entry%:*}"; name="${entry##*:}"
    [ -e "${file}" ] || continue
    pid="$(tr -dc 0-9 <"${file}")"
    [ -n "${pid}" ] && [ "$(cat "/proc/${pid}/comm" 2>/dev/null)" = "${name}" ] && continue
    say "removing ${file}: it names PID ${pid:-none}, which is no running ${name} (left by a restart)"
    rm -f "${file}"
  done
}

# How many lines the engine's log has now (0 before its first start, quietly: the `2>` comes
# first, or a missing file's error would reach the terminal before it applies).
log_lines_so_far() { wc -l 2>/dev/null <"${LOG}" || echo 0; }

start_engine() {
  remove_stale_daemon_pidfiles
  say "starting dockerd $(dockerd --version 2>/dev/null | cut -d, -f1) (log ${LOG})"
  local log_start; log_start="$(log_lines_so_far)"
  setsid /usr/sbin/dockerd >>"${LOG}" 2>&1 </dev/null &
  echo $! >"${PIDFILE}"
  for _ in $(seq 1 60); do engine_answers && return 0; sleep 1; done
  say "the engine did not answer within 60 s; the end of what it logged (${LOG}):" >&2
  tail -n "+$((log_start + 1))" "${LOG}" | tail -n 15 | sed 's/^/    /' >&2
  exit 1
}

stop_our_engine() {
  local pid; pid="$(cat "${PIDFILE}" 2>/dev/null || true)"
  if [ -n "${pid}" ]; then kill "${pid}" 2>/dev/null || true; fi
  for _ in $(seq 1 30); do kill -0 "${pid:-0}" 2>/dev/null || break; sleep 1; done
  rm -f "${PIDFILE}"
}

# apt's machine-readable status, shown as one line per download step and per installed package.
apt_progress() {
  apt-get -o APT::Status-Fd=3 "$@" 3>&1 >/dev/null | awk -F: '
    $1 == "dlstatus" && int($3) != last { last = int($3); printf "  downloading %3d%%\n", last; fflush() }
    $1 == "pmstatus" && $4 ~ /^Installed/ { printf "  %3d%% %s\n", $3, $4; fflush() }'
}

install_distro_engine() {
  say "no Docker engine here: trying the distribution's docker.io (${1#docker.io=}) first, as it"
  say "was not probed on this machine yet; if it fails the probe, that is remembered in"
  say "${FAILED_PROBES} and the next set-up goes straight to Debian 13's"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -s install --no-install-recommends docker.io | announce_new_packages docker-engine
  with_no_service_starts apt_progress -y -q install --no-install-recommends docker.io
}

private_apt_config() {
  local mirror; mirror="$(mirror_uri)"
  mkdir -p "${APT_DIR}/lists/partial" "${APT_DIR}/cache/archives/partial" "${APT_DIR}/sources"
  cat >"${APT_DIR}/sources/debian.sources" <<SRC
Types: deb
URIs: ${mirror}
Suites: bookworm trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  cat >"${APT_DIR}/apt.conf" <<CONF
Dir::Etc::SourceList "/dev/null";
Dir::Etc::SourceParts "${APT_DIR}/sources";
Dir::State::Lists "${APT_DIR}/lists";
Dir::Cache "${APT_DIR}/cache";
APT::Default-Release "bookworm";
CONF
  echo "${APT_DIR}/apt.conf"
}

install_newer_engine() {
  local conf; conf="$(private_apt_config)"
  export APT_CONFIG="${conf}" DEBIAN_FRONTEND=noninteractive
  apt-get -q update >/dev/null
  local plan; plan="$(apt-get -s -t trixie install --no-install-recommends docker.io docker-compose)"
  say "the distribution's engine (${1}) cannot start privileged containers with a private"
  say "cgroup namespace here, which the systemd rigs need. Installing Debian 13's docker.io,"
  say "which can. These packages of this machine are upgraded to their Debian 13 versions"
  say "(docker.io itself, and whatever of Debian 13's docker.io's dependencies is newer there):"
  echo "${plan}" | awk '/^Inst / && $3 ~ /^\[/ {gsub(/[\[\]]/, "", $3); gsub(/\(/, "", $4); printf "    %-28s %s -> %s\n", $2, $3, $4}'
  echo "${plan}" | announce_new_packages docker-engine
  with_no_service_starts apt_progress -y -q -t trixie install --no-install-recommends docker.io docker-compose
}

# Debian 13's engine in place of one that fails the probe (or is known to), started and probed.
replace_with_newer_engine() {
  install_newer_engine "$1"
  start_engine
  engine_runs_rigs || { say "even Debian 13's engine cannot start the rigs; see ${LOG}" >&2; exit 1; }
}

stop_command() {
  if [ ! -s "${PIDFILE}" ]; then
    if engine_answers; then say "the running engine was not started by this script: left alone"
    else say "no engine started by this script is running"; fi
    return 0
  fi
  say "stopping the dockerd this script started (pid $(cat "${PIDFILE}")); images and volumes stay"
  stop_our_engine
}

main() {
  mkdir -p "${STATE_DIR}"
  [ "${1:-}" = stop ] && { stop_command; return 0; }
  if engine_answers; then
    local probe=0; engine_runs_rigs || probe=$?
    if [ "${probe}" -eq 0 ]; then say "using the running engine ($(engine_version))"; return 0; fi
    [ "${probe}" -eq 2 ] && { say "could not make the probe image (see above); nothing remembered" >&2; exit 1; }
    if [ ! -s "${PIDFILE}" ]; then
      say "the running engine ($(engine_version)) cannot start privileged containers with a private" >&2
      say "cgroup namespace, which the Molecule rigs need. It is not ours, so it is left alone:" >&2
      say "stop it (or point DOCKER_HOST at one that can) and run this again." >&2
      exit 1
    fi
    remember_failed_probe "$(installed_engine_key)"
    stop_our_engine
  fi
  if ! command -v dockerd >/dev/null 2>&1; then
    apt-get -q update >/dev/null
    local candidate why; candidate="$(candidate_engine_key)"; why="$(known_probe_failure "${candidate}")"
    if [ -n "${why}" ]; then
      say "no Docker engine here; skipping the distribution's ${candidate}: ${why}"
      replace_with_newer_engine "${candidate}, not installed"
      say "engine $(engine_version) answers and runs privileged systemd rigs"
      return 0
    fi
    install_distro_engine "${candidate}"
  fi
  local installed why; installed="$(installed_engine_key)"; why="$(known_probe_failure "${installed}")"
  if [ -n "${why}" ]; then
    say "not starting the installed ${installed}: ${why}"
    replace_with_newer_engine "${installed}"
  else
    engine_answers || start_engine
    local probe=0; engine_runs_rigs || probe=$?
    [ "${probe}" -eq 2 ] && { say "could not make the probe image (see above); nothing remembered" >&2; exit 1; }
    if [ "${probe}" -ne 0 ]; then
      remember_failed_probe "${installed}"
      say "remembered in ${FAILED_PROBES}: the next set-up skips ${installed}"
      stop_our_engine
      replace_with_newer_engine "${installed}"
    fi
  fi
  say "engine $(engine_version) answers and runs privileged systemd rigs"
}

# Sourced (tests/integration/test_docker_engine_script.py), it only defines its functions.
if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then main "$@"; fi
