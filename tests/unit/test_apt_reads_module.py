"""The module that reads APT's and dpkg's state in one run (library/vllm_dual_fast_apt_reads.py):
the commands it runs for each reading, the shapes it returns (those of the command tasks it
replaced, which driver_holds.yml and container_stack.yml read unchanged), and the owner's sources
found by the real grep in real folders. apt-mark and dpkg-query are answered by a recording
runner, except where a test says it runs them."""

import importlib.util

from ansible.module_utils.vllm_dual_fast_command import command_result, run_command
from ansible_runner import ROLE

spec = importlib.util.spec_from_file_location(
    "vllm_dual_fast_apt_reads", ROLE / "library/vllm_dual_fast_apt_reads.py")
apt_reads = importlib.util.module_from_spec(spec)
spec.loader.exec_module(apt_reads)

DOCKER = "https://download.docker.com/linux/debian"
CTK = "https://nvidia.github.io/libnvidia-container/stable/deb/amd64/"


class Runner:
    """Answers apt-mark and dpkg-query from a table; runs anything else for real."""

    def __init__(self, answers):
        self.answers, self.ran = answers, []

    def __call__(self, argv, timeout=60):
        self.ran.append(argv)
        if argv[0] in self.answers:
            rc, out = self.answers[argv[0]]
            return command_result(rc, out, "" if rc == 0 else "E: broken", argv)
        return run_command(argv, timeout)


def sources(tmp_path, files):
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (apt / name).write_text(text)
    return apt


def test_holds_and_installed_packages_are_read_as_their_commands_registered_them(tmp_path):
    runner = Runner({"apt-mark": (0, "nvidia-driver\nlibcuda1\n"),
                     "dpkg-query": (0, "installed docker.io\nnot-installed runc\n")})
    record = tmp_path / "driver-holds.json"
    record.write_text('{"held_by_role": ["libcuda1"]}\n')
    found = apt_reads.read_apt(["held", "installed"], files=[str(record), str(tmp_path / "gone")],
                               runner=runner)
    assert [argv[0] for argv in runner.ran] == ["apt-mark", "dpkg-query"]
    assert runner.ran[1][-1] == "--showformat=${db:Status-Status} ${Package}\\n"
    assert found["held"]["stdout"] == "nvidia-driver\nlibcuda1"       # as `command` strips it
    assert found["installed"]["stdout_lines"] == ["installed docker.io", "not-installed runc"]
    assert found["files"] == [
        {"path": str(record), "exists": True, "content": '{"held_by_role": ["libcuda1"]}\n'},
        {"path": str(tmp_path / "gone"), "exists": False, "content": ""}]
    assert "owner_sources" not in found


def test_only_what_is_asked_is_read():
    runner = Runner({})
    assert apt_reads.read_apt([], runner=runner) == {}
    assert runner.ran == []


def test_the_owners_sources_are_found_per_url_and_the_roles_own_are_not(tmp_path):
    apt = sources(tmp_path, {
        "sources.list.d/docker.list":
            f"deb [signed-by=/etc/apt/keyrings/docker.asc] {DOCKER} bookworm stable\n",
        # NVIDIA's install document writes $(ARCH) where the role's URL names the architecture.
        "sources.list.d/nvidia-container-toolkit.list":
            "deb [signed-by=/usr/share/keyrings/nvidia.gpg] "
            "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n",
        "sources.list.d/vllm-dual-fast-docker.sources": f"Types: deb\nURIs: {DOCKER}\n",
        "sources.list.d/notes.txt": f"{DOCKER}\n",
    })
    found = apt_reads.read_apt(owner_source_urls=[DOCKER + "/", CTK], apt_dir=str(apt),
                               runner=Runner({}))
    docker, ctk = found["owner_sources"]
    assert docker["rc"] == 0 and docker["stdout_lines"] == [str(apt / "sources.list.d/docker.list")]
    assert ctk["stdout_lines"] == [str(apt / "sources.list.d/nvidia-container-toolkit.list")]
    assert apt_reads.failed_reading(found) == ""


def test_no_owner_source_is_grep_s_no_match_not_a_failure(tmp_path):
    apt = sources(tmp_path, {"sources.list": "deb http://deb.example/debian bookworm main\n"})
    found = apt_reads.read_apt(owner_source_urls=[DOCKER], apt_dir=str(apt), runner=Runner({}))
    assert found["owner_sources"][0]["rc"] == 1
    assert found["owner_sources"][0]["stdout"] == ""
    assert apt_reads.failed_reading(found) == ""


def test_a_reading_that_failed_fails_as_its_task_did():
    broken = apt_reads.read_apt(["held", "installed"], runner=Runner(
        {"apt-mark": (0, ""), "dpkg-query": (2, "")}))
    assert apt_reads.failed_reading(broken).startswith("dpkg-query --show failed: E: broken")
    missing_dir = apt_reads.read_apt(owner_source_urls=[DOCKER], apt_dir="/nonexistent/apt",
                                     runner=Runner({}))
    assert missing_dir["owner_sources"][0]["rc"] == 2
    assert apt_reads.failed_reading(missing_dir).startswith("searching the apt sources failed")


def test_the_installed_packages_read_by_the_real_dpkg_query_list_this_machine_s():
    found = apt_reads.read_apt(["installed"])
    assert found["installed"]["rc"] == 0
    assert "installed dpkg" in found["installed"]["stdout_lines"]
