"""Which Docker packages the role asks for: never the other family's engine over the owner's."""

import importlib.util
import os
import re
from pathlib import Path

import pytest
import yaml
from ansible_runner import ROLE, run_playbook

_PATH = Path(__file__).parents[2] / "roles/vllm_dual_fast/filter_plugins/vllm_dual_fast_stack.py"
_spec = importlib.util.spec_from_file_location("stack_filters", _PATH)
stack = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(stack)

DEBIAN13 = ["docker.io", "docker-cli", "docker-compose"]
REPO = ["docker-ce", "docker-ce-cli", "containerd.io", "docker-compose-plugin"]


def test_an_owner_installed_docker_ce_is_kept_on_a_distro_choice():
    chosen = stack.docker_packages({"docker-ce": [], "docker-ce-cli": []}, False, DEBIAN13, REPO)
    assert "docker.io" not in chosen
    assert "docker-compose-plugin" in chosen


def test_an_owner_installed_docker_io_is_kept_on_a_repo_choice():
    assert stack.docker_packages(["docker.io"], True, DEBIAN13, REPO) == DEBIAN13


def test_a_fresh_host_follows_the_choice():
    assert stack.docker_packages([], False, DEBIAN13, REPO) == DEBIAN13
    assert stack.docker_packages([], True, DEBIAN13, REPO) == REPO


def _place(what, fs, free, need):
    return {"what": what, "fs": fs, "free_gib": free, "need_gib": need}


def test_nothing_left_to_download_needs_only_the_headroom():
    places = [_place("data", "64", 12, 10), _place("docker", "64", 12, 0)]
    assert stack.disk_shortfalls(places) == []


def test_one_file_system_must_hold_both_downloads():
    places = [_place("data", "64", 45, 30), _place("docker", "64", 45, 20)]
    [problem] = stack.disk_shortfalls(places)
    assert "45 GiB free" in problem and "50 GiB needed" in problem
    assert "data (30 GiB)" in problem and "docker (20 GiB)" in problem


def test_separate_file_systems_are_judged_apart():
    problems = stack.disk_shortfalls([_place("data", "64", 45, 30), _place("docker", "65", 5, 20)])
    assert len(problems) == 1 and "docker (20 GiB)" in problems[0] and "5 GiB free" in problems[0]


# The role's own dpkg-query command (container_stack.yml), on this Debian host.
DPKG_QUERY = ["dpkg-query", "--show", "--showformat=${db:Status-Status} ${Package}\\n"]


def test_installed_packages_reads_the_real_dpkg_query_of_the_role():
    import shutil
    import subprocess

    if not shutil.which("dpkg-query"):
        import pytest
        pytest.skip("no dpkg-query on this host")
    out = subprocess.run(DPKG_QUERY, capture_output=True, text=True, check=True).stdout
    names = stack.installed_packages(out)
    assert "dpkg" in names and "base-files" in names
    assert all(" " not in name and ":" not in name for name in names)
    # Every package dpkg calls installed, once (a multiarch host lists a name per architecture).
    assert len(names) == len({line.split(" ")[1] for line in out.splitlines()
                              if line.startswith("installed ")})


def test_only_fully_installed_packages_count_as_installed():
    out = ("installed docker.io\nconfig-files nvidia-container-toolkit\n"
           "half-configured docker-cli\nunpacked python3-debian\nnot-installed docker-ce\n"
           "installed ca-certificates\n")
    assert stack.installed_packages(out) == ["ca-certificates", "docker.io"]
    assert stack.installed_packages("") == []
    # What the role then asks apt for: the rest of the family, and the toolkit.
    chosen = stack.docker_packages(stack.installed_packages(out), False, DEBIAN13, REPO)
    assert set(chosen) - set(stack.installed_packages(out)) == {"docker-cli", "docker-compose"}


FIXES = [{"cve": "CVE-2024-0132", "fixed_in": "1.16.2", "what": "a"},
         {"cve": "CVE-2025-23266", "fixed_in": "1.17.8", "what": "b"}]


@pytest.mark.parametrize("version, open_cves", [
    ("1.14.6-1", ["CVE-2024-0132", "CVE-2025-23266"]),
    ("1.16.2-1", ["CVE-2025-23266"]),
    ("1.17.7-1", ["CVE-2025-23266"]),
    ("1.17.8~rc.1-1", ["CVE-2025-23266"]),        # a release candidate before the fix
    ("1.17.8-1", []),
    ("1:1.18.0-1", []),                            # an epoch
    ("1.17.10-1", []),                             # compared as numbers, not text
    ("", []),                                      # not installed: nothing to say
])
def test_a_toolkit_older_than_a_fix_leaves_that_escape_open(version, open_cves):
    assert [f["cve"] for f in stack.toolkit_cves_open(version, FIXES)] == open_cves


def preflight_tasks(*names):
    tasks = yaml.safe_load((ROLE / "tasks/preflight.yml").read_text())
    return [t for t in tasks if t["name"] in names]


# What preflight's host-reads module reads of the toolkit, on this host (dpkg-query on PATH).
READ_TOOLKIT = {"name": "Read the installed toolkit's version",
                "vllm_dual_fast_host_reads": {"read": ["toolkit"]},
                "register": "_vllm_dual_fast_host_read"}


@pytest.mark.parametrize("installed, warned", [
    ("1.16.1-1", ["CVE-2024-0132", "CVE-2025-23266"]), ("1.17.8-1", []), (None, [])])
def test_preflight_warns_of_each_escape_the_installed_toolkit_leaves_open(tmp_path, installed,
                                                                          warned):
    """Before: the role installed the toolkit with state present and never said its version
    lacked the fixes (CVE-2024-0132, CVE-2025-23266)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "dpkg-query").write_text(
        f"#!/bin/sh\nprintf %s '{installed}'\n" if installed else
        "#!/bin/sh\necho 'dpkg-query: no packages found matching nvidia-container-toolkit' >&2"
        "\nexit 1\n")
    (bin_dir / "dpkg-query").chmod(0o755)
    fixes = yaml.safe_load((ROLE / "vars/main.yml").read_text())[
        "_vllm_dual_fast_container_toolkit_fixes"]
    play = [{"name": "Toolkit warning", "hosts": "localhost", "gather_facts": False,
             "vars": {"_vllm_dual_fast_container_toolkit_fixes": fixes},
             "tasks": [READ_TOOLKIT] + preflight_tasks(
                 "Warn that the container toolkit leaves a container escape open")}]
    result, text = run_playbook(tmp_path, play, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert result.returncode == 0, text
    said = re.findall(r"WARNING: nvidia-container-toolkit \S+ lacks the fix for (CVE-[\d-]+)",
                      text)
    assert said == warned, text
