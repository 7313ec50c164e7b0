"""maintain.yml's first step, with the real dpkg on a private root (DPKG_ROOT, DPKG_ADMINDIR):
a package an interrupted dpkg run left unpacked is found by `dpkg --audit` and finished by
`dpkg --configure -a` in the plan phase, while the rig still serves; one whose postinst still
fails does not stop the run there, and what dpkg said goes into the result's lines."""

import shutil
import subprocess

import pytest
import yaml
from ansible_runner import ROLE, run_playbook

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("dpkg", "dpkg-deb")),
                                reason="needs dpkg and dpkg-deb")
NAMES = ("Ask dpkg for packages an earlier run left unfinished", "Finish them before serving stops",
         "Keep what dpkg said when it could not finish them")


def unpacked_root(tmp_path, postinst_exit):
    """A root where dpkg unpacked vdf-probe and stopped before configuring it."""
    root, pkg = tmp_path / "root", tmp_path / "pkg"
    admin = root / "var/lib/dpkg"
    for sub in ("updates", "info"):
        (admin / sub).mkdir(parents=True)
    (admin / "status").touch()
    (admin / "available").touch()
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN/control").write_text("Package: vdf-probe\nVersion: 1\nArchitecture: all\n"
                                        "Maintainer: x <x@x>\nDescription: probe\n")
    (pkg / "DEBIAN/postinst").write_text(
        f"#!/bin/sh\necho setting up the probe\nexit {postinst_exit}\n")
    (pkg / "DEBIAN/postinst").chmod(0o755)
    subprocess.run(["dpkg-deb", "-b", str(pkg), str(tmp_path / "probe.deb")], check=True,
                   capture_output=True)
    subprocess.run(["dpkg", f"--root={root}", f"--admindir={admin}", "--force-script-chrootless",
                    "--unpack", str(tmp_path / "probe.deb")], check=True, capture_output=True)
    env = {"DPKG_ROOT": str(root), "DPKG_ADMINDIR": str(admin), "DPKG_FORCE": "script-chrootless"}
    return admin, env


def status_of(admin):
    return next(line for line in (admin / "status").read_text().splitlines()
                if line.startswith("Status:"))


def run_first_step(tmp_path, env):
    tasks = yaml.safe_load((ROLE / "tasks/maintain.yml").read_text())
    step = [t for t in tasks if t.get("name") in NAMES]
    assert len(step) == len(NAMES)
    shown = {"name": "Show the lines",
             "ansible.builtin.debug": {"var": "_vllm_dual_fast_mnt_apt_lines"}}
    play = [{"hosts": "localhost", "gather_facts": False, "environment": env,
             "vars": {"_vllm_dual_fast_mnt_apt_lines": []}, "tasks": [*step, shown]}]
    return run_playbook(tmp_path, play)


def test_a_package_left_unpacked_is_configured_in_the_plan_phase(tmp_path):
    admin, env = unpacked_root(tmp_path, 0)
    assert status_of(admin) == "Status: install ok unpacked"
    result, out = run_first_step(tmp_path, env)
    assert result.returncode == 0, out
    assert status_of(admin) == "Status: install ok installed", out
    assert "_vllm_dual_fast_mnt_apt_lines: []" in out, out


def test_one_that_still_fails_is_left_to_the_upgrade_and_named(tmp_path):
    admin, env = unpacked_root(tmp_path, 1)
    result, out = run_first_step(tmp_path, env)
    assert result.returncode == 0, out
    assert status_of(admin) == "Status: install ok half-configured", out
    assert "setting up the probe" in out and "vdf-probe" in out, out


def test_nothing_unfinished_runs_no_configure(tmp_path):
    admin, env = unpacked_root(tmp_path, 0)
    subprocess.run(["dpkg", "--configure", "-a"], check=True, capture_output=True,
                   env={**env, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    result, out = run_first_step(tmp_path, env)
    assert result.returncode == 0, out
    # The step's own lines, up to the next task: skipped, not run (it would say changed).
    finish = out.split("TASK [Finish them before serving stops]", 1)[1].split("TASK [", 1)[0]
    assert "skipping: [localhost]" in finish and "changed:" not in finish, out
