"""The kernel double of the rigs that boot (molecule/images/kernel-target/vdf-kernel-double):
GRUB's choice of kernel at each boot, grub-reboot's one-time entry, update-grub's menu, and the
module a boot loads. Run as a program with its folders redirected into tmp_path."""

import lzma
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOUBLE = Path(__file__).resolve().parents[2] / "molecule/images/kernel-target/vdf-kernel-double"
UUID = "0b5e6c1a-3090-4e2d-9d11-000000000001"


@pytest.fixture
def machine(tmp_path):
    env = {**os.environ, "VDF_KERNEL_DOUBLE_BIND_BOOT_ID": "0"}
    for name in ("boot", "run", "modules", "log"):
        (tmp_path / name).mkdir()
        env[f"VDF_KERNEL_DOUBLE_{name.upper()}"] = str(tmp_path / name)
    (tmp_path / "os-release").write_text('NAME="Ubuntu"\nVERSION_ID="24.04"\n')
    env["VDF_KERNEL_DOUBLE_OS_RELEASE"] = str(tmp_path / "os-release")
    (tmp_path / "default").mkdir()
    env["VDF_KERNEL_DOUBLE_DEFAULT_GRUB"] = str(tmp_path / "default/grub")
    return tmp_path, env


def call(env, *args):
    proc = subprocess.run([sys.executable, str(DOUBLE), *args], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def install_kernel(root, kernel, module=None, panics=False):
    (root / "boot" / f"vmlinuz-{kernel}").write_text(
        "TEST DOUBLE kernel\n" + ("VDF-KERNEL-DOUBLE: panics at boot\n" if panics else ""))
    if module:
        ko = root / "modules" / kernel / "kernel/nvidia-580srv/nvidia.ko"
        ko.parent.mkdir(parents=True)
        ko.write_text(f"TEST DOUBLE nvidia.ko\nversion={module}\n")


def booted(root):
    release = (root / "run/release").read_text().strip()
    module = root / "run/nvidia-module"
    return release, module.read_text().strip() if module.exists() else None


def test_a_boot_takes_the_newest_kernel_and_its_module(machine):
    root, env = machine
    install_kernel(root, "6.8.0-50-generic", "580.95.05")
    install_kernel(root, "6.8.0-9-generic")      # version order, not text order
    call(env, "update-grub")
    call(env, "boot")
    assert booted(root) == ("6.8.0-50-generic", "580.95.05")


def test_grub_reboot_picks_the_next_boot_once(machine):
    root, env = machine
    install_kernel(root, "6.8.0-50-generic", "580.95.05")
    install_kernel(root, "6.8.0-51-generic")
    call(env, "update-grub")
    call(env, "grub-reboot",
         f"gnulinux-advanced-{UUID}>gnulinux-6.8.0-50-generic-advanced-{UUID}")
    assert len((root / "boot/grub/grubenv").read_bytes()) == 1024
    call(env, "boot")
    assert booted(root) == ("6.8.0-50-generic", "580.95.05")
    for stale in ("release", "nvidia-module"):
        (root / "run" / stale).unlink(missing_ok=True)
    call(env, "boot")      # the entry was used once: the next boot is entry 0 again
    assert booted(root) == ("6.8.0-51-generic", None)
    log = (root / "log/boots.log").read_text().splitlines()
    assert "via next_entry gnulinux-advanced" in log[0] and log[1].endswith("via default")


def test_titles_and_numbers_name_entries_as_grub_reads_them(machine):
    root, env = machine
    install_kernel(root, "6.8.0-50-generic")
    install_kernel(root, "6.8.0-51-generic")
    call(env, "update-grub")
    call(env, "grub-reboot", "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-50-generic")
    call(env, "boot")
    assert booted(root)[0] == "6.8.0-50-generic"
    call(env, "grub-reboot", "1>2")
    call(env, "boot")
    assert booted(root)[0] == "6.8.0-50-generic"
    call(env, "grub-reboot", "no such entry")
    out = call(env, "boot")
    assert booted(root)[0] == "6.8.0-51-generic" and "names nothing" in out


def test_update_grub_writes_ubuntu_s_menu_ids(machine):
    root, env = machine
    install_kernel(root, "6.8.0-51-generic")
    call(env, "update-grub")
    cfg = (root / "boot/grub/grub.cfg").read_text()
    ids = re.findall(r"\$menuentry_id_option '([^']+)'", cfg)
    assert ids == [f"gnulinux-simple-{UUID}", f"gnulinux-advanced-{UUID}",
                   f"gnulinux-6.8.0-51-generic-advanced-{UUID}",
                   f"gnulinux-6.8.0-51-generic-recovery-{UUID}"]


def install_dkms_module(root, kernel, name, version):
    """What Debian's DKMS installs (nvidia-kernel-dkms' dkms.conf: DEST_MODULE_NAME nvidia-current
    in /updates/dkms), compressed with xz as Debian's kernel asks: an ELF object whose .modinfo
    section holds NUL-separated key=value strings."""
    ko = root / "modules" / kernel / "updates/dkms" / f"{name}.ko.xz"
    ko.parent.mkdir(parents=True, exist_ok=True)
    modinfo = f"license=NVIDIA\0srcversion=0123ABCD\0version={version}\0".encode()
    ko.write_bytes(lzma.compress(b"\x7fELF\x02\x01\x01" + bytes(57) + b"\0" + modinfo))


def test_a_boot_loads_what_debian_s_dkms_built_for_that_kernel(machine):
    root, env = machine
    install_kernel(root, "6.12.117+deb13-amd64")
    install_kernel(root, "6.12.118+deb13-amd64")
    install_dkms_module(root, "6.12.117+deb13-amd64", "nvidia-current-modeset", "1.0")
    install_dkms_module(root, "6.12.117+deb13-amd64", "nvidia-current", "550.163.01")
    call(env, "boot")
    assert booted(root) == ("6.12.118+deb13-amd64", None)     # DKMS has not built for it yet
    install_dkms_module(root, "6.12.118+deb13-amd64", "nvidia-current", "550.163.01")
    call(env, "boot")
    assert booted(root) == ("6.12.118+deb13-amd64", "550.163.01")


@pytest.mark.parametrize(("name", "title"),
                         [("Ubuntu", "Ubuntu"), ("Debian GNU/Linux", "Debian GNU/Linux")])
def test_update_grub_titles_the_menu_as_the_distribution_s_grub_does(machine, name, title):
    """10_linux titles entries with GRUB_DISTRIBUTOR: "Ubuntu" as it is, Debian's os-release NAME
    "Debian GNU/Linux"; the ids (what the role's grub-reboot uses) are the same on both."""
    root, env = machine
    (root / "os-release").write_text(f'PRETTY_NAME="x"\nNAME="{name}"\n')
    install_kernel(root, "6.12.117+deb13-amd64")
    call(env, "update-grub")
    cfg = (root / "boot/grub/grub.cfg").read_text()
    titles = re.findall(r"^\s*(?:menuentry|submenu) '([^']+)'", cfg, re.M)
    kernel = "6.12.117+deb13-amd64"
    assert titles == [title, f"Advanced options for {title}", f"{title}, with Linux {kernel}",
                      f"{title}, with Linux {kernel} (recovery mode)"]


def test_the_new_boot_id_shows_only_once_the_module_is_loaded(machine):
    """ansible.builtin.reboot waits for a new boot_id; over `docker exec` a container answers
    from its first second, where a real machine answers SSH once its modules are loaded. So the
    boot binds the new boot_id last: nothing reads the GPUs between it and the module."""
    root, env = machine
    bin_dir = root / "bin"
    bin_dir.mkdir()
    # The mount double notes what the kernel double had recorded when the boot_id was bound.
    (bin_dir / "mount").write_text(
        f'#!/bin/sh\necho "$@ module=$(cat {root}/run/nvidia-module)" >> {root}/mounts\n')
    (bin_dir / "mount").chmod(0o755)
    env = {**env, "VDF_KERNEL_DOUBLE_BIND_BOOT_ID": "1", "PATH": f"{bin_dir}:{env['PATH']}"}
    install_kernel(root, "6.8.0-50-generic", "580.95.05")
    call(env, "boot")
    assert (root / "mounts").read_text().split() == [
        "--bind", str(root / "run/boot_id"), "/proc/sys/kernel/random/boot_id",
        "module=580.95.05"]


def entry(kernel):
    return f"gnulinux-advanced-{UUID}>gnulinux-{kernel}-advanced-{UUID}"


def grubenv(root):
    return dict(line.split("=", 1) for line in (root / "boot/grub/grubenv").read_text().splitlines()
                if "=" in line)


def test_a_drop_in_after_etc_default_grub_sets_the_default_and_the_command_line(machine):
    """grub-mkconfig sources /etc/default/grub, then /etc/default/grub.d/*.cfg: a drop-in builds
    on the owner's values, and GRUB_DEFAULT=saved boots grubenv's saved_entry."""
    root, env = machine
    (root / "default/grub").write_text(
        'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n')
    (root / "default/grub.d").mkdir()
    (root / "default/grub.d/99-rig.cfg").write_text(
        'GRUB_DEFAULT=saved\nGRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT panic=10"\n'
        "GRUB_RECORDFAIL_TIMEOUT=5\n")
    install_kernel(root, "6.8.0-50-generic", "580.95.05")
    install_kernel(root, "6.8.0-51-generic", "580.95.05")
    call(env, "update-grub")
    cfg = (root / "boot/grub/grub.cfg").read_text()
    assert 'set default="${saved_entry}"' in cfg and "set timeout=5" in cfg
    call(env, "grub-set-default", entry("6.8.0-50-generic"))
    call(env, "boot")
    assert booted(root) == ("6.8.0-50-generic", "580.95.05")      # not the newest: the saved one
    assert (root / "run/cmdline").read_text().split()[-3:] == ["quiet", "splash", "panic=10"]
    assert "recordfail" not in grubenv(root)      # the boot completed


def test_a_trial_kernel_that_panics_reboots_into_the_saved_default_with_panic_set(machine):
    root, env = machine
    (root / "default/grub").write_text(
        'GRUB_DEFAULT=saved\nGRUB_CMDLINE_LINUX_DEFAULT="panic=1"\nGRUB_RECORDFAIL_TIMEOUT=1\n')
    install_kernel(root, "6.8.0-51-generic", "580.105.08")
    install_kernel(root, "6.8.0-52-generic", "580.105.08", panics=True)
    call(env, "update-grub")
    call(env, "grub-set-default", entry("6.8.0-51-generic"))
    call(env, "grub-reboot", entry("6.8.0-52-generic"))
    call(env, "boot")
    assert booted(root) == ("6.8.0-51-generic", "580.105.08")
    log = (root / "log/boots.log").read_text().splitlines()
    assert "kernel 6.8.0-52-generic panicked at boot" in log[0] and "panic=1" in log[0]
    assert "kernel 6.8.0-51-generic" in log[1] and "recordfail" in log[1]
    assert grubenv(root)["saved_entry"] == entry("6.8.0-51-generic")


@pytest.mark.parametrize("settings", [
    # no panic=: the panicked kernel never reboots
    "GRUB_DEFAULT=saved\n",
    # panic= set, but GRUB's default is the newest kernel, the one that panics: a boot loop
    'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="panic=1"\nGRUB_RECORDFAIL_TIMEOUT=0\n',
])
def test_a_kernel_that_panics_without_panic_set_or_as_default_leaves_a_rig_hung(machine, settings):
    root, env = machine
    env = {**env, "VDF_KERNEL_DOUBLE_HANG_S": "0.2"}
    (root / "default/grub").write_text(settings)
    install_kernel(root, "6.8.0-51-generic", "580.105.08")
    install_kernel(root, "6.8.0-52-generic", "580.105.08", panics=True)
    call(env, "update-grub")
    call(env, "grub-set-default", entry("6.8.0-51-generic"))
    call(env, "grub-reboot", entry("6.8.0-52-generic"))
    proc = subprocess.run([sys.executable, str(DOUBLE), "boot"], env=env, capture_output=True,
                          text=True, timeout=30)
    log = (root / "log/boots.log").read_text()
    assert proc.returncode == 3, proc.stdout
    assert "boot hung" in log and ("boot loop" in log) == ("panic=1" in settings)
    assert not (root / "run/release").exists()


def test_after_a_boot_that_never_completed_ubuntu_s_menu_waits_for_a_key_at_minus_1(machine):
    root, env = machine
    env = {**env, "VDF_KERNEL_DOUBLE_HANG_S": "0.2"}
    (root / "default/grub").write_text("GRUB_RECORDFAIL_TIMEOUT=-1\n")
    install_kernel(root, "6.8.0-51-generic", "580.105.08")
    call(env, "update-grub")
    (root / "boot/grub/grubenv").write_text("# GRUB Environment Block\nrecordfail=1\n")
    proc = subprocess.run([sys.executable, str(DOUBLE), "boot"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 3 and "recordfail" in (root / "log/boots.log").read_text()


def test_with_no_kernel_installed_the_host_s_kernel_shows(machine):
    root, env = machine
    call(env, "boot")
    assert not (root / "run/release").exists() and (root / "run/boot_id").exists()


MOKUTIL = DOUBLE.parents[1] / "ubuntu-target/mokutil-double"


@pytest.mark.parametrize(
    ("state", "role_reads"),
    [("enabled", "enabled"), ("disabled", "disabled"), ("none", "disabled"), (None, "enabled")],
)
def test_the_mokutil_double_answers_as_the_role_reads_real_mokutil(tmp_path, state, role_reads):
    """Its words are real mokutil's (`SecureBoot enabled`; no EFI: the error on stderr, rc 255),
    and the role's reading of them (secure_boot_state) is what the rig's state says."""
    import importlib.util

    path = DOUBLE.parents[3] / "roles/vllm_dual_fast/filter_plugins/vllm_dual_fast_driver.py"
    spec = importlib.util.spec_from_file_location("vdf_driver_filters_mok", path)
    drv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(drv)
    state_file = tmp_path / "secure-boot"
    if state:
        state_file.write_text(state + "\n")
    proc = subprocess.run([str(MOKUTIL), "--sb-state"], capture_output=True, text=True, timeout=10,
                          env={**os.environ, "VDF_SECURE_BOOT_DOUBLE": str(state_file)})
    assert proc.returncode == (255 if state == "none" else 0), proc.stderr
    result = {"rc": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    assert drv.secure_boot_state(result) == role_reads
