# Shared helpers for the project's shell scripts (sourced, not run).

# The Debian archive mirror this machine's own APT configuration uses.
mirror_uri() {
  local uri
  uri="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  [ -n "${uri}" ] || { echo "no Debian mirror in /etc/apt/sources.list.d/debian.sources" >&2; return 1; }
  echo "${uri}"
}

# The security mirror this machine uses (the second URIs of its deb822 sources).
security_mirror_uri() {
  local uri
  uri="$(awk '/^URIs:/ {n++; if (n == 2) {print $2; exit}}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)"
  echo "${uri:-$(mirror_uri)-security}"
}

# What a host package the set-up installs is for (the ones apt brings along get a generic word).
package_purpose() {
  case "$1" in
    docker.io) echo "the Docker engine" ;;
    docker-cli) echo "the docker client" ;;
    docker-compose) echo "Compose v2, the docker compose plugin" ;;
    containerd) echo "runs the engine's containers" ;;
    runc) echo "starts each container" ;;
    tini) echo "the init of docker run --init" ;;
    iptables) echo "the engine's container networking" ;;
    debootstrap) echo "builds the rigs' Debian root file systems" ;;
    arch-test) echo "lets debootstrap check the architecture" ;;
    nginx) echo "the LAN proxy the tests run, on loopback" ;;
    nginx-common) echo "nginx's configuration and default site" ;;
    unattended-upgrades) echo "the nightly upgrader the guard tests run on a fake root" ;;
    needrestart) echo "the service restarter whose rig configuration the tests load" ;;
    lib*) echo "a library the others link" ;;
    *) echo "a dependency of the others" ;;
  esac
}

# One line naming every package an `apt-get -s install` plan (on stdin) newly installs, with what
# each is for, so nothing lands on the machine unannounced. Prints nothing when none is new.
announce_new_packages() {
  local who="$1" names=() name line
  while read -r name; do names+=("${name}"); done < <(awk '/^Inst / && $3 !~ /^\[/ {print $2}')
  [ "${#names[@]}" -gt 0 ] || return 0
  line=""
  for name in "${names[@]}"; do line+="${line:+, }${name} ($(package_purpose "${name}"))"; done
  echo "${who}: installing ${#names[@]} host package(s): ${line}"
}

# Package installs must not try to start services (no init system here to start them with);
# an existing policy-rc.d is left as it is.
with_no_service_starts() {
  local policy=/usr/sbin/policy-rc.d created=0
  if [ ! -e "${policy}" ]; then
    printf '#!/bin/sh\nexit 101\n' >"${policy}" && chmod 0755 "${policy}" && created=1
  fi
  local rc=0; "$@" || rc=$?
  [ "${created}" = 1 ] && rm -f "${policy}"
  return "${rc}"
}
