#!/bin/sh
# Writes the APT sources a Debian installer leaves on a fresh host (the installer's own layout,
# with this machine's reachable mirror in place of the one a person picks):
#   Debian 12: one-line /etc/apt/sources.list with a commented cdrom line, deb and deb-src;
#   Debian 13: deb822 /etc/apt/sources.list.d/debian.sources.
# Both list `main non-free-firmware` only: no `non-free`, which the NVIDIA driver needs.
set -eu
suite="$1" mirror="$2" security="$3"
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/debian.sources
case "${suite}" in
  bookworm)
    cat >/etc/apt/sources.list <<SRC
#deb cdrom:[Debian GNU/Linux 12.11.0 _Bookworm_ - Official amd64 NETINST with firmware 20250517-09:51]/ bookworm main non-free-firmware

deb ${mirror}/ bookworm main non-free-firmware
deb-src ${mirror}/ bookworm main non-free-firmware

deb ${security} bookworm-security main non-free-firmware
deb-src ${security} bookworm-security main non-free-firmware

# bookworm-updates, to get updates before a point release is made;
# see https://www.debian.org/doc/manuals/debian-reference/ch02.en.html#_updates_and_backports
deb ${mirror}/ bookworm-updates main non-free-firmware
deb-src ${mirror}/ bookworm-updates main non-free-firmware
SRC
    ;;
  *)
    cat >/etc/apt/sources.list.d/debian.sources <<SRC
Types: deb deb-src
URIs: ${mirror}/
Suites: ${suite} ${suite}-updates
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: ${security}/
Suites: ${suite}-security
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    ;;
esac
