"""The upgrade guard (tasks/upgrade_guard.yml) with the real programs it configures: Debian's
unattended-upgrades, run in dry-run mode on a fake root against the Ubuntu archive double after
a driver point release and a kernel ABI bump; APT's own parser; needrestart's configuration
evaluated by Perl as needrestart evaluates it. Skipped (with the reason) where they are missing:
`make host-packages` installs them."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from apt_fake_root import AptRoot

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles/vllm_dual_fast"
BUILD = ROOT / "molecule/doubles/ubuntu-archive/build.py"
DRY_RUN = Path(__file__).parents[1] / "unattended_upgrade_dry_run.py"
SYSTEM_PYTHON = "/usr/bin/python3"
UU_CONF = "etc/apt/apt.conf.d/51vllm-dual-fast-unattended-upgrades"
NR_CONF = "etc/needrestart/conf.d/vllm-dual-fast.conf"

needs_upgrader = pytest.mark.skipif(
    not Path("/usr/bin/unattended-upgrade").exists()
    or subprocess.run([SYSTEM_PYTHON, "-c", "import apt"], capture_output=True).returncode != 0,
    reason="needs unattended-upgrades and python3-apt (make host-packages)",
)
needs_perl = pytest.mark.skipif(shutil.which("perl") is None, reason="needs perl")
RIG = [
    "linux-generic",
    "nvidia-headless-no-dkms-580-server",
    "nvidia-utils-580-server",
    "linux-modules-nvidia-580-server-generic",
    "openssl",
]


def render(relative):
    variables = yaml.safe_load((ROLE / "vars/main.yml").read_text())
    text = (ROLE / "templates" / f"{relative}.j2").read_text()
    return jinja2.Template(text, keep_trailing_newline=True).render(
        ansible_managed="Ansible managed", **variables
    )


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    out = tmp_path_factory.mktemp("ubuntu-archive")
    subprocess.run([sys.executable, str(BUILD), str(out)], check=True, capture_output=True)
    return out


def rig_after_a_point_release(tmp_path, archive, guard):
    """A rig installed from the first suite, its owner's upgrader allowed the double's origin
    (Ubuntu's default allows its -security suite), then the -updates suite published."""
    apt = AptRoot(tmp_path / "root", archive, ["noble"])
    apt.run("install", *RIG)
    conf = apt.root / "etc/apt/apt.conf.d"
    (conf / "50unattended-upgrades").write_text(
        'Unattended-Upgrade::Origins-Pattern { "origin=Ubuntu (TEST DOUBLE)"; };\n'
        'Unattended-Upgrade::Package-Blacklist { "owners-own-pin"; };\n'
    )
    if guard:
        (apt.root / UU_CONF).write_text(render(UU_CONF))
    apt.set_suites(["noble", "noble-updates"])
    return apt


def nightly(apt):
    """What the real unattended-upgrades would upgrade tonight, and its log."""
    before = apt.status.read_text()
    proc = subprocess.run(
        [SYSTEM_PYTHON, str(DRY_RUN), str(apt.root)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log
    assert apt.status.read_text() == before, "a dry run changed the status file"
    found = re.search(r"^Packages that will be upgraded: (.*)$", log, re.M)
    return (found[1].split() if found else []), log


@needs_upgrader
def test_without_the_guard_the_nightly_upgrade_takes_a_kernel_whose_module_it_cannot_take(
    tmp_path, archive
):
    """The fault the guard is for, shown with the real upgrader on an archive that publishes as
    Canonical does (the running kernel's module is not rebuilt for the new driver): the kernel
    metas move, so the next boot is the new kernel; its module comes only with the new driver,
    which would remove the running kernel's module, and unattended-upgrades never removes a
    package: the new kernel boots without an NVIDIA module."""
    upgraded, log = nightly(rig_after_a_point_release(tmp_path, archive, guard=False))
    assert "linux-generic" in upgraded and "linux-image-generic" in upgraded, log
    assert "linux-modules-nvidia-580-server-generic" not in upgraded, log
    assert "libnvidia-compute-580-server" not in upgraded, log


@needs_upgrader
def test_the_guard_keeps_the_nightly_upgrade_to_what_is_neither_kernel_nor_driver(
    tmp_path, archive
):
    upgraded, log = nightly(rig_after_a_point_release(tmp_path, archive, guard=True))
    assert upgraded == ["openssl"], log
    # The owner's own list is kept: APT appends the role's file to it.
    initial = re.search(r"^Initial blacklist: (.*)$", log, re.M)[1].split()
    assert "owners-own-pin" in initial and "nvidia-" in initial, log


def test_every_kernel_and_driver_package_of_both_families_is_kept_and_nothing_else():
    patterns = yaml.safe_load((ROLE / "vars/main.yml").read_text())[
        "_vllm_dual_fast_upgrade_guard_patterns"
    ]

    def kept(name):  # unattended-upgrades' rule: re.match, anchored at the start only
        return any(re.match(p, name) for p in patterns)

    guarded = [
        "linux-image-6.8.0-51-generic",
        "linux-generic-hwe-24.04",
        "linux-image-amd64",
        "linux-headers-amd64",
        "linux-modules-nvidia-580-server-generic",
        "linux-signatures-nvidia-6.8.0-51-generic",
        "nvidia-kernel-dkms",
        "nvidia-driver",
        "libnvidia-compute-580-server",
        "libcuda1",
        "firmware-nvidia-gsp",
        "nvidia-utils-580-server",
    ]
    free = [
        "openssl",
        "linux-base",
        "linux-libc-dev",
        "linux-firmware",
        "docker.io",
        "nvidia-container-toolkit",
    ]
    assert [n for n in guarded if not kept(n)] == []
    # The container toolkit is NVIDIA's too, but it does not drive the module: kept too, as
    # `nvidia-` matches it; everything else here must stay upgradable.
    assert [n for n in free if kept(n)] == ["nvidia-container-toolkit"]


def test_apt_reads_the_guard_as_a_list_it_appends(tmp_path):
    (tmp_path / "apt.conf.d").mkdir()
    (tmp_path / "apt.conf.d/50owner").write_text(
        'Unattended-Upgrade::Package-Blacklist { "owners-own-pin"; };\n'
    )
    (tmp_path / "apt.conf.d/51vllm-dual-fast").write_text(render(UU_CONF))
    (tmp_path / "apt.conf").write_text(f'Dir::Etc::Parts "{tmp_path}/apt.conf.d";\n')
    out = subprocess.run(
        ["apt-config", "dump", "Unattended-Upgrade::Package-Blacklist"],
        env={"APT_CONFIG": str(tmp_path / "apt.conf"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    values = re.findall(r'^Unattended-Upgrade::Package-Blacklist:: "(.*)";$', out, re.M)
    patterns = yaml.safe_load((ROLE / "vars/main.yml").read_text())[
        "_vllm_dual_fast_upgrade_guard_patterns"
    ]
    assert values == ["owners-own-pin", *patterns], out


@needs_perl
def test_needrestart_reads_the_guard_and_keeps_its_hands_off_the_serving_stack(tmp_path):
    conf = tmp_path / "vllm-dual-fast.conf"
    conf.write_text(render(NR_CONF))
    # needrestart loads conf.d files with Perl's `do` into %nrconf; first matching override wins.
    script = r"""
        our %nrconf = (kernelhints => 1, override_rc => {});
        do $ARGV[0]; die "config: $@" if $@;
        print "kernelhints=$nrconf{kernelhints}\n";
        for my $unit (@ARGV[1..$#ARGV]) {
            my ($hit) = grep { $unit =~ $_ } keys %{$nrconf{override_rc}};
            print "$unit=", (defined $hit ? $nrconf{override_rc}{$hit} : "default"), "\n";
        }
    """
    units = [
        "docker.service",
        "containerd.service",
        "nvidia-persistenced.service",
        "vllm-dual-fast-engine-guard.service",
        "ssh.service",
        "cron.service",
    ]
    out = subprocess.run(
        ["perl", "-e", script, str(conf), *units], capture_output=True, text=True, check=True
    ).stdout
    got = dict(line.split("=", 1) for line in out.splitlines())
    assert got == {
        "kernelhints": "-1",
        "docker.service": "0",
        "containerd.service": "0",
        "nvidia-persistenced.service": "0",
        "vllm-dual-fast-engine-guard.service": "0",
        "ssh.service": "default",
        "cron.service": "default",
    }, out
