"""Runs the real unattended-upgrades (Debian's /usr/bin/unattended-upgrade, imported as its own
test suite does) in dry-run mode on a fake root: `python3 THIS ROOTDIR`. Needs the system
python3 with python-apt; prints what the upgrader logs, including the line
"Packages that will be upgraded: ...". Changes nothing in ROOTDIR's dpkg status."""

import importlib.machinery
import importlib.util
import sys
import types

loader = importlib.machinery.SourceFileLoader("unattended_upgrade", "/usr/bin/unattended-upgrade")
spec = importlib.util.spec_from_loader("unattended_upgrade", loader)
upgrader = importlib.util.module_from_spec(spec)
loader.exec_module(upgrader)
options = types.SimpleNamespace(
    debug=True,
    dry_run=True,
    verbose=True,
    apt_debug=False,
    minimal_upgrade_steps=False,
    download_only=False,
)
sys.exit(upgrader.main(options, rootdir=sys.argv[1]))
