#!/usr/bin/env bash
# Debian packages of this machine that the tests use as they are (real programs, not doubles):
#   nginx: tests/integration/test_nginx_proxy.py runs the role's LAN proxy site in a real nginx.
#   unattended-upgrades, needrestart: tests/integration/test_upgrade_guard.py runs them on a fake root
#   against the Ubuntu archive double, with the role's configuration.
#   prometheus, prometheus-alertmanager, prometheus-node-exporter: promtool and amtool check
#   the rig metrics' format and the monitoring files, and tests/integration/test_monitoring_stack.py runs
#   all three on loopback (tests/integration/test_rig_metrics.py, test_monitoring_rules.py).
# Installed from the machine's own sources, without starting any service (no init system here;
# the tests start their own nginx on loopback with a temporary prefix).
set -euo pipefail

say() { echo "host-packages: $*"; }

# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx)
[ -x /usr/bin/unattended-upgrade ] || missing+=(unattended-upgrades)
[ -x /usr/sbin/needrestart ] || missing+=(needrestart)
[ -x /usr/bin/promtool ] || missing+=(prometheus)
[ -x /usr/bin/amtool ] || missing+=(prometheus-alertmanager)
[ -x /usr/bin/prometheus-node-exporter ] || missing+=(prometheus-node-exporter)
installed() {
  say "nginx $(/usr/sbin/nginx -v 2>&1 | sed 's#.*/##'), $(dpkg-query -W -f='${Package} ${Version}, ' \
    unattended-upgrades needrestart prometheus prometheus-alertmanager prometheus-node-exporter \
    | sed 's/, $//') are installed"
}
if [ "${#missing[@]}" -eq 0 ]; then
  installed
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get -q update >/dev/null
apt-get -s install --no-install-recommends "${missing[@]}" | announce_new_packages host-packages
with_no_service_starts apt-get -y -q install --no-install-recommends "${missing[@]}" >/dev/null
installed
