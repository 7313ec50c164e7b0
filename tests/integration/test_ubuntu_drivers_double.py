"""ubuntu-drivers as an oracle for the role's own Ubuntu package choice. The ubuntu-drivers double
(molecule/doubles/ubuntu-drivers-double: ubuntu-drivers-common's logic over the APT cache) and
the role's filters (ubuntu_kernel_flavour, ubuntu_driver_packages, kernel_without_module) are
asked about the same rig, a fake APT root on the Ubuntu archive double, and what APT would make
of each answer is compared."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import test_ubuntu_kernel_updates as kernel_updates
from apt_fake_root import AptRoot

# As the kernel update tests have them: the archive fixture (module-scoped: one build for this
# file), the role's filter modules and the check for apt-get, dpkg-deb and gpg.
archive = kernel_updates.archive
pytestmark = kernel_updates.pytestmark
BRANCH, drv, mnt = kernel_updates.BRANCH, kernel_updates.drv, kernel_updates.mnt
ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "molecule/doubles/ubuntu-drivers-double/ubuntu-drivers"
SERVER = f"{BRANCH}-server"
SUITES = ["noble", "noble-updates"]
_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}


def apt_cache(apt, *args):
    proc = subprocess.run(["apt-cache", *args], env={**_ENV, "APT_CONFIG": str(apt.config)},
                          capture_output=True, text=True, check=True, timeout=60)
    return proc.stdout


def rig(tmp_path, archive, snapshot, kernel_meta="linux-generic"):
    """A freshly installed noble rig: its kernel meta package, no driver yet."""
    apt = AptRoot(tmp_path / "root", archive, SUITES, snapshot=snapshot)
    assert drv.apt_policy_candidate(apt_cache(apt, "policy", kernel_meta)), (
        f"the Ubuntu archive double publishes no {kernel_meta} in {snapshot}")
    apt.run("install", kernel_meta)
    return apt


def ubuntu_drivers(apt, *options):
    """The double's answer to `ubuntu-drivers install --gpgpu nvidia:<N>-server`: (packages,
    what it said on stderr)."""
    proc = subprocess.run(
        [sys.executable, str(DOUBLE), "install", "--gpgpu", f"nvidia:{SERVER}", "--dry-run",
         *options],
        env={**_ENV, "APT_CONFIG": str(apt.config)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split(), proc.stderr


def plan(apt, packages):
    return mnt.apt_simulation(apt.apt("-s", "install", *packages))


def resolved(apt, packages):
    """The packages the rig would have once APT installed `packages` (its own choice of what
    they pull in: the module meta brings the kernel ABI's module, and so on)."""
    steps = plan(apt, packages)
    added = {item["name"] for item in steps["install"]}
    return (set(apt.installed()) | added) - set(steps["remove"])


def newest_kernel(apt):
    images = [n[len("linux-image-"):] for n in apt.installed() if re.match(r"linux-image-\d", n)]
    return mnt.newest_kernel(images)


@pytest.mark.parametrize(
    ("snapshot", "kernel_meta", "release"),
    [("first", "linux-generic", None), ("fixed", "linux-generic", None),
     ("fixed", "linux-generic-hwe-24.04", "24.04")],
)
def test_with_the_signed_module_published_both_choices_install_the_same_driver(
    tmp_path, archive, snapshot, kernel_meta, release
):
    """ubuntu-drivers picks the headless user space without DKMS and the flavour's signed module
    meta; the role picks the same two plus nvidia-utils (nvidia-smi), which the headless meta
    does not depend on. After APT's resolution that one package is the whole difference."""
    apt = rig(tmp_path, archive, snapshot, kernel_meta)
    flavour = drv.ubuntu_kernel_flavour(newest_kernel(apt), apt.installed(), release)
    ours = drv.ubuntu_driver_packages(BRANCH, flavour)

    theirs, said = ubuntu_drivers(apt)

    assert f"linux-modules-nvidia-{SERVER}-{flavour}" in theirs, said
    assert f"nvidia-dkms-{SERVER}" not in theirs, said
    utils = f"nvidia-utils-{SERVER}"
    assert resolved(apt, ours) - resolved(apt, theirs) == {utils}
    assert resolved(apt, [*theirs, utils]) == resolved(apt, ours)
    # The role's check agrees that the kernel booting next has its module.
    assert mnt.kernel_without_module(plan(apt, ours), apt.installed(), BRANCH) == ""
    # Once the role's packages are in, ubuntu-drivers has nothing left to add.
    apt.run("install", *ours)
    assert ubuntu_drivers(apt)[0] == []


@pytest.mark.parametrize("include_dkms", [False, True])
def test_where_the_next_kernel_has_no_module_ubuntu_drivers_goes_dkms_and_the_role_refuses(
    tmp_path, archive, include_dkms
):
    """`ahead`: the rig's kernel meta brought an ABI Canonical has not built the module for.
    ubuntu-drivers' answer is DKMS (with --include-dkms) or nothing at all; the role names that
    kernel and stops, since a DKMS module is unsigned (Secure Boot needs a MOK)."""
    apt = rig(tmp_path, archive, "ahead")
    kernel = newest_kernel(apt)
    assert drv.apt_policy_candidate(
        apt_cache(apt, "policy", f"linux-modules-nvidia-{SERVER}-{kernel}")) == ""
    ours = drv.ubuntu_driver_packages(BRANCH, drv.ubuntu_kernel_flavour(kernel, apt.installed()))

    assert mnt.kernel_without_module(plan(apt, ours), apt.installed(), BRANCH) == kernel

    theirs, said = ubuntu_drivers(apt, *(["--include-dkms"] if include_dkms else []))
    assert not [name for name in theirs if name.startswith("linux-modules-nvidia-")], said
    if include_dkms:
        assert sorted(theirs) == [f"nvidia-dkms-{SERVER}", f"nvidia-headless-no-dkms-{SERVER}"]
        # What APT makes of it boots the same kernel without a signed module: DKMS builds one.
        assert mnt.kernel_without_module(plan(apt, theirs), apt.installed(), BRANCH) == kernel
    else:
        assert theirs == []
        assert "All the available drivers are already installed." in said


def test_ubuntu_drivers_reads_the_kernel_the_image_meta_would_bring_not_the_installed_one(
    tmp_path, archive
):
    """A rig installed before the module-less ABI was published, not upgraded since: its newest
    kernel has its module, so the role installs the signed module and its check passes (the
    role's holds keep the next ABI out until a maintenance run, which checks it). ubuntu-drivers
    reads the kernel from the image meta's candidate, the unpublished ABI, and goes DKMS."""
    apt = rig(tmp_path, archive, "fixed")
    installed_kernel = newest_kernel(apt)
    apt = AptRoot(tmp_path / "root", archive, SUITES, snapshot="ahead")
    assert newest_kernel(apt) == installed_kernel
    flavour = drv.ubuntu_kernel_flavour(installed_kernel, apt.installed())
    ours = drv.ubuntu_driver_packages(BRANCH, flavour)

    assert mnt.kernel_without_module(plan(apt, ours), apt.installed(), BRANCH) == ""
    assert f"linux-modules-nvidia-{SERVER}-{installed_kernel}" in resolved(apt, ours)

    theirs, said = ubuntu_drivers(apt, "--include-dkms")
    assert sorted(theirs) == [f"nvidia-dkms-{SERVER}", f"nvidia-headless-no-dkms-{SERVER}"], said


@pytest.mark.parametrize(
    "argv",
    [
        ["install", f"nvidia:{SERVER}", "--dry-run"],  # desktop mode
        ["install", "--gpgpu", f"nvidia:{SERVER}"],  # would install
        ["install", "--gpgpu", f"nvidia:{BRANCH}", "--dry-run"],  # not a -server branch
        ["install", "--gpgpu", "--dry-run"],  # the recommended driver
        ["install", "--gpgpu", f"nvidia:{SERVER},amdgpu", "--dry-run"],
        ["list", "--gpgpu"],
    ],
)
def test_the_double_refuses_what_it_does_not_model(argv):
    proc = subprocess.run([sys.executable, str(DOUBLE), *argv], env=_ENV,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip()
