"""Kernel and driver updates on an Ubuntu rig, decided by the real APT resolver against the
Ubuntu archive double (molecule/doubles/ubuntu-archive: Canonical's package names and dependency
shapes). The rig is installed with the role's own package list and holds; then the archive
publishes the next kernel ABI with a driver point release (the -updates suite), and a nightly
upgrade runs. What must hold afterwards: the kernel GRUB boots next has a module for it, built
for the user space that is installed (else: no GPU, or NVML's driver/library version mismatch)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from apt_fake_root import AptRoot

ROOT = Path(__file__).resolve().parents[1]
_PATH = ROOT / "roles/vllm_dual_fast/filter_plugins/vllm_dual_fast_driver.py"
_spec = importlib.util.spec_from_file_location("vdf_driver_filters_ku", _PATH)
drv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drv)
BUILD = ROOT / "molecule/doubles/ubuntu-archive/build.py"

pytestmark = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("apt-get", "dpkg-deb", "gpg")),
    reason="needs apt-get, dpkg-deb and gpg",
)
BRANCH = "580"
FLAVOUR = "generic"


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    out = tmp_path_factory.mktemp("ubuntu-archive")
    subprocess.run([sys.executable, str(BUILD), str(out)], check=True, capture_output=True)
    return out


def _abi_key(name):
    return tuple(int(n) for n in re.findall(r"\d+", name))


def next_boot(installed):
    """What boots after a reboot: GRUB's first entry is the newest installed kernel. Returns
    (kernel, module upstream version or None, user-space upstream version or None)."""
    kernels = sorted(
        (
            n[len("linux-image-") :]
            for n in installed
            if re.fullmatch(r"linux-image-\d.*-" + FLAVOUR, n)
        ),
        key=_abi_key,
    )
    kernel = kernels[-1]
    module = f"linux-modules-nvidia-{BRANCH}-server-{kernel}"
    user_space = installed.get(f"libnvidia-compute-{BRANCH}-server", (None,))[0]
    return (
        kernel,
        module in installed or None,
        drv.upstream_version(user_space) if user_space else None,
    )


def module_built_for(apt, kernel):
    """The driver version a kernel's installed module package was built against (its
    nvidia-kernel-common range), read from APT's own record of it."""
    status = apt.status.read_text()
    stanza = status.split(f"Package: linux-modules-nvidia-{BRANCH}-server-{kernel}\n", 1)[1]
    return re.search(r"nvidia-kernel-common-\S+ \(>= (\S+)\)", stanza.split("\n\n", 1)[0])[1]


def gpus_answer_after_reboot(apt):
    """(True, why) when the next boot has a module for its kernel built for the installed user
    space; else (False, what an owner would see)."""
    installed = apt.installed()
    kernel, has_module, user_space = next_boot(installed)
    if not has_module:
        return False, f"{kernel} boots without linux-modules-nvidia-{BRANCH}-server-{kernel}"
    built = module_built_for(apt, kernel)
    if built != user_space:
        return False, f"{kernel}'s module is {built}, user space {user_space}: NVML mismatch"
    return True, f"{kernel} with module {built}, user space {user_space}"


def provisioned_rig(tmp_path, archive):
    """A noble rig as the role leaves it: GA kernel, the role's -server packages and holds."""
    apt = AptRoot(tmp_path / "root", archive, ["noble"])
    apt.run("install", f"linux-{FLAVOUR}", *drv.ubuntu_driver_packages(BRANCH, FLAVOUR))
    apt.hold(drv.driver_hold_packages("ubuntu", "distro", BRANCH, apt.installed(), flavour=FLAVOUR))
    ok, why = gpus_answer_after_reboot(apt)
    assert ok, why
    return apt


def test_the_archive_double_has_canonicals_dependency_shapes(archive):
    dists = archive / "updates/ubuntu/dists"
    packages = (dists / "noble-updates/restricted/binary-amd64/Packages").read_text()
    module = packages.split(f"Package: linux-modules-nvidia-{BRANCH}-server-6.8.0-51-generic\n")[1]
    assert "nvidia-kernel-common-580-server (>= 580.105.08)" in module.split("\n\n")[0]
    utils = packages.split(f"Package: nvidia-utils-{BRANCH}-server\n")[1].split("\n\n")[0]
    assert "Depends: nvidia-kernel-common-580-server-580.105.08" in utils


@pytest.mark.parametrize("upgrade", ["dist-upgrade", "upgrade"])
def test_a_nightly_upgrade_after_a_point_release_and_a_new_kernel_leaves_a_bootable_gpu(
    tmp_path, archive, upgrade
):
    """Before: the role held only user space, so the new kernel came in and its module (which
    needs the next point release) could not: the rig rebooted into a kernel without GPUs."""
    apt = provisioned_rig(tmp_path, archive)
    apt.set_suites(["noble", "noble-updates"])
    apt.run(upgrade)
    ok, why = gpus_answer_after_reboot(apt)
    assert ok, why


def test_the_maintenance_upgrade_moves_kernel_module_and_user_space_together(tmp_path, archive):
    apt = provisioned_rig(tmp_path, archive)
    before = apt.held()
    apt.set_suites(["noble", "noble-updates"])
    plan = drv.maintenance_upgrade_packages(
        "ubuntu", "distro", BRANCH, apt.installed(), flavour=FLAVOUR
    )
    apt.hold(plan, held=False)
    apt.run("install", *plan)
    apt.hold(plan)
    ok, why = gpus_answer_after_reboot(apt)
    assert ok, why
    assert next_boot(apt.installed())[0] == "6.8.0-51-generic"
    assert apt.held() == before
    # The previous kernel keeps a module for the new user space (Canonical's respin), so the
    # fallback boot of a failed maintenance run still has GPUs.
    assert module_built_for(apt, "6.8.0-50-generic") == "580.105.08"
