"""Pull mode's Python per release: the interpreter each supported release's vars name must be
one the hash-pinned Ansible (files/pull-requirements.txt) installs on, as that release's
archive ships it; a release without one is refused at enrolment, in preflight, before anything
changes, with the reason (not by pip)."""

from pathlib import Path

import pytest
import yaml
from ansible.module_utils.vllm_dual_fast_domain import pull
from ansible_runner import run_playbook

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles/vllm_dual_fast"
REQUIREMENTS = (ROOT / "files/pull-requirements.txt").read_text()

# What each release's own archive ships (python3, and jammy's python3.11, a 3.11.0 release
# candidate that jammy-updates never moved past).
ARCHIVE_PYTHONS = {
    "Ubuntu-22.yml": {"python3": "3.10.12", "python3.11": "3.11.0rc1"},
    "Ubuntu-24.yml": {"python3": "3.12.3"},
    "Debian-12.yml": {"python3": "3.11.2"},
    "Debian-13.yml": {"python3": "3.13.5"},
}


def release_vars(name):
    return yaml.safe_load((ROLE / "vars" / name).read_text())


def test_the_pinned_requirements_name_the_pythons_they_install_on():
    assert pull.pull_python_range(REQUIREMENTS) == ((3, 11), (3, 13))
    with pytest.raises(ValueError, match="pin-pull-requirements"):
        pull.pull_python_range("ansible==1\n")


def test_every_supported_release_has_a_vars_file_with_its_pull_python():
    releases = sorted(p.name for p in (ROLE / "vars").glob("*-*.yml"))
    assert releases == sorted(ARCHIVE_PYTHONS)


@pytest.mark.parametrize("release", sorted(ARCHIVE_PYTHONS))
def test_each_release_s_pull_python_installs_the_pinned_ansible(release):
    """Before: pull mode built its virtualenv with python3 everywhere; jammy's is 3.10."""
    chosen = release_vars(release)["_vllm_dual_fast_pull_python"]
    shipped = ARCHIVE_PYTHONS[release][chosen]
    assert pull.pull_python_problem(shipped, REQUIREMENTS, chosen) == ""
    declared = release_vars(release)["_vllm_dual_fast_pull_python_version"]
    assert shipped.startswith(declared + "."), (declared, shipped)
    packages = release_vars(release)["_vllm_dual_fast_pull_python_packages"]
    assert f"{chosen}-venv" in packages, packages  # ensurepip lives in the -venv package


@pytest.mark.parametrize("version", ["3.10.12", "3.14.0", "3.9", "2.7.18"])
def test_a_python_outside_the_pinned_range_is_refused_with_the_way_out(version):
    problem = pull.pull_python_problem(version, REQUIREMENTS, "python3")
    assert f"python3 is {version}" in problem
    assert "Python 3.11 to 3.13" in problem and "ansible-core 2.19" in problem
    assert "push mode" in problem


def test_an_unreadable_version_is_refused_not_guessed():
    assert "cannot tell the version" in pull.pull_python_problem("", REQUIREMENTS, "python3.11")


def preflight_pull_check():
    tasks = yaml.safe_load((ROLE / "tasks/preflight.yml").read_text())
    [task] = [t for t in tasks if t["name"].startswith("Stop an enrolment whose release")]
    return task


@pytest.mark.parametrize(("version", "refused"), [("3.10", True), ("3.11", False)])
def test_preflight_refuses_an_enrolment_on_a_release_without_a_fitting_python(
    tmp_path, version, refused
):
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "roles": [],
            "tasks": [preflight_pull_check()],
        }
    ]
    (tmp_path / "files").symlink_to(ROLE / "files")  # where the task's file lookup looks
    extra = {
        "vllm_dual_fast_stages": ["preflight", "pull"],
        "_vllm_dual_fast_pull_python": "python3",
        "_vllm_dual_fast_pull_python_version": version,
    }
    result, out = run_playbook(tmp_path, play, extra)
    assert (result.returncode != 0) is refused, out
    if refused:
        assert "this release's python3 is 3.10" in out and "push mode" in out, out
