# ruff: noqa: E501  (apt-get and grub.cfg lines verbatim)
"""The maintenance run's pure helpers (module_utils/vllm_dual_fast_domain/maintenance.py) on what
the real tools print: `apt-get -s`, /boot, a grub.cfg as grub-mkconfig's 10_linux writes it on Ubuntu
and on Debian, `find /lib/modules`."""

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml
from ansible.module_utils.vllm_dual_fast_domain import maintenance as mnt

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles/vllm_dual_fast"
SCHEMA = json.loads((ROOT / "files/schemas/maintenance.schema.json").read_text())
KERNEL_DOUBLE = ROOT / "molecule/images/kernel-target/vdf-kernel-double"

APT_SIMULATION = """\
Reading package lists...
Building dependency tree...
The following NEW packages will be installed:
  linux-image-6.8.0-51-generic linux-modules-nvidia-580-server-6.8.0-51-generic
Inst linux-image-6.8.0-51-generic (6.8.0-51.52 Ubuntu:24.04/noble-updates [amd64])
Inst nvidia-utils-580-server [580.95.05-0ubuntu0.24.04.1] (580.105.08-0ubuntu0.24.04.1 Ubuntu:24.04/noble-updates [amd64]) []
Remv linux-modules-nvidia-580-server-6.8.0-49-generic [6.8.0-49.50+1]
Conf linux-image-6.8.0-51-generic (6.8.0-51.52 Ubuntu:24.04/noble-updates [amd64])
"""

# A Debian 12 grub.cfg's menu, as update-grub writes it (ids carry the root file system's UUID).
DEBIAN_GRUB = """\
menuentry 'Debian GNU/Linux' --class debian --class gnu-linux --class gnu --class os $menuentry_id_option 'gnulinux-simple-5f1c' {
	linux	/boot/vmlinuz-6.1.0-28-amd64 root=UUID=5f1c ro  quiet
}
submenu 'Advanced options for Debian GNU/Linux' $menuentry_id_option 'gnulinux-advanced-5f1c' {
	menuentry 'Debian GNU/Linux, with Linux 6.1.0-28-amd64' --class debian $menuentry_id_option 'gnulinux-6.1.0-28-amd64-advanced-5f1c' {
		linux	/boot/vmlinuz-6.1.0-28-amd64 root=UUID=5f1c ro  quiet
	}
	menuentry 'Debian GNU/Linux, with Linux 6.1.0-28-amd64 (recovery mode)' --class debian $menuentry_id_option 'gnulinux-6.1.0-28-amd64-recovery-5f1c' {
		linux	/boot/vmlinuz-6.1.0-28-amd64 root=UUID=5f1c ro single
	}
	menuentry 'Debian GNU/Linux, with Linux 6.1.0-27-amd64' --class debian $menuentry_id_option 'gnulinux-6.1.0-27-amd64-advanced-5f1c' {
		linux	/boot/vmlinuz-6.1.0-27-amd64 root=UUID=5f1c ro  quiet
	}
}
menuentry 'UEFI Firmware Settings' $menuentry_id_option 'uefi-firmware' {
	fwsetup
}
"""


def test_apt_s_lines_become_what_would_be_installed_and_removed():
    plan = mnt.apt_simulation(APT_SIMULATION)
    assert plan["install"] == [
        {"name": "linux-image-6.8.0-51-generic", "from": "", "to": "6.8.0-51.52"},
        {"name": "nvidia-utils-580-server", "from": "580.95.05-0ubuntu0.24.04.1",
         "to": "580.105.08-0ubuntu0.24.04.1"},
    ]
    assert plan["remove"] == ["linux-modules-nvidia-580-server-6.8.0-49-generic"]
    assert mnt.apt_simulation("0 upgraded, 0 newly installed\n") == {"install": [], "remove": []}


def test_the_newest_kernel_is_grub_s_entry_zero_in_version_order():
    assert mnt.newest_kernel(["/boot/vmlinuz-6.8.0-9-generic", "/boot/vmlinuz-6.8.0-51-generic",
                              "/boot/vmlinuz-6.8.0-50-generic"]) == "6.8.0-51-generic"
    assert mnt.newest_kernel(["vmlinuz-6.1.0-28-amd64", "vmlinuz-6.12.9-amd64"]) == "6.12.9-amd64"
    assert mnt.newest_kernel([]) == ""


def test_the_previous_kernel_is_named_by_grub_s_stable_ids():
    assert mnt.grub_entry(DEBIAN_GRUB, "6.1.0-27-amd64") == (
        "gnulinux-advanced-5f1c>gnulinux-6.1.0-27-amd64-advanced-5f1c")
    assert mnt.grub_entry(DEBIAN_GRUB, "6.1.0-2-amd64") == ""
    assert mnt.grub_entry("", "6.1.0-27-amd64") == ""


def test_the_name_resolves_to_that_kernel_in_the_kernel_double(tmp_path):
    """The name the role passes to grub-reboot boots that kernel (GRUB's rules, in the double)."""
    env = {"VDF_KERNEL_DOUBLE_BIND_BOOT_ID": "0", "PATH": "/usr/bin:/bin"}
    for name in ("boot", "run", "modules", "log"):
        (tmp_path / name).mkdir()
        env[f"VDF_KERNEL_DOUBLE_{name.upper()}"] = str(tmp_path / name)
    for kernel in ("6.8.0-50-generic", "6.8.0-51-generic"):
        (tmp_path / "boot" / f"vmlinuz-{kernel}").write_text("")

    def run(*args):
        subprocess.run([sys.executable, str(KERNEL_DOUBLE), *args], env=env, check=True,
                       capture_output=True)

    run("update-grub")
    entry = mnt.grub_entry((tmp_path / "boot/grub/grub.cfg").read_text(), "6.8.0-50-generic")
    assert entry
    run("grub-reboot", entry)
    run("boot")
    assert (tmp_path / "run/release").read_text().strip() == "6.8.0-50-generic"


def test_a_module_is_found_only_for_its_own_kernel():
    found = "/lib/modules/6.8.0-50-generic/kernel/nvidia-580srv/nvidia.ko\n"
    assert mnt.module_file_for(found, "6.8.0-50-generic")
    assert not mnt.module_file_for(found, "6.8.0-51-generic")
    dkms = "/lib/modules/6.12.9-amd64/updates/dkms/nvidia-current.ko.xz\n"
    assert mnt.module_file_for(dkms, "6.12.9-amd64")


def test_the_maintenance_run_finds_the_module_each_driver_source_installs():
    """maintain_apply.yml finds a kernel's module by file name: Ubuntu's signed module and NVIDIA's
    DKMS build are nvidia.ko, Debian's DKMS installs it as nvidia-current.ko.xz (nvidia-kernel-dkms'
    dkms.conf: DEST_MODULE_NAME "nvidia-current", compressed as Debian's kernel asks). Missing
    Debian's name, the run took every new kernel for one without its module and stayed on the old."""
    import fnmatch

    import yaml

    tasks = yaml.safe_load((ROOT / "roles/vllm_dual_fast/tasks/maintain_apply.yml").read_text())
    find = next(t for t in tasks if t.get("name") == "Find the NVIDIA modules of the installed kernels")
    patterns = find["ansible.builtin.find"]["patterns"]
    patterns = [patterns] if isinstance(patterns, str) else patterns

    def found(name):
        return any(fnmatch.fnmatch(name, pattern) for pattern in patterns)

    assert all(found(name) for name in ("nvidia.ko", "nvidia.ko.zst", "nvidia-current.ko.xz", "nvidia-current.ko"))
    assert not any(found(name) for name in ("nvidia-current-modeset.ko.xz", "nvidia-uvm.ko", "nvidia-drm.ko.zst"))


@pytest.mark.parametrize("state", mnt.MAINTENANCE_STATES)
def test_every_result_the_builder_makes_is_valid(state):
    result = mnt.maintenance_result(state, reason="a\nlong " * 100, packages=["b", "a"],
                                    apt_lines=[f"line {n}" for n in range(40)], fell_back=1)
    jsonschema.validate(result, SCHEMA)
    assert result["packages"] == ["a", "b"] and result["apt_lines"][-1] == "line 39"
    assert len(result["apt_lines"]) == 20 and "\n" not in result["reason"]


def test_the_schema_names_the_states_the_builder_knows():
    assert sorted(SCHEMA["properties"]["state"]["enum"]) == sorted(mnt.MAINTENANCE_STATES)
    with pytest.raises(ValueError, match="unknown maintenance state"):
        mnt.maintenance_result("rebooted")


BEFORE = {"kernel_before": "6.8.0-50-generic", "driver_before": "580.95.05",
          "packages": ["nvidia-utils-580-server", "linux-generic"]}


def verdict(**changed):
    result = mnt.maintenance_verdict({**BEFORE, "next_kernel": "6.8.0-51-generic",
                                      "kernel_after": "6.8.0-51-generic",
                                      "driver_after": "580.105.08", "satisfied": True,
                                      "apt_failed": False, "fell_back": False, **changed})
    jsonschema.validate(result, SCHEMA)
    return result


def test_kernel_and_driver_up_together_is_maintained():
    result = verdict(serving_release="r3")
    assert (result["state"], result["reason"]) == ("maintained", "")
    assert result["serving"] == {"release": "r3", "healthy": True}
    assert (result["kernel_after"], result["driver_after"]) == ("6.8.0-51-generic", "580.105.08")


def test_a_rig_that_served_nothing_reports_no_health_rather_than_unhealthy():
    """The Debian rig of the driver scenario serves nothing: its maintenance.json said
    `healthy: false` as if a release had failed. A release that served before and did not come
    back is the failure `false` means."""
    nothing = verdict(serving_release="", was_serving=False)
    assert nothing["state"] == "maintained"
    assert nothing["serving"] == {"release": "", "healthy": None}
    gone = verdict(serving_release="", was_serving=True)
    assert gone["serving"] == {"release": "", "healthy": False}


def test_the_plan_asks_apt_with_the_options_the_upgrade_installs_with():
    """The plan (maintain.yml, `apt-get -s`) names the packages the report lists; the upgrade
    (maintain_apply.yml) installs without Recommends. Planned with them, the Debian rig's report
    listed apparmor (a Recommends of Debian's kernel image) as upgraded, which it never was."""
    import yaml

    plan = next(t for t in yaml.safe_load((ROOT / "roles/vllm_dual_fast/tasks/maintain.yml").read_text())
                if t.get("name") == "Ask APT what upgrading them together would do")
    apply = yaml.safe_load((ROOT / "roles/vllm_dual_fast/tasks/maintain_apply.yml").read_text())
    block = next(t for t in apply if t.get("name") == "Upgrade kernel, modules and driver in one APT transaction")
    start = next(t for t in block["block"] if t.get("name") == "Start the upgrade")
    assert "--no-install-recommends" in start["ansible.builtin.shell"]
    assert "--no-install-recommends" in plan["ansible.builtin.command"]["argv"]


def test_apt_failing_is_named_by_apt_s_last_line_and_the_fallback_kernel():
    result = verdict(apt_failed=True, apt_lines=["Setting up x", "E: Sub-process returned 1", ""],
                     kernel_after="6.8.0-50-generic", fell_back=True, serving_release="r3")
    assert result["state"] == "maintenance-failed"
    assert result["reason"].startswith("APT did not finish the upgrade: E: Sub-process returned 1")
    assert result["reason"].endswith(
        "(back on the previous kernel 6.8.0-50-generic, driver 580.105.08; release r3 healthy)")
    assert result["serving"] == {"release": "r3", "healthy": True}
    assert result["apt_lines"][-2] == "E: Sub-process returned 1"


@pytest.mark.parametrize(
    ("serving", "health_failure", "said", "healthy"),
    [
        ("", "", "; no release running)", False),
        ("r3", "smoke: 2 of 4 requests failed", "; release r3 failing health)", False),
    ],
)
def test_a_fallback_says_it_serves_only_when_a_release_passed_health(
    serving, health_failure, said, healthy
):
    """Before: the reason said "the previous kernel serves" whether or not anything did."""
    result = verdict(apt_failed=True, apt_lines=["E: Sub-process returned 1"], fell_back=True,
                     kernel_after="6.8.0-50-generic", driver_after="580.95.05",
                     serving_release=serving, health_failure=health_failure)
    assert said in result["reason"] and "healthy" not in result["reason"]
    assert result["serving"] == {"release": serving, "healthy": healthy}


def test_an_unchanged_run_names_what_serves_without_judging_it():
    result = mnt.maintenance_result("unchanged", serving_release="r3")
    jsonschema.validate(result, SCHEMA)
    assert result["serving"] == {"release": "r3", "healthy": None}


def test_gpus_silent_on_the_new_kernel_name_what_nvidia_smi_said():
    result = verdict(satisfied=False, driver_after="",
                     smi_lines=["Failed to initialize NVML: Driver/library version mismatch"])
    assert result["state"] == "maintenance-failed" and result["driver_after"] == ""
    assert "did not answer on kernel 6.8.0-51-generic: Failed to initialize NVML" in result["reason"]
    assert result["kernel_log"] == ["Failed to initialize NVML: Driver/library version mismatch"]


def test_a_gpu_off_the_bus_after_the_reboot_asks_for_a_power_cycle_not_another_kernel():
    # Issue 45: the driver loaded (the kernel and its module are fine) and nvidia-smi exits 15.
    lost = ("Unable to determine the device handle for GPU0000:02:00.0: GPU is lost. Reboot the "
            "system to recover this GPU")
    result = verdict(satisfied=False, gpu_lost=True, driver_after="", smi_lines=[lost],
                     failed_boot_lines=["NVRM: Xid (PCI:0000:02:00): 79, fallen off the bus."])
    assert result["state"] == "maintenance-failed" and not result["fell_back_to_previous_kernel"]
    assert result["reason"].startswith(
        "a GPU fell off the bus after the reboot into kernel 6.8.0-51-generic, the driver loaded: "
        "power the rig off and on")
    assert "did not answer on kernel" not in result["reason"]
    assert "GPU is lost" in result["reason"]
    assert result["kernel_log"] == [lost, "NVRM: Xid (PCI:0000:02:00): 79, fallen off the bus."]


def test_the_fallback_to_the_previous_kernel_is_not_taken_for_a_gpu_off_the_bus():
    tasks = yaml.safe_load((ROLE / "tasks/maintain_apply.yml").read_text())
    [fallback] = [t for t in tasks if t["name"].startswith("Boot the previous kernel once")]
    assert "not vllm_dual_fast_gpus_unreachable | bool" in fallback["when"]
    names = [t["name"] for t in fallback["block"]]
    assert "Read the NVRM lines of the boot on the new kernel" in names


def test_a_new_kernel_left_for_the_old_one_is_not_maintained_even_when_gpus_answer():
    result = verdict(kernel_after="6.8.0-50-generic", fell_back=True, driver_after="580.105.08")
    assert result["state"] == "maintenance-failed"
    assert result["reason"].startswith("kernel 6.8.0-51-generic has no NVIDIA module")


def test_a_trial_kernel_that_never_came_up_is_named_and_the_old_kernel_stays_the_default():
    """Issue 45, item 2: the new kernel is booted once; one that panics or hangs comes back (panic=,
    the watchdog) on GRUB's default, the kernel that ran before. Before, the verdict blamed a
    missing module that was there."""
    result = verdict(kernel_after="6.8.0-50-generic", fell_back=True, trial=True,
                     kernel_first_boot="6.8.0-50-generic", boot_default="6.8.0-50-generic",
                     serving_release="r3")
    assert result["state"] == "maintenance-failed" and result["fell_back_to_previous_kernel"]
    assert result["reason"].startswith(
        "kernel 6.8.0-51-generic did not come up on its trial boot (a panic or a hang: the rig "
        "rebooted by itself into GRUB's default) (back on the previous kernel 6.8.0-50-generic")
    assert "has no NVIDIA module" not in result["reason"]
    assert result["reason"].endswith("release r3 healthy)")
    assert result["boot_default"] == "6.8.0-50-generic"


def test_gpus_silent_on_a_trial_kernel_that_came_up_are_named_after_the_fallback():
    result = verdict(kernel_after="6.8.0-50-generic", fell_back=True, trial=True,
                     kernel_first_boot="6.8.0-51-generic", smi_lines=["No devices were found"])
    assert result["reason"].startswith(
        "the GPUs did not answer on kernel 6.8.0-51-generic: No devices were found")


def test_a_trial_that_passed_makes_the_new_kernel_the_default():
    result = verdict(trial=True, kernel_first_boot="6.8.0-51-generic",
                     boot_default="6.8.0-51-generic", serving_release="r3")
    assert result["state"] == "maintained" and result["boot_default"] == "6.8.0-51-generic"


def test_the_new_kernel_becomes_the_default_only_after_health_passed():
    """The promotion (grub-set-default) runs after the health check, and only when it passed."""
    tasks = yaml.safe_load((ROLE / "tasks/maintain_apply.yml").read_text())
    names = [t["name"] for t in tasks]
    promote = names.index("Make the new kernel GRUB's default, its trial passed (grub-set-default)")
    assert names.index("Check the health of the release serving again") < promote
    assert "_vllm_dual_fast_mnt_health | length == 0" in tasks[promote]["when"]
    trial = yaml.safe_load((ROLE / "tasks/boot_trial.yml").read_text())
    steps = [t["name"] for t in trial]
    assert steps.index("Keep the kernel running now as GRUB's default (grub-set-default)") < \
        steps.index("Boot the new kernel once, on trial (grub-reboot)")


def test_a_kernel_that_keeps_its_module_needs_nothing_kept():
    plan = {"install": [{"name": "nvidia-utils-580-server", "from": "1", "to": "2"},
                        {"name": "linux-modules-nvidia-580-server-6.8.0-51-generic", "from": "",
                         "to": "2"}], "remove": []}
    assert mnt.fallback_packages(plan, ["nvidia-utils-580-server"], "6.8.0-50-generic") == []
    taken = {**plan, "remove": ["linux-modules-nvidia-580-server-6.8.0-50-generic",
                                "linux-image-6.8.0-40-generic"]}
    assert mnt.fallback_packages(taken, ["nvidia-utils-580-server"], "6.8.0-50-generic") == [
        "linux-modules-nvidia-580-server-6.8.0-50-generic", "nvidia-utils-580-server"]


def test_a_driver_put_back_is_said_with_the_fallback():
    result = verdict(apt_failed=True, apt_lines=["E: Sub-process returned 1"], fell_back=True,
                     kernel_after="6.8.0-50-generic", driver_after="580.95.05",
                     restored=["nvidia-utils-580-server"], serving_release="r3")
    assert result["fallback_restored"] == ["nvidia-utils-580-server"]
    assert ("(back on the previous kernel 6.8.0-50-generic, driver 580.95.05, put back from the "
            "packages kept before the upgrade; release r3 healthy)") in result["reason"]


def test_a_release_failing_health_afterwards_fails_the_maintenance():
    result = verdict(health_failure="smoke: 2 of 4 requests failed")
    assert result["state"] == "maintenance-failed"
    assert result["reason"] == ("the serving release failed health after the upgrade: "
                                "smoke: 2 of 4 requests failed")


def test_phases_last_from_one_mark_to_the_next():
    marks = [["start", 100.0], ["plan", 103.25], ["stop", 104.0], ["upgrade", 130.0],
             ["reboot", 150.5]]
    assert mnt.phase_durations(marks) == {"plan": 3.2, "stop": 0.8, "upgrade": 26.0,
                                          "reboot": 20.5}
    assert mnt.phase_durations([["start", 1]]) == {}
    assert verdict(marks=marks)["phases_s"]["upgrade"] == 26.0


@pytest.mark.parametrize("kernel", ["6.8.0-52-generic", "6.17.0-1004-generic-64k"])
def test_a_refused_kernel_s_reason_names_the_module_and_fits_the_schema(kernel):
    """The sentence the driver install's refusal and maintenance.json share: the module's exact
    package name, and room left in the schema's 300 characters for the maintenance's own tail
    (maintain.yml adds about 90)."""
    notice = mnt.module_not_published(kernel, 580)
    assert f"linux-modules-nvidia-580-server-{kernel} yet" in notice
    assert notice.startswith(f"Kernel {kernel} boots next")
    tail = " APT did not run; nothing was changed. Run the maintenance again once it is published."
    assert tail.strip() in (ROOT / "roles/vllm_dual_fast/tasks/maintain.yml").read_text()
    result = mnt.maintenance_result("maintenance-failed", reason=notice + tail)
    assert result["reason"].endswith("once it is published.")
    jsonschema.validate(result, SCHEMA)


# Recorded from the real apt-get -s (2.6.1 on this Debian 12 machine, 3.0.4 in the Ubuntu-shaped
# rig's image) against the Ubuntu archive double's `skew` snapshot: a driver point release
# published before its modules (tests/integration/test_ubuntu_kernel_updates.py runs it live).
@pytest.mark.parametrize("apt", ["2.6", "3.0.4"])
def test_unmet_dependencies_are_named_one_per_line_as_either_apt_prints_them(apt):
    recorded = (ROOT / f"tests/recorded/apt-{apt}-unmet-driver-before-modules.txt").read_text()
    assert mnt.apt_unmet(recorded) == [
        "nvidia-headless-no-dkms-580-server : Depends: nvidia-kernel-common-580-server (>= 580.105.08) but 580.95.05-0ubuntu0.24.04.1 is to be installed",
        "nvidia-headless-no-dkms-580-server : Depends: libnvidia-compute-580-server (= 580.105.08-0ubuntu0.24.04.1) but 580.95.05-0ubuntu0.24.04.1 is to be installed",
        "nvidia-utils-580-server : Depends: nvidia-kernel-common-580-server-580.105.08",
    ]
    assert mnt.apt_simulation(recorded) == {"install": [], "remove": []}


def test_a_plan_apt_could_make_has_no_unmet_dependency():
    assert mnt.apt_unmet(APT_SIMULATION) == []
    assert mnt.apt_unmet("") == []


# The real apt-get -s (2.6.1) asked for versions its indexes do not have.
APT_VERSION_MISSING = """\
E: Version '580.999-1' for 'nvidia-utils-580-server' was not found
E: Version '1.2' for 'linux-generic' was not found
"""


def test_versions_the_archive_lacks_are_named_as_apt_prints_them():
    assert mnt.apt_versions_missing(APT_VERSION_MISSING) == APT_VERSION_MISSING.splitlines()
    assert mnt.apt_versions_missing("E: Unable to correct problems, you have held broken packages.") == []


def test_the_canary_s_versions_pin_the_unit_and_leave_out_what_it_did_not_move():
    unit = ["linux-generic", "linux-image-generic", "nvidia-utils-580-server"]
    assert mnt.maintenance_install_args(unit) == unit
    assert mnt.maintenance_install_args(unit, {"linux-generic": "6.8.0.51.52", "openssl": "3"}) == [
        "linux-generic=6.8.0.51.52"]
    assert mnt.maintenance_install_args(unit, {}) == []


def test_a_plan_s_versions_are_what_it_installs():
    assert mnt.plan_versions(mnt.apt_simulation(APT_SIMULATION)) == {
        "linux-image-6.8.0-51-generic": "6.8.0-51.52",
        "nvidia-utils-580-server": "580.105.08-0ubuntu0.24.04.1"}


def test_a_next_kernel_is_judged_by_the_installed_variant_s_module():
    plan = {"install": [{"name": "linux-image-6.8.0-51-generic", "from": "", "to": "6.8.0-51.52"},
                        {"name": "linux-modules-nvidia-580-server-open-6.8.0-51-generic",
                         "from": "", "to": "6.8.0-51.52+1"}], "remove": []}
    assert mnt.kernel_without_module(plan, [], 580, "-server-open") == ""
    assert mnt.kernel_without_module(plan, [], 580) == "6.8.0-51-generic"
    assert "linux-modules-nvidia-580-open-6.8.0-52-generic" in mnt.module_not_published(
        "6.8.0-52-generic", 580, "-open")


def test_a_branch_moved_on_by_its_transitional_packages_keeps_its_module():
    """At a branch's end of life Canonical's old metas depend on the next branch's packages
    (nvidia-driver-590 on nvidia-driver-595, as the archive shows): the next kernel's module
    arrives under the new number, and is the module; another variant's is not."""
    plan = {"install": [{"name": "linux-image-6.8.0-51-generic", "from": "", "to": "6.8.0-51.52"},
                        {"name": "linux-modules-nvidia-595-server-6.8.0-51-generic",
                         "from": "", "to": "6.8.0-51.52+1"}], "remove": []}
    assert mnt.kernel_without_module(plan, [], 580) == ""
    assert mnt.kernel_without_module(plan, [], 580, "-server-open") == "6.8.0-51-generic"


def test_an_older_branch_s_module_is_not_the_next_kernel_s_module():
    plan = {"install": [{"name": "linux-image-6.8.0-51-generic", "from": "", "to": "6.8.0-51.52"},
                        {"name": "linux-modules-nvidia-570-server-6.8.0-51-generic",
                         "from": "", "to": "6.8.0-51.52+1"}], "remove": []}
    assert mnt.kernel_without_module(plan, [], 580) == "6.8.0-51-generic"


def test_a_plan_that_brings_a_later_branch_names_it():
    """Transitional packages (issue 45, item 3): the ended branch's names move to the next
    branch's version, and the next branch's packages come in."""
    plan = {"install": [
        {"name": "nvidia-headless-no-dkms-580-server", "from": "580.95.05-0ubuntu0.24.04.1",
         "to": "590.48.01-0ubuntu0.24.04.1"},
        {"name": "nvidia-headless-no-dkms-590-server", "from": "", "to": "590.48.01-0ubuntu0.24.04.1"},
        {"name": "linux-modules-nvidia-590-server-6.8.0-51-generic", "from": "", "to": "6.8.0-51.52+1"},
    ], "remove": []}
    assert mnt.branch_move(plan, 580) == 590
    assert mnt.branch_move(plan, 590) == 0
    # Only the version moved (the new names already installed): still a move.
    assert mnt.branch_move({"install": plan["install"][:1]}, 580) == 590
    # A point release of the branch, a kernel, the firmware named for a version: no move.
    same = {"install": [
        {"name": "nvidia-headless-no-dkms-580-server", "from": "580.95.05-0ubuntu0.24.04.1",
         "to": "580.105.08-0ubuntu0.24.04.1"},
        {"name": "nvidia-firmware-580-server-580.105.08", "from": "", "to": "580.105.08-0ubuntu0.24.04.1"},
        {"name": "linux-image-6.8.0-51-generic", "from": "", "to": "6.8.0-51.52"}]}
    assert mnt.branch_move(same, 580) == 0
    assert mnt.branch_move({}, 580) == 0
    assert "vllm_dual_fast_driver_branch: 590" in mnt.branch_end_of_life(580, 590)
