#!/usr/bin/env bash
# Starts the project's Docker engine ("vdf-dockerd") on this machine when none answers.
# Facts this rests on (shared/ENVIRONMENT.md): no engine runs on a fresh machine, PID 1 is not
# systemd, and Debian 12's docker.io cannot start the --privileged systemd targets Molecule needs,
# so Debian 13's docker.io (with Compose v2 as a CLI plugin) is installed through a private APT
# configuration that leaves the machine's own sources alone.
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

STATE_DIR="${VDF_STATE_DIR:-/var/lib/vllm-dual-fast-dev}"
LOG="${STATE_DIR}/dockerd.log"
APT_DIR="${STATE_DIR}/apt"

engine_answers() { timeout 5 docker info >/dev/null 2>&1; }


install_engine() {
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
  export APT_CONFIG="${APT_DIR}/apt.conf" DEBIAN_FRONTEND=noninteractive
  apt-get -q update >/dev/null
  apt-get -q -y install -t trixie --no-install-recommends docker.io docker-compose >/dev/null
}

main() {
  mkdir -p "${STATE_DIR}"
  if engine_answers && docker compose version >/dev/null 2>&1; then
    echo "vdf-dockerd: engine already answers"; return 0
  fi
  if ! command -v dockerd >/dev/null 2>&1 || ! docker compose version >/dev/null 2>&1; then
    echo "vdf-dockerd: installing Debian 13 docker.io + Compose v2"
    install_engine
  fi
  if ! engine_answers; then
    echo "vdf-dockerd: starting dockerd (log ${LOG})"
    # No systemd here: run the daemon in its own session so it outlives this script.
    setsid /usr/sbin/dockerd >>"${LOG}" 2>&1 </dev/null &
    for _ in $(seq 1 60); do engine_answers && break; sleep 1; done
  fi
  engine_answers || { echo "vdf-dockerd: engine did not answer; see ${LOG}" >&2; exit 1; }
  docker compose version
}

main "$@"
