"""Debian's DKMS builds the driver for every kernel whose headers are installed, so the kernel
GRUB boots after the driver's reboot (the newest installed image) needs its headers. The real
APT resolver decides, on a fake root, against an archive with Debian's dependency shapes (read
from trixie's Packages): linux-image-amd64 6.12.117-1 in trixie depends on
linux-image-6.12.117+deb13-amd64 (= 6.12.117-1), linux-headers-amd64 likewise, and
trixie-security carries 6.12.118-1 of both. The rig is a fresh install that has not upgraded
since the security kernel came out: its image meta is at 6.12.117-1."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from ansible_runner import run_playbook
from apt_fake_root import AptRoot

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "vdf_driver_filters_dk", ROOT / "roles/vllm_dual_fast/filter_plugins/vllm_dual_fast_driver.py"
)
drv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drv)

pytestmark = pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")
ROLE = ROOT / "roles/vllm_dual_fast"
# The driver packages the role installs on trixie (its own vars file, not a copy).
USER_SPACE = yaml.safe_load((ROLE / "vars/Debian-13.yml").read_text())[
    "_vllm_dual_fast_driver_packages"
]
FACTS = {"kernel": "6.12.117+deb13-amd64", "distribution": "Debian"}


def role_install_packages(tmp_path):
    """What driver_debian.yml hands driver_install.yml to install on this rig: its include
    task's vars, rendered by Ansible with the role's defaults, trixie's vars and filters."""
    tasks = yaml.safe_load((ROLE / "tasks/driver_debian.yml").read_text())
    include = next(
        t for t in tasks if t.get("ansible.builtin.include_tasks") == "driver_install.yml"
    )
    out_file = tmp_path / "install-packages.json"
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/Debian-13.yml")],
            "tasks": [
                {
                    "name": "Write the install list down",
                    "vars": include["vars"],
                    "ansible.builtin.copy": {
                        "content": "{{ _vllm_dual_fast_driver_install_packages | to_json }}",
                        "dest": str(out_file),
                        "mode": "0644",
                    },
                }
            ],
        }
    ]
    result, out = run_playbook(tmp_path, play, {"ansible_facts": FACTS})
    assert result.returncode == 0, out
    return json.loads(out_file.read_text())


def _stanza(name, version, depends=""):
    return (
        f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: x <x@x>\n"
        + (f"Depends: {depends}\n" if depends else "")
        + f"Filename: pool/{name}_{version}.deb\nSize: 1\nDescription: double\n\n"
    )


def _kernel(upstream):
    abi, version = f"{upstream}+deb13-amd64", f"{upstream}-1"
    return (
        _stanza("linux-image-amd64", version, f"linux-image-{abi} (= {version})")
        + _stanza(f"linux-image-{abi}", version)
        + _stanza("linux-headers-amd64", version, f"linux-headers-{abi} (= {version})")
        + _stanza(f"linux-headers-{abi}", version)
    )


def _suite(archive, suite, packages):
    dist = archive / "debian/dists" / suite
    (dist / "main/binary-amd64").mkdir(parents=True)
    (dist / "main/binary-amd64/Packages").write_text(packages)
    digest = hashlib.sha256(packages.encode()).hexdigest()
    (dist / "Release").write_text(
        f"Suite: {suite}\nCodename: {suite}\nArchitectures: amd64\n"
        f"Components: main\nSHA256:\n {digest} {len(packages.encode())} "
        "main/binary-amd64/Packages\n"
    )


@pytest.fixture
def rig(tmp_path):
    archive = tmp_path / "archive"
    driver = "".join(_stanza(name, "550.163.01-2") for name in USER_SPACE)
    _suite(archive, "trixie", _kernel("6.12.117") + driver)
    _suite(archive, "trixie-security", _kernel("6.12.118"))
    apt = AptRoot(
        tmp_path / "root", tmp_path, ["trixie"], snapshot="archive", distribution="debian"
    )
    apt.run("install", "linux-image-amd64")  # the installer's kernel
    apt.set_suites(["trixie", "trixie-security"])  # then the security kernel comes out
    return apt


def next_boot_has_headers(apt):
    """(kernel GRUB boots by default: the newest installed image, whether its headers are there)."""
    installed = apt.installed()
    images = sorted(
        (n[len("linux-image-") :] for n in installed if re.fullmatch(r"linux-image-\d.*", n)),
        key=lambda k: [int(x) for x in re.findall(r"\d+", k)],
    )
    return images[-1], f"linux-headers-{images[-1]}" in installed


def test_the_headers_meta_alone_leaves_the_next_boot_without_a_module(rig):
    """The shape of the failure: headers for 6.12.118, DKMS builds for it alone, and the rig
    reboots into 6.12.117, which has neither headers nor module."""
    rig.run("install", "linux-headers-amd64", *USER_SPACE)
    assert next_boot_has_headers(rig) == ("6.12.117+deb13-amd64", False)


def test_the_role_s_install_boots_a_kernel_dkms_built_for(rig, tmp_path):
    packages = role_install_packages(tmp_path)
    assert set(USER_SPACE) <= set(packages)
    rig.run("install", *packages)
    assert next_boot_has_headers(rig) == ("6.12.118+deb13-amd64", True)


@pytest.mark.parametrize(
    ("kernel", "headers", "expected"),
    [
        (
            "6.12.117+deb13-cloud-amd64",
            "linux-headers-cloud-amd64",
            ["linux-headers-cloud-amd64", "linux-image-cloud-amd64"],
        ),
        # an owner's own headers choice, or a kernel of no known flavour: their kernel is theirs
        (
            "6.12.117+deb13-amd64",
            "linux-headers-6.12.117+deb13-amd64",
            ["linux-headers-6.12.117+deb13-amd64"],
        ),
        ("6.12.9-custom", "linux-headers-6.12.9-custom", ["linux-headers-6.12.9-custom"]),
        (
            "6.8.0-50-generic",
            "linux-headers-generic",
            ["linux-headers-generic"],
        ),  # Ubuntu: not here
    ],
)
def test_the_image_meta_moves_with_the_headers_meta_only(kernel, headers, expected):
    distribution = "Ubuntu" if kernel.endswith("generic") else "Debian"
    assert drv.debian_kernel_packages(kernel, distribution, headers) == expected
