"""Kernel and driver updates on an Ubuntu rig, decided by the real APT resolver against the
Ubuntu archive double (molecule/doubles/ubuntu-archive: Canonical's package names and dependency
shapes). The rig is installed with the role's own package list and holds; then the archive
publishes the next kernel ABI with a driver point release (the -updates suite), and a nightly
upgrade runs. What must hold afterwards: the kernel GRUB boots next has a module for it, built
for the user space that is installed (else: no GPU, or NVML's driver/library version mismatch)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from ansible.module_utils.vllm_dual_fast_domain import maintenance as mnt
from ansible_runner import run_playbook
from apt_fake_root import AptRoot

ROOT = Path(__file__).resolve().parents[2]
_PATH = ROOT / "roles/vllm_dual_fast/filter_plugins/vllm_dual_fast_driver.py"
_spec = importlib.util.spec_from_file_location("vdf_driver_filters_ku", _PATH)
drv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drv)
BUILD = ROOT / "molecule/doubles/ubuntu-archive/build.py"
SCHEMA = json.loads((ROOT / "files/schemas/maintenance.schema.json").read_text())

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


def test_the_archive_double_carries_the_compose_package_the_role_installs_on_ubuntu(archive):
    """vars/Ubuntu-24.yml installs docker.io and docker-compose-v2: the double publishes the
    second (in universe, as Canonical does) over Debian's Compose v2, the rig's Debian sources
    giving docker.io and docker-compose (molecule/doubles/ubuntu-archive/README.md)."""
    universe = archive / "first/ubuntu/dists/noble/universe/binary-amd64/Packages"
    stanza = universe.read_text().split("Package: docker-compose-v2\n")[1].split("\n\n")[0]
    assert re.search(r"^Version: 2\.26\.1-0ubuntu1~24\.04\.1$", stanza, re.M)
    # Debian 13's docker.io leaves the CLI to docker-cli; Ubuntu's carries it.
    assert "Depends: docker-compose (>= 2.26.1), docker-cli" in stanza
    role_vars = (ROOT / "roles/vllm_dual_fast/vars/Ubuntu-24.yml").read_text()
    assert "_vllm_dual_fast_docker_distro_packages: [docker.io, docker-compose-v2]" in role_vars


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
    # The previous kernel loses its module: Canonical built none of it for the new user space
    # (the archive double publishes as it does), and its old one excludes the new driver.
    assert "linux-modules-nvidia-580-server-6.8.0-50-generic" not in apt.installed()


def test_a_kernel_that_panics_installs_with_its_module_as_any_other(tmp_path, archive):
    """The `panics` snapshot (issue 45, item 2): the next kernel's module is published and the
    upgrade installs cleanly, so nothing before the reboot can tell; only its trial boot shows
    it (the kernel double panics it, molecule/images/kernel-target)."""
    apt = provisioned_rig(tmp_path, archive)
    apt.set_suites(["noble", "noble-updates"])
    rig = AptRoot(tmp_path / "root", archive, ["noble", "noble-updates"], snapshot="panics")
    plan = drv.maintenance_upgrade_packages("ubuntu", "distro", BRANCH, rig.installed(), FLAVOUR)
    assert _gap(rig, plan) == ""
    rig.hold(plan, held=False)
    rig.run("install", *plan)
    ok, why = gpus_answer_after_reboot(rig)
    assert ok and next_boot(rig.installed())[0] == "6.8.0-52-generic", why

    def vmlinuz(snapshot, kernel):
        [deb] = (Path(archive) / snapshot).rglob(f"linux-image-{kernel}_*.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path / snapshot)], check=True)
        return (tmp_path / snapshot / f"boot/vmlinuz-{kernel}").read_text()

    assert "VDF-KERNEL-DOUBLE: panics at boot" in vmlinuz("panics", "6.8.0-52-generic")
    assert "panics" not in vmlinuz("fixed", "6.8.0-51-generic")


def test_the_kernel_running_now_gets_its_driver_back_from_what_the_run_kept(tmp_path, archive):
    """Issue 45, item 1: the archive publishes as Canonical does (no module of the running ABI for
    the new driver), so the upgrade removes the running kernel's module, the fallback's. The
    run keeps what that kernel needs (fallback_packages, rebuilt by dpkg-repack on the rig: the
    same control data as the versions in the release pocket used here), and putting them back
    is one APT run that removes the new kernel's module and leaves the old kernel's driver whole.
    """
    apt = provisioned_rig(tmp_path, archive)
    apt.set_suites(["noble", "noble-updates"])
    unit = drv.maintenance_upgrade_packages("ubuntu", "distro", BRANCH, apt.installed(), FLAVOUR)
    plan = mnt.apt_simulation(apt.apt("-s", "--allow-change-held-packages", "install",
                                      "--no-install-recommends", *unit))
    keep = mnt.fallback_packages(plan, apt.installed(), "6.8.0-50-generic")
    assert "linux-modules-nvidia-580-server-6.8.0-50-generic" in keep, plan
    assert {"nvidia-utils-580-server", "libnvidia-compute-580-server"} <= set(keep)
    assert not [name for name in keep if re.match(r"linux-(image|headers)-\d", name)]
    kept = {name: apt.installed()[name][0] for name in keep}
    apt.hold(unit, held=False)
    apt.run("install", "--no-install-recommends", *unit)
    assert "linux-modules-nvidia-580-server-6.8.0-50-generic" not in apt.installed()

    actions = apt.run("install", "--allow-downgrades", "--no-install-recommends",
                      *(f"{name}={version}" for name, version in kept.items()))
    assert ("Remv", "linux-modules-nvidia-580-server-6.8.0-51-generic") in {a[:2] for a in actions}
    assert {name: apt.installed()[name][0] for name in keep} == kept
    assert module_built_for(apt, "6.8.0-50-generic") == "580.95.05"
    assert "linux-image-6.8.0-51-generic" in apt.installed()     # the kernel itself stays


def _gap(apt, packages):
    """What the role's check says of installing `packages` now: APT's own plan, simulated past
    the holds, as maintain.yml asks it."""
    plan = mnt.apt_simulation(apt.apt("-s", "--allow-change-held-packages", "install", *packages))
    return mnt.kernel_without_module(plan, apt.installed(), BRANCH)


@pytest.mark.parametrize(("snapshot", "gap"), [("fixed", ""), ("ahead", "6.8.0-52-generic")])
def test_a_driver_install_names_the_next_kernel_without_a_prebuilt_module(
    tmp_path, archive, snapshot, gap
):
    """A rig whose installer (or an apt upgrade) brought a kernel Canonical has not built the
    module for yet: the module meta still names the previous ABI's, so installing the driver
    leaves GRUB's next kernel without GPUs. ubuntu-drivers installs nothing there, or DKMS with
    --include-dkms (test_ubuntu_drivers_double.py); the role's check names the kernel before
    anything is installed."""
    apt = AptRoot(tmp_path / "root", archive, ["noble", "noble-updates"], snapshot=snapshot)
    apt.run("install", f"linux-{FLAVOUR}")
    assert _gap(apt, drv.ubuntu_driver_packages(BRANCH, FLAVOUR)) == gap


def test_a_maintenance_plan_names_a_new_kernel_whose_module_is_not_published(tmp_path, archive):
    apt = provisioned_rig(tmp_path, archive)
    apt.set_suites(["noble", "noble-updates"])
    unit = drv.maintenance_upgrade_packages("ubuntu", "distro", BRANCH, apt.installed(), FLAVOUR)
    assert _gap(apt, unit) == ""    # `updates`: 6.8.0-51 comes with its module
    ahead = AptRoot(tmp_path / "root", archive, ["noble", "noble-updates"], snapshot="ahead")
    assert _gap(ahead, unit) == "6.8.0-52-generic"


def _driver_ubuntu_check(tmp_path, apt, secure_boot):
    """driver_ubuntu.yml's own two tasks (APT's plan, then the stop), run by ansible-playbook
    against the fake root (APT_CONFIG) with the rig's packages as package_facts would give."""
    tasks = yaml.safe_load((ROOT / "roles/vllm_dual_fast/tasks/driver_ubuntu.yml").read_text())
    wanted = ("Ask APT what installing", "Stop when the kernel")
    check = [t for t in tasks if t["name"].startswith(wanted)]
    assert len(check) == 2, [t["name"] for t in tasks]
    facts = {"name": "The rig's packages", "ansible.builtin.set_fact": {
        "cacheable": True,
        "packages": {n: [{"version": v}] for n, (v, _) in apt.installed().items()}}}
    play = [{"name": "Ubuntu driver check", "hosts": "localhost", "gather_facts": False,
             "environment": {"APT_CONFIG": str(apt.config)}, "tasks": [facts, *check]}]
    return run_playbook(tmp_path, play, {
        "_vllm_dual_fast_driver_packages": drv.ubuntu_driver_packages(BRANCH, FLAVOUR),
        "_vllm_dual_fast_driver_variant": "-server",
        "vllm_dual_fast_driver_branch": int(BRANCH),
        "_vllm_dual_fast_secure_boot": secure_boot,
    })


@pytest.mark.parametrize(
    ("snapshot", "secure_boot", "stops"),
    [("fixed", "enabled", False), ("ahead", "enabled", True), ("ahead", "disabled", True)],
)
def test_the_role_stops_before_a_driver_install_that_would_boot_a_kernel_without_its_module(
    tmp_path, archive, snapshot, secure_boot, stops
):
    apt = AptRoot(tmp_path / "root", archive, ["noble", "noble-updates"], snapshot=snapshot)
    apt.run("install", f"linux-{FLAVOUR}")
    before = apt.status.read_text()
    result, out = _driver_ubuntu_check(tmp_path, apt, secure_boot)
    assert (result.returncode != 0) == stops, out
    assert apt.status.read_text() == before
    if stops:
        assert "Kernel 6.8.0-52-generic boots next without its signed NVIDIA module" in out, out
        assert "linux-modules-nvidia-580-server-6.8.0-52-generic" in out, out
        assert ("mokutil --import" in out) == (secure_boot == "enabled"), out


def _maintenance_plan(tmp_path, apt, versions=None, unfinished=(), branch=BRANCH):
    """maintain.yml's plan phase (APT's plan, what it means, the record of a run that changes
    nothing, and the stop of a failed one), run by ansible-playbook against the fake root."""
    tasks = yaml.safe_load((ROOT / "roles/vllm_dual_fast/tasks/maintain.yml").read_text())
    wanted = ("Ask APT what upgrading", "Keep APT's plan", "Look for a release that serves",
              "Record a run that changed nothing", "Stop when the kernel and driver")
    plan = [t for t in tasks if t["name"].startswith(wanted)]
    assert len(plan) == len(wanted), [t["name"] for t in tasks]
    result_file = tmp_path / "maintenance.json"
    keep = {"name": "Keep the result", "ansible.builtin.copy": {
        "content": "{{ vllm_dual_fast_maintenance | to_json }}", "dest": str(result_file),
        "mode": "0644"}, "when": "vllm_dual_fast_maintenance is defined"}
    play = [{"name": "Maintenance plan", "hosts": "localhost", "gather_facts": False,
             "environment": {"APT_CONFIG": str(apt.config)}, "tasks": [*plan[:-1], keep, plan[-1]]}]
    dpkg = "".join(f"install ok installed {name}\n" for name in apt.installed())
    unit = drv.maintenance_upgrade_packages("ubuntu", "distro", branch, apt.installed(), FLAVOUR)
    result, out = run_playbook(tmp_path, play, {
        "_vllm_dual_fast_mnt_packages": unit,
        # maintain.yml's one line for it: the unit, or what the canary installed of it.
        "_vllm_dual_fast_mnt_install": mnt.maintenance_install_args(unit, versions),
        "_vllm_dual_fast_mnt_unfinished": list(unfinished),
        "_vllm_dual_fast_mnt_dpkg": {"stdout": dpkg},
        "_vllm_dual_fast_mnt_marks": [["start", 0.0]],
        "_vllm_dual_fast_mnt_apt_lines": [],
        "_vllm_dual_fast_mnt_before": {"kernel": "6.8.0-50-generic", "driver": "580.95.05"},
        "_vllm_dual_fast_driver_family": "ubuntu",
        "vllm_dual_fast_driver_source": "distro",
        "vllm_dual_fast_driver_branch": int(branch),
        "_vllm_dual_fast_current_link": str(tmp_path / "no-release"),
    })
    found = json.loads(result_file.read_text()) if result_file.exists() else {}
    return result, out, found


def _waits_touching_nothing(tmp_path, archive, snapshot):
    """The plan phase of a provisioned rig on `snapshot`: it must pass, report
    `maintenance-waiting` and leave APT's state as it was; returns the result."""
    provisioned_rig(tmp_path, archive)
    rig = AptRoot(tmp_path / "root", archive, ["noble", "noble-updates"], snapshot=snapshot)
    before = rig.status.read_text()
    result, out, found = _maintenance_plan(tmp_path, rig)
    assert result.returncode == 0, out
    jsonschema.validate(found, SCHEMA)
    assert found["state"] == "maintenance-waiting", found
    assert rig.status.read_text() == before
    return found


def test_a_driver_published_before_its_modules_makes_the_run_wait_touching_nothing(
        tmp_path, archive):
    """Canonical publishes a driver point release's user space before linux-restricted-modules
    is rebuilt for it: APT cannot install the unit together (exit 100, unmet dependencies). The
    run reports `maintenance-waiting` naming them, passes, and APT changed nothing."""
    found = _waits_touching_nothing(tmp_path, archive, "skew")
    assert found["reason"].startswith(
        "APT cannot install the update yet: nvidia-headless-no-dkms-580-server : Depends: "
        "nvidia-kernel-common-580-server"), found
    assert "nvidia-utils-580-server : Depends: nvidia-kernel-common-580-server-580.105.08" in (
        found["apt_lines"]), found


def test_a_branch_at_its_end_of_life_waits_for_the_owner_touching_nothing(tmp_path, archive):
    """Issue 45, item 3: Canonical publishes an ended branch's packages again as transitional
    ones depending on the next branch's (`eol`). Upgrading the held unit would move the rig to
    branch 590 while the owner set 580: the run waits, naming the branch to set, and APT
    changed nothing. Before: the plan went on to the upgrade (no result from the plan phase)."""
    found = _waits_touching_nothing(tmp_path, archive, "eol")
    assert found["reason"].startswith(
        "Driver branch 580 reached its end of life: Canonical's transitional packages move it to "
        "branch 590."), found
    assert "vllm_dual_fast_driver_branch: 590" in found["reason"], found


def test_a_raised_branch_moves_the_rig_with_its_variant_module_and_holds(tmp_path, archive):
    """The owner sets branch 590 on that rig: the unit names the new branch's packages (of the
    variant installed) besides the old ones, the plan phase lets the upgrade run, and after it
    the next kernel boots 590's module with 590's user space; the holds cover both names."""
    provisioned_rig(tmp_path, archive)
    eol = AptRoot(tmp_path / "root", archive, ["noble", "noble-updates"], snapshot="eol")
    unit = drv.maintenance_upgrade_packages("ubuntu", "distro", 590, eol.installed(), FLAVOUR)
    assert {"nvidia-headless-no-dkms-590-server", "nvidia-utils-590-server",
            "linux-modules-nvidia-590-server-generic", "nvidia-headless-no-dkms-580-server"} <= set(
        unit), unit
    result, out, found = _maintenance_plan(tmp_path, eol, branch=590)
    assert result.returncode == 0, out
    assert found == {}, found      # no result yet: maintain_apply.yml makes it
    eol.hold(unit, held=False)
    eol.run("install", "--no-install-recommends", *unit)
    installed = eol.installed()
    assert "linux-modules-nvidia-590-server-6.8.0-51-generic" in installed
    assert drv.upstream_version(installed["libnvidia-compute-590-server"][0]) == "590.48.01"
    assert installed["nvidia-headless-no-dkms-580-server"][0].startswith("590.48.01-")
    status = eol.status.read_text()
    stanza = status.split("Package: linux-modules-nvidia-590-server-6.8.0-51-generic\n", 1)[1]
    assert "nvidia-kernel-common-590-server (>= 590.48.01)" in stanza.split("\n\n", 1)[0]
    assert mnt.kernel_without_module(
        mnt.apt_simulation(eol.apt("-s", "install", *unit)), installed, 590) == ""
    holds = drv.driver_hold_packages("ubuntu", "distro", 590, installed, flavour=FLAVOUR)
    assert {"nvidia-headless-no-dkms-590-server", "nvidia-headless-no-dkms-580-server",
            "linux-modules-nvidia-590-server-generic"} <= set(holds), holds


def test_a_plan_apt_can_make_is_left_to_the_upgrade(tmp_path, archive):
    """The same plan phase on `fixed` (modules published): not waiting; the upgrade would run."""
    provisioned_rig(tmp_path, archive)
    fixed = AptRoot(tmp_path / "root", archive, ["noble", "noble-updates"], snapshot="fixed")
    result, out, found = _maintenance_plan(tmp_path, fixed)
    assert result.returncode == 0, out
    assert found == {}, found     # no result yet: maintain_apply.yml makes it


def _canary_versions(tmp_path, archive, snapshot):
    """What a canary on `snapshot` installs of the unit (its plan's versions, as maintain_apply.yml
    records them in the result)."""
    canary = provisioned_rig(tmp_path / "canary", archive)
    canary = AptRoot(tmp_path / "canary/root", archive, ["noble", "noble-updates"],
                     snapshot=snapshot)
    unit = drv.maintenance_upgrade_packages("ubuntu", "distro", BRANCH, canary.installed(), FLAVOUR)
    plan = mnt.apt_simulation(canary.apt("-s", "--allow-change-held-packages", "install",
                                         "--no-install-recommends", *unit))
    return mnt.plan_versions(plan)


def test_a_later_batch_on_the_same_archive_installs_exactly_what_the_canary_did(
        tmp_path, archive):
    versions = _canary_versions(tmp_path, archive, "fixed")
    assert versions["linux-modules-nvidia-580-server-generic"] == "6.8.0-51.52+2"
    rig = provisioned_rig(tmp_path / "rig", archive)
    rig = AptRoot(tmp_path / "rig/root", archive, ["noble", "noble-updates"], snapshot="fixed")
    unit = drv.maintenance_upgrade_packages("ubuntu", "distro", BRANCH, rig.installed(), FLAVOUR)
    args = mnt.maintenance_install_args(unit, versions)
    assert args and all("=" in arg for arg in args)
    plan = mnt.apt_simulation(rig.apt("-s", "--allow-change-held-packages", "install",
                                      "--no-install-recommends", *args))
    assert mnt.plan_versions(plan) == versions


# Canonical's indexes carry one version of a package per suite: once the archive moved on, the
# canary's versions are gone from it.
@pytest.mark.parametrize(("canary_on", "rig_on", "missing"), [
    # ABI 2's module republished (+2): +1, which the canary took, is no longer installable.
    ("updates", "fixed",
     "E: Version '6.8.0-51.52+1' for 'linux-modules-nvidia-580-server-generic' was not found"),
    # ABI 3 published without its module: on its own candidates the rig would be refused (the
    # next kernel without GPUs); held to the canary's set it waits for the archive.
    ("fixed", "ahead", "E: Version '6.8.0.51.52' for 'linux-generic' was not found"),
])
def test_a_later_batch_whose_archive_moved_on_waits_rather_than_take_untried_versions(
        tmp_path, archive, canary_on, rig_on, missing):
    versions = _canary_versions(tmp_path, archive, canary_on)
    rig = provisioned_rig(tmp_path / "rig", archive)
    rig = AptRoot(tmp_path / "rig/root", archive, ["noble", "noble-updates"], snapshot=rig_on)
    before = rig.status.read_text()
    result, out, found = _maintenance_plan(tmp_path, rig, versions)
    assert result.returncode == 0, out
    jsonschema.validate(found, SCHEMA)
    assert found["state"] == "maintenance-waiting", found
    assert missing in found["apt_lines"], found
    assert rig.status.read_text() == before


def test_held_to_a_canary_that_moved_nothing_a_rig_is_left_unchanged(tmp_path, archive):
    """A later batch given an empty set (its canary installed nothing) asks APT for nothing: not
    even a unit package an earlier run left unfinished starts a reboot there."""
    rig = provisioned_rig(tmp_path, archive)
    rig = AptRoot(tmp_path / "root", archive, ["noble", "noble-updates"], snapshot="fixed")
    result, out, found = _maintenance_plan(tmp_path, rig, versions={},
                                           unfinished=["nvidia-utils-580-server"])
    assert result.returncode == 0, out
    jsonschema.validate(found, SCHEMA)
    assert found["state"] == "unchanged", found

