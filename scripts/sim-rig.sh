#!/usr/bin/env bash
# The simulated rig for `make demo`: the same systemd target image and test doubles as Molecule,
# kept running as container "vdf-sim-rig" (its Docker data in volume "vdf-sim-rig-docker").
#   scripts/sim-rig.sh up      start it and put the doubles in place
#   scripts/sim-rig.sh down    remove it and its volume
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
NAME=vdf-sim-rig
CACHE="${VDF_CACHE:-${HOME}/.cache/vllm-dual-fast}"

up() {
  if [ "$(docker inspect -f '{{.State.Running}}' "${NAME}" 2>/dev/null)" != "true" ]; then
    docker rm -f "${NAME}" >/dev/null 2>&1 || true
    mkdir -p "${CACHE}/apt-archives/debian13"
    # --shm-size: the engine shares the rig's /dev/shm (ipc: host); Docker's 64 MiB stops the
    # real vLLM at start ("Insufficient space in /dev/shm: 160 MiB required").
    docker run -d --name "${NAME}" --hostname "${NAME}" --privileged --cgroupns=private \
      --tmpfs /run --tmpfs /run/lock --tmpfs /tmp --shm-size 2g \
      -v "${NAME}-docker:/var/lib/docker" \
      -v "${CACHE}/apt-archives/debian13:/var/cache/apt/archives" \
      vdf-target:debian13 >/dev/null
    echo "sim-rig: started ${NAME}"
  fi
  ansible-playbook -i "${ROOT}/inventory/hosts.yml" -l "sim,localhost" \
    "${ROOT}/molecule/shared/prepare_rig.yml"
}

down() {
  docker rm -f "${NAME}" >/dev/null 2>&1 || true
  docker volume rm "${NAME}-docker" >/dev/null 2>&1 || true
  echo "sim-rig: removed ${NAME}"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
