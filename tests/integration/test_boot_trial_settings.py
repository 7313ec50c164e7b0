"""The boot trial's settings (tasks/boot_trial.yml) as Ansible renders them: GRUB's drop-in read by
the kernel double's update-grub the way grub-mkconfig reads drop-ins (sourced after
/etc/default/grub), and the watchdog's systemd drop-in. The driver scenario leaves the watchdog
out (its rigs are privileged containers), so it is checked here."""

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_runner import render_role_template

DOUBLE = Path(__file__).resolve().parents[2] / "molecule/images/kernel-target/vdf-kernel-double"
GRUB = "etc/default/grub.d/99-vllm-dual-fast.cfg.j2"
WATCHDOG = "etc/systemd/system.conf.d/60-vllm-dual-fast-watchdog.conf.j2"


def rendered(tmp_path, template, **variables):
    defaults = {"vllm_dual_fast_boot_panic_reboot_s": 10, "vllm_dual_fast_boot_watchdog_s": 60,
                "vllm_dual_fast_boot_menu_after_failure_s": 10}
    return render_role_template(tmp_path, template, {**defaults, **variables})


@pytest.mark.parametrize("name", ["Ubuntu", "Debian GNU/Linux"])
def test_the_drop_in_keeps_the_owner_s_command_line_and_adds_panic(tmp_path, name):
    drop_in = rendered(tmp_path, GRUB, vllm_dual_fast_boot_panic_reboot_s=7,
                       vllm_dual_fast_boot_menu_after_failure_s=12)
    etc = tmp_path / "etc/default"
    (etc / "grub.d").mkdir(parents=True)
    (etc / "grub").write_text('GRUB_DEFAULT=0\nGRUB_TIMEOUT=5\n'
                              'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n'
                              'GRUB_CMDLINE_LINUX="console=ttyS0"\n')
    (etc / "grub.d/99-vllm-dual-fast.cfg").write_text(drop_in)
    env = {**os.environ, "VDF_KERNEL_DOUBLE_BIND_BOOT_ID": "0",
           "VDF_KERNEL_DOUBLE_DEFAULT_GRUB": str(etc / "grub")}
    for folder in ("boot", "run", "modules", "log"):
        (tmp_path / folder).mkdir()
        env[f"VDF_KERNEL_DOUBLE_{folder.upper()}"] = str(tmp_path / folder)
    (tmp_path / "os-release").write_text(f'NAME="{name}"\n')
    env["VDF_KERNEL_DOUBLE_OS_RELEASE"] = str(tmp_path / "os-release")
    (tmp_path / "boot/vmlinuz-6.8.0-51-generic").write_text("TEST DOUBLE kernel\n")
    subprocess.run([sys.executable, str(DOUBLE), "update-grub"], env=env, check=True,
                   capture_output=True)
    cfg = (tmp_path / "boot/grub/grub.cfg").read_text()
    assert 'set default="${saved_entry}"' in cfg
    [normal] = re.findall(r"linux\t/boot/vmlinuz-6.8.0-51-generic (.*)", cfg)[:1]
    assert normal.split()[-4:] == ["console=ttyS0", "quiet", "splash", "panic=7"]
    assert ("set timeout=12" in cfg) == (name == "Ubuntu")     # recordfail: Ubuntu's GRUB only


def test_the_watchdog_drop_in_sets_systemd_s_runtime_watchdog(tmp_path):
    conf = configparser.ConfigParser()
    conf.read_string(rendered(tmp_path, WATCHDOG, vllm_dual_fast_boot_watchdog_s=45))
    assert conf["Manager"]["RuntimeWatchdogSec"] == "45s"
    assert conf["Manager"]["RebootWatchdogSec"] == "10min"
