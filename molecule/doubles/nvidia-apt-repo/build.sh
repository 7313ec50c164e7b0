#!/usr/bin/env bash
# Builds a TEST DOUBLE of NVIDIA's container toolkit apt repository: a flat, signed repository
# laid out like the real one, so the role's production apt source line works unchanged but for
# its host:
#
#   OUTDIR/gpgkey                                   armored public key (the real repo's name)
#   OUTDIR/nvidia-container-toolkit.gpg.asc         same key, armored
#   OUTDIR/nvidia-container-toolkit-keyring.gpg     same key, binary (what `gpg --dearmor` makes)
#   OUTDIR/stable/deb/nvidia-container-toolkit.list the list file NVIDIA publishes, local URL
#   OUTDIR/stable/deb/amd64/{Packages,Packages.gz,Release,InRelease,Release.gpg,*.deb}
#
# The packages are stand-ins (Architecture: all) whose programs are the doubles in ./files:
#   nvidia-container-toolkit       /usr/bin/nvidia-container-runtime-hook
#   nvidia-container-toolkit-base  /usr/bin/nvidia-ctk, /usr/bin/nvidia-container-runtime,
#                                  /etc/nvidia-container-runtime/config.toml
#   libnvidia-container-tools      /usr/bin/nvidia-container-cli
# Release is signed with a throw-away ed25519 key generated at build time; its private half
# lives only in a temporary GNUPGHOME that is deleted on exit. OUTDIR must be outside the git
# checkout or git-ignored. Re-running with unchanged inputs reuses OUTDIR and prints
# "up to date" (the key then stays the same); changed inputs rebuild everything with a new key.
#
# Usage: build.sh OUTDIR
# Environment: NVIDIA_APT_DOUBLE_URL (base URL written into the .list file, default
#   http://127.0.0.1:8089), NVIDIA_APT_DOUBLE_VERSION (default 1.17.8-1), SOURCE_DATE_EPOCH
#   (timestamps inside the .debs and the Release Date, default 2025-05-30T00:00:00Z).
# Needs: bash, coreutils, gzip, dpkg-deb, gpg (installed with apt-get when missing and root).
set -euo pipefail

usage() { echo "usage: $0 OUTDIR" >&2; exit 2; }
[[ $# -eq 1 && -n "$1" ]] || usage

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
FILES="${HERE}/files"
VERSION="${NVIDIA_APT_DOUBLE_VERSION:-1.17.8-1}"
UPSTREAM_VERSION="${VERSION%-*}"
BASE_URL="${NVIDIA_APT_DOUBLE_URL:-http://127.0.0.1:8089}"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-1748563200}"
export LC_ALL=C TZ=UTC
umask 022

mkdir -p "$1"
OUTDIR="$(cd "$1" && pwd)"
REPO_REL="stable/deb/amd64"
STAMP="${OUTDIR}/.build-inputs.sha256"

ensure_tools() {
  local missing=()
  command -v dpkg-deb >/dev/null || missing+=(dpkg)
  command -v gpg >/dev/null || missing+=(gnupg)
  command -v gzip >/dev/null || missing+=(gzip)
  ((${#missing[@]} == 0)) && return 0
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null; then
    echo "build.sh: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" \
      >/dev/null || { apt-get update >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
          "${missing[@]}" >/dev/null; }
  else
    echo "build.sh: missing tools: ${missing[*]} (apt-get install ${missing[*]})" >&2
    exit 1
  fi
}

inputs_digest() {
  {
    printf 'version=%s url=%s epoch=%s\n' "$VERSION" "$BASE_URL" "$SOURCE_DATE_EPOCH"
    (cd "$HERE" && find build.sh files -type f -print0 | sort -z | xargs -0 sha256sum)
    (cd "$HERE" && find files -type f -printf '%m %p\n' | sort)
  } | sha256sum | cut -d' ' -f1
}

outputs_present() {
  local f
  for f in gpgkey nvidia-container-toolkit.gpg.asc nvidia-container-toolkit-keyring.gpg \
    stable/deb/nvidia-container-toolkit.list "${REPO_REL}/Packages" "${REPO_REL}/Packages.gz" \
    "${REPO_REL}/Release" "${REPO_REL}/InRelease" "${REPO_REL}/Release.gpg"; do
    [[ -s "${OUTDIR}/${f}" ]] || return 1
  done
}

ensure_tools
DIGEST="$(inputs_digest)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$DIGEST" ]] && outputs_present; then
  echo "build.sh: ${OUTDIR} up to date (inputs ${DIGEST:0:12})"
  exit 0
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/nvidia-apt-double.XXXXXX")"
export GNUPGHOME="${WORK}/gnupg"
cleanup() {
  gpgconf --kill gpg-agent >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -m 700 "$GNUPGHOME"
STAGE="${WORK}/out"
mkdir -p "${STAGE}/${REPO_REL}"

# make_pkg NAME DEPENDS DESCRIPTION SRC:DEST[:MODE]...
make_pkg() {
  local name="$1" depends="$2" description="$3"; shift 3
  local root="${WORK}/pkg/${name}" spec src dest mode conffiles=()
  mkdir -p "${root}/DEBIAN" "${root}/usr/share/doc/${name}"
  for spec in "$@"; do
    IFS=: read -r src dest mode <<<"$spec"
    install -D -m "${mode:-0755}" "${FILES}/${src}" "${root}${dest}"
    [[ "$dest" == /etc/* ]] && conffiles+=("$dest")
  done
  printf '%s\n' \
    "This package is a TEST DOUBLE of NVIDIA's ${name}, built by vllm-dual-fast's" \
    "molecule/doubles/nvidia-apt-repo/build.sh for machines without GPUs. It drives no GPU." \
    >"${root}/usr/share/doc/${name}/README.test-double"
  if ((${#conffiles[@]})); then
    printf '%s\n' "${conffiles[@]}" >"${root}/DEBIAN/conffiles"
  fi
  local size
  size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
  {
    echo "Package: ${name}"
    echo "Version: ${VERSION}"
    echo "Architecture: all"
    echo "Maintainer: vllm-dual-fast test doubles <root@localhost>"
    echo "Installed-Size: ${size}"
    [[ -n "$depends" ]] && echo "Depends: ${depends}"
    echo "Section: utils"
    echo "Priority: optional"
    echo "Description: TEST DOUBLE of NVIDIA's ${name}"
    echo " ${description}"
  } >"${root}/DEBIAN/control"
  find "$root" -exec touch -h -d "@${SOURCE_DATE_EPOCH}" {} +
  dpkg-deb --root-owner-group -Zxz -z6 --build "$root" \
    "${STAGE}/${REPO_REL}/${name}_${VERSION}_all.deb" >/dev/null
}

make_pkg libnvidia-container-tools "python3" \
  "Stand-in for the container CLI; prints versions and the GPUs nvidia-smi reports." \
  nvidia-container-cli:/usr/bin/nvidia-container-cli
make_pkg nvidia-container-toolkit-base "python3" \
  "Stand-in providing nvidia-ctk (merges daemon.json) and a runtime shim that execs runc." \
  nvidia-ctk:/usr/bin/nvidia-ctk \
  nvidia-container-runtime:/usr/bin/nvidia-container-runtime \
  config.toml:/etc/nvidia-container-runtime/config.toml:0644
make_pkg nvidia-container-toolkit \
  "nvidia-container-toolkit-base (= ${VERSION}), libnvidia-container-tools (>= ${VERSION}), libnvidia-container-tools (<< 2.0.0), python3" \
  "Stand-in providing a no-op nvidia-container-runtime-hook, so Docker offers --gpus." \
  nvidia-container-runtime-hook:/usr/bin/nvidia-container-runtime-hook

# Packages index (what dpkg-scanpackages writes, without needing dpkg-dev).
(
  cd "${STAGE}/${REPO_REL}"
  for deb in *.deb; do
    dpkg-deb -f "$deb"
    echo "Filename: ./${deb}"
    echo "Size: $(stat -c %s "$deb")"
    echo "MD5sum: $(md5sum "$deb" | cut -d' ' -f1)"
    echo "SHA1: $(sha1sum "$deb" | cut -d' ' -f1)"
    echo "SHA256: $(sha256sum "$deb" | cut -d' ' -f1)"
    echo
  done >Packages
  gzip -9n -c Packages >Packages.gz

  {
    echo "Origin: vllm-dual-fast test double of the NVIDIA container toolkit repository"
    echo "Label: nvidia-container-toolkit (test double)"
    echo "Architectures: amd64 all"
    echo "Date: $(date -u -R -d "@${SOURCE_DATE_EPOCH}")"
    for algo in MD5Sum:md5sum SHA1:sha1sum SHA256:sha256sum SHA512:sha512sum; do
      echo "${algo%%:*}:"
      for f in Packages Packages.gz; do
        printf ' %s %16d %s\n' "$("${algo##*:}" "$f" | cut -d' ' -f1)" "$(stat -c %s "$f")" "$f"
      done
    done
  } >Release
)

# Throw-away signing key; only its public half leaves this script.
UID_NAME="vllm-dual-fast NVIDIA apt repository double (throw-away test key)"
gpg --batch --quiet --pinentry-mode loopback --passphrase '' \
  --quick-gen-key "$UID_NAME" ed25519 sign never 2>/dev/null
FPR="$(gpg --batch --no-auto-check-trustdb --with-colons --list-secret-keys 2>/dev/null | awk -F: '/^fpr:/ {print $10; exit}')"
GPG_SIGN=(gpg --batch --quiet --yes --pinentry-mode loopback --passphrase '' --digest-algo SHA512
  --local-user "$FPR")
"${GPG_SIGN[@]}" --clearsign -o "${STAGE}/${REPO_REL}/InRelease" "${STAGE}/${REPO_REL}/Release"
"${GPG_SIGN[@]}" --armor --detach-sign -o "${STAGE}/${REPO_REL}/Release.gpg" \
  "${STAGE}/${REPO_REL}/Release"
gpg --batch --armor --export "$FPR" >"${STAGE}/gpgkey"
cp "${STAGE}/gpgkey" "${STAGE}/nvidia-container-toolkit.gpg.asc"
gpg --batch --export "$FPR" >"${STAGE}/nvidia-container-toolkit-keyring.gpg"

printf '%s\n' \
  "deb ${BASE_URL}/stable/deb/\$(ARCH) /" \
  "#deb ${BASE_URL}/experimental/deb/\$(ARCH) /" \
  >"${STAGE}/stable/deb/nvidia-container-toolkit.list"
echo "$DIGEST" >"${STAGE}/.build-inputs.sha256"

# Replace OUTDIR's contents (OUTDIR itself may be a mount point or pre-created by a caller).
find "$OUTDIR" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
cp -a "${STAGE}/." "${OUTDIR}/"
echo "build.sh: built ${OUTDIR} (nvidia-container-toolkit ${UPSTREAM_VERSION}, key ${FPR})"
