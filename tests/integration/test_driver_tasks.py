"""The driver's task files and defaults, run by ansible-playbook on localhost against a private
APT world in a temporary folder (never this machine's /etc/apt): the role's tasks are taken from
its files unchanged, host facts are passed in, and APT reads a private configuration (APT_CONFIG)
whose archive is a local file: repository standing in for Debian's."""

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_runner import run_playbook

ROOT = Path(__file__).parents[2]
ROLE = ROOT / "roles/vllm_dual_fast"

needs_apt = pytest.mark.skipif(
    shutil.which("apt-get") is None, reason="needs APT (Debian or Ubuntu)"
)


ROLE_VARS = yaml.safe_load((ROLE / "vars/main.yml").read_text())


def play(tasks, vars_files=()):
    return [
        {
            "name": "Driver tasks under test",
            "hosts": "localhost",
            "gather_facts": False,
            "vars_files": [str(p) for p in vars_files],
            "tasks": tasks,
        }
    ]


def role_tasks(name):
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def recap(out):
    found = re.search(r"localhost\s*:\s*ok=(\d+)\s+changed=(\d+).*failed=(\d+)", out)
    assert found, out
    return {"ok": int(found[1]), "changed": int(found[2]), "failed": int(found[3])}


# --- defaults rendered for real hosts' facts (item 3, item 6 headers) ---------------------------

HOSTS = {
    "debian12": {
        "distribution": "Debian",
        "distribution_version": "12.11",
        "distribution_major_version": "12",
        "architecture": "x86_64",
        "kernel": "6.1.0-37-amd64",
    },
    "debian13": {
        "distribution": "Debian",
        "distribution_version": "13.1",
        "distribution_major_version": "13",
        "architecture": "x86_64",
        "kernel": "6.12.48+deb13-amd64",
    },
    "ubuntu2204": {
        "distribution": "Ubuntu",
        "distribution_version": "22.04",
        "distribution_major_version": "22",
        "architecture": "x86_64",
        "kernel": "5.15.0-160-generic",
    },
    "ubuntu2404": {
        "distribution": "Ubuntu",
        "distribution_version": "24.04",
        "distribution_major_version": "24",
        "architecture": "x86_64",
        "kernel": "6.8.0-90-generic",
    },
}


@pytest.fixture(scope="module")
def rendered_defaults(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("defaults")
    out_file = tmp_path / "rendered.json"
    tasks = [
        {
            "name": "Render the driver defaults for each host's facts",
            "ansible.builtin.set_fact": {
                "rendered": "{{ rendered | default({}) | combine({item.key: {"
                "'url': vllm_dual_fast_cuda_repo_url,"
                " 'key': vllm_dual_fast_cuda_repo_key_url,"
                " 'headers': vllm_dual_fast_driver_kernel_headers_package}}) }}"
            },
            "vars": {"ansible_facts": "{{ item.value }}"},
            "loop": "{{ hosts | dict2items }}",
        },
        {
            "name": "Write them out",
            "ansible.builtin.copy": {
                "content": "{{ rendered | to_json }}",
                "dest": str(out_file),
                "mode": "0644",
            },
        },
    ]
    result, out = run_playbook(
        tmp_path, play(tasks, [ROLE / "defaults/main.yml"]), {"hosts": HOSTS}
    )
    assert result.returncode == 0, out
    return json.loads(out_file.read_text())


@pytest.mark.parametrize(
    ("host", "directory"),
    [
        ("debian12", "debian12"),
        ("debian13", "debian13"),
        ("ubuntu2204", "ubuntu2204"),
        ("ubuntu2404", "ubuntu2404"),
    ],
)
def test_cuda_repo_url_uses_the_distributions_major_version(rendered_defaults, host, directory):
    url = f"https://developer.download.nvidia.com/compute/cuda/repos/{directory}/x86_64"
    assert rendered_defaults[host]["url"] == url
    assert rendered_defaults[host]["key"] == f"{url}/3bf863cc.pub"


@pytest.mark.parametrize("host", ["debian12", "debian13"])
def test_debian_headers_default_is_the_meta_package(rendered_defaults, host):
    assert rendered_defaults[host]["headers"] == "linux-headers-amd64"


# --- a private APT world: Debian's archive as a local file: repository --------------------------


def write_suite(archive, suite, packages_by_component):
    """dists/<suite> with Packages (binary-amd64) and empty Sources for every component, and a
    Release listing their hashes (unsigned: the private APT config allows insecure repositories)."""
    dist = archive / "dists" / suite
    lines = []
    for component in ("main", "contrib", "non-free", "non-free-firmware"):
        for rel, text in (
            (f"{component}/binary-amd64/Packages", packages_by_component.get(component, "")),
            (f"{component}/source/Sources", ""),
        ):
            path = dist / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            lines.append(f" {hashlib.sha256(text.encode()).hexdigest()} {len(text.encode())} {rel}")
    (dist / "Release").write_text(
        f"Origin: Debian\nLabel: Debian\nSuite: {suite}\nCodename: {suite.split('-')[0]}\n"
        "Date: Thu, 01 Jan 2026 00:00:00 UTC\nArchitectures: amd64\n"
        "Components: main contrib non-free non-free-firmware\nSHA256:\n" + "\n".join(lines) + "\n"
    )


def stanza(package, version):
    return (
        f"Package: {package}\nVersion: {version}\nArchitecture: amd64\nMaintainer: x <x@x>\n"
        f"Filename: pool/{package}_{version}.deb\nSize: 1\nDescription: double\n\n"
    )


def apt_world(tmp_path, codename, driver_version):
    """etc/apt (what the tasks edit), the archive double, and an APT_CONFIG that reads only them."""
    etc = tmp_path / "etc/apt"
    for sub in ("sources.list.d", "preferences.d", "apt.conf.d", "empty.d"):
        (etc / sub).mkdir(parents=True, exist_ok=True)
    archive = tmp_path / "mirror/debian"
    security = tmp_path / "mirror/debian-security"
    write_suite(archive, codename, {"non-free": stanza("nvidia-driver", driver_version)})
    write_suite(archive, f"{codename}-updates", {})
    write_suite(security, f"{codename}-security", {})
    state = tmp_path / "apt-state"
    for sub in ("lists/partial", "cache/archives/partial"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    conf = tmp_path / "apt.conf"
    conf.write_text(
        f'Dir::Etc "{etc}";\nDir::Etc::sourceparts "{etc}/sources.list.d";\n'
        f'Dir::State::Lists "{state}/lists";\nDir::Cache "{state}/cache";\n'
        'Dir::State::status "/dev/null";\n'
        'Acquire::Languages "none";\nAPT::Architecture "amd64";\nAPT::Architectures { "amd64"; };\n'
        'Acquire::AllowInsecureRepositories "true";\n'
    )
    return etc, archive, security, conf


def no_host_apt_paths(tasks):
    """The tasks reach APT's folder only through _vllm_dual_fast_apt_dir, so a test can point them
    at a temporary one: nothing here may touch this machine's /etc/apt."""
    assert "/etc/apt" not in yaml.safe_dump(tasks), yaml.safe_dump(tasks)
    return tasks


def debian_tasks_before_install():
    """driver_debian.yml up to its first package installation, with the package-list refresh
    replaced by `apt-get update` (the apt module would use this machine's python-apt cache)."""
    tasks = []
    for task in role_tasks("driver_debian.yml"):
        apt = task.get("ansible.builtin.apt")
        if (apt is not None and apt.get("name")) or task.get(
            "ansible.builtin.include_tasks"
        ) == "driver_install.yml":
            return no_host_apt_paths(tasks)
        if apt is not None:
            task = {
                "name": task["name"],
                "ansible.builtin.command": "apt-get update -q",
                "changed_when": False,
                "when": task.get("when", True),
            }
        tasks.append(task)
    raise AssertionError("driver_debian.yml installs nothing")


DEBIAN_FACTS = {
    "bookworm": {
        "distribution": "Debian",
        "distribution_release": "bookworm",
        "distribution_major_version": "12",
    },
    "trixie": {
        "distribution": "Debian",
        "distribution_release": "trixie",
        "distribution_major_version": "13",
    },
}


def run_debian_driver(tmp_path, codename, etc, conf, minimum, args=()):
    return run_playbook(
        tmp_path,
        play(debian_tasks_before_install()),
        {
            "ansible_facts": DEBIAN_FACTS[codename],
            "_vllm_dual_fast_apt_dir": str(etc),
            "vllm_dual_fast_driver_min_version": minimum,
            "vllm_dual_fast_driver_branch": 580,
            "vllm_dual_fast_driver_source": "distro",
        },
        env={"APT_CONFIG": str(conf)},
        args=args,
    )


@needs_apt
def test_stock_bookworm_host_gets_non_free_then_fails_naming_the_old_driver(tmp_path):
    etc, archive, security, conf = apt_world(tmp_path, "bookworm", "535.261.03-1")
    # The installer's sources.list, with the mirror double in place of deb.debian.org.
    stock = (Path(__file__).parents[1] / "unit" / "test_driver_filters.py").read_text()
    stock = stock.split('BOOKWORM_SOURCES_LIST = """\\\n', 1)[1].split('"""', 1)[0]
    stock = stock.replace("http://deb.debian.org/debian/", f"file:{archive}/")
    stock = stock.replace("http://security.debian.org/debian-security", f"file:{security}")
    (etc / "sources.list").write_text(stock)
    (etc / "sources.list").chmod(0o640)
    # Third-party sources next to it; APT is not pointed at them (no network here), the tasks are.
    docker = (
        "deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] "
        "https://download.docker.com/linux/debian bookworm stable\n"
    )
    (etc / "sources.list.d/docker.list").write_text(docker)
    conf.write_text(conf.read_text().replace(f"{etc}/sources.list.d", f"{etc}/empty.d"))

    result, out = run_debian_driver(tmp_path, "bookworm", etc, conf, "575")

    assert result.returncode != 0, out
    assert "535.261.03" in out and "575" in out, out
    assert "vllm_dual_fast_driver_source: cuda_repo" in out, out
    assert "vllm_dual_fast_driver_min_version" in out, out
    text = (etc / "sources.list").read_text()
    archive_lines = [line for line in text.splitlines() if line.startswith("deb")]
    assert len(archive_lines) == 6
    assert all(
        line.endswith(" main non-free-firmware contrib non-free") for line in archive_lines
    ), text
    assert text.splitlines()[0].startswith("#deb cdrom:") and text.splitlines()[0].endswith(
        "main non-free-firmware"
    )
    assert stat.S_IMODE((etc / "sources.list").stat().st_mode) == 0o640
    assert list(etc.glob("sources.list.*~")), "no backup of sources.list"
    assert (etc / "sources.list.d/docker.list").read_text() == docker
    assert not list((etc / "sources.list.d").glob("docker.list.*~"))


@needs_apt
def test_stock_trixie_host_check_mode_then_converges_and_is_idempotent(tmp_path):
    etc, archive, security, conf = apt_world(tmp_path, "trixie", "550.163.01-2")
    stock = (
        f"Types: deb deb-src\nURIs: file:{archive}/\nSuites: trixie trixie-updates\n"
        "Components: main non-free-firmware\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        f"Types: deb deb-src\nURIs: file:{security}/\nSuites: trixie-security\n"
        "Components: main non-free-firmware\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    # Signed-By names a keyring APT would check: the double is unsigned, so the private
    # configuration trusts it instead (the tasks see the file as the installer wrote it).
    conf.write_text(conf.read_text() + 'Acquire::Check-Valid-Until "false";\n')
    sources = etc / "sources.list.d/debian.sources"
    sources.write_text(stock)

    check, out = run_debian_driver(tmp_path, "trixie", etc, conf, "550", args=("--check", "--diff"))
    assert check.returncode == 0, out
    assert "+Components: main non-free-firmware contrib non-free" in out, out
    assert sources.read_text() == stock

    first, out = run_debian_driver(tmp_path, "trixie", etc, conf, "550")
    assert first.returncode == 0, out
    assert recap(out)["changed"] == 1, out
    assert sources.read_text() == stock.replace(
        "Components: main non-free-firmware", "Components: main non-free-firmware contrib non-free"
    )

    second, out = run_debian_driver(tmp_path, "trixie", etc, conf, "550")
    assert second.returncode == 0, out
    assert recap(out)["changed"] == 0, out
    assert not (etc / "sources.list").exists()


# --- CUDA repository: the branch lock ---------------------------------------------------------


@needs_apt
def test_cuda_repo_preferences_lock_the_driver_branch_and_leave_other_nvidia_packages(tmp_path):
    etc, archive, security, conf = apt_world(tmp_path, "bookworm", "535.261.03-1")
    # A flat repository double with NVIDIA's package names across two branches.
    cuda = tmp_path / "cuda"
    packages = (
        "".join(
            stanza(name, version)
            for name in (
                "nvidia-driver",
                "libcuda1",
                "nvidia-kernel-dkms",
                "cuda-drivers",
                "nvidia-driver-580",
                "libnvidia-compute-580",
            )
            for version in ("580.105.08-1", "590.44.01-1")
        )
        + stanza("cuda-drivers-580", "580.105.08-1")
        + stanza("nvidia-container-toolkit", "1.18.0-1")
    )
    cuda_repo_double(tmp_path, packages)
    (etc / "sources.list.d/cuda.list").write_text(f"deb file:{cuda} ./\n")

    pin_tasks = [t for t in role_tasks("driver_cuda_repo.yml") if "ansible.builtin.template" in t]
    assert len(pin_tasks) == 1, "driver_cuda_repo.yml renders one template: the preferences file"
    install = next(
        i
        for i, t in enumerate(role_tasks("driver_cuda_repo.yml"))
        if t.get("ansible.builtin.include_tasks") == "driver_install.yml"
        and "cuda_drivers_package" in str(t["vars"])
    )
    assert role_tasks("driver_cuda_repo.yml").index(pin_tasks[0]) < install, "pin before install"
    no_host_apt_paths(pin_tasks)
    template = pin_tasks[0]["ansible.builtin.template"]
    template["src"] = str(ROLE / "templates" / template["src"])  # outside the role: absolute
    result, out = run_playbook(
        tmp_path,
        play(pin_tasks),
        {"_vllm_dual_fast_apt_dir": str(etc), "vllm_dual_fast_driver_branch": 580},
    )
    assert result.returncode == 0, out
    pref = etc / "preferences.d/vllm-dual-fast-nvidia-driver.pref"
    assert re.search(r"^Pin: version 580\.\*$", pref.read_text(), re.M), pref.read_text()
    assert re.search(r"^Pin-Priority: 1001$", pref.read_text(), re.M), pref.read_text()
    assert stat.S_IMODE(pref.stat().st_mode) == 0o644

    apt_env = dict(os.environ, APT_CONFIG=str(conf))
    subprocess.run(
        ["apt-get", "update", "-q"], env=apt_env, check=True, capture_output=True, timeout=120
    )
    policy = subprocess.run(
        [
            "apt-cache",
            "policy",
            "nvidia-driver",
            "libcuda1",
            "nvidia-kernel-dkms",
            "cuda-drivers",
            "nvidia-driver-580",
            "libnvidia-compute-580",
            "nvidia-container-toolkit",
        ],
        env=apt_env,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    candidates = dict(re.findall(r"^(\S+):\n\s+Installed: .*\n\s+Candidate: (\S+)", policy, re.M))
    assert candidates == {
        "nvidia-driver": "580.105.08-1",
        "libcuda1": "580.105.08-1",
        "nvidia-kernel-dkms": "580.105.08-1",
        "cuda-drivers": "580.105.08-1",
        "nvidia-driver-580": "580.105.08-1",
        "libnvidia-compute-580": "580.105.08-1",
        "nvidia-container-toolkit": "1.18.0-1",
    }, policy


@needs_apt
def test_from_branch_590_the_cuda_repo_install_names_what_nvidia_publishes_and_stays_on_it(
    tmp_path,
):
    """Issue 45, item 3: from branch 590 NVIDIA's Ubuntu packages carry no branch in their names
    and cuda-drivers-<branch> is gone (driver installation guide, "Ubuntu 590 and later
    packages"): the install asks for cuda-drivers, which the preferences file keeps on 590 while
    595 is published. Before: the install asked for cuda-drivers-590, which APT cannot locate."""
    etc, _archive, _security, conf = apt_world(tmp_path, "noble", "535.261.03-1")
    packages = "".join(
        stanza(name, version).replace(
            "Description:", f"Depends: libnvidia-compute (>= {version})\nDescription:"
        ) if name == "cuda-drivers" else stanza(name, version)
        for name in ("cuda-drivers", "libnvidia-compute", "nvidia-dkms")
        for version in ("590.44.01-1", "595.58.03-1")
    ) + stanza("cuda-drivers-580", "580.105.08-1")
    cuda = cuda_repo_double(tmp_path, packages)
    (etc / "sources.list.d/cuda.list").write_text(f"deb file:{cuda} ./\n")
    tasks = role_tasks("driver_cuda_repo.yml")
    pin = [t for t in tasks if "ansible.builtin.template" in t][0]
    template = pin["ansible.builtin.template"]
    template["src"] = str(ROLE / "templates" / template["src"])
    install = next(
        t for t in tasks if t.get("ansible.builtin.include_tasks") == "driver_install.yml"
    )
    names = tmp_path / "install.json"
    show = {
        "name": "Write what the install would ask APT for",
        "ansible.builtin.copy": {
            "content": "{{ _vllm_dual_fast_driver_install_packages | to_json }}",
            "dest": str(names),
            "mode": "0644",
        },
        "vars": {**install["vars"], "_kernel_packages": []},
    }
    result, out = run_playbook(
        tmp_path,
        play([pin, show]),
        {"_vllm_dual_fast_apt_dir": str(etc), "vllm_dual_fast_driver_branch": 590},
    )
    assert result.returncode == 0, out
    wanted = json.loads(names.read_text())
    assert wanted == ["cuda-drivers"], wanted
    apt_env = dict(os.environ, APT_CONFIG=str(conf))
    subprocess.run(["apt-get", "update", "-q"], env=apt_env, check=True, capture_output=True,
                   timeout=120)
    simulated = subprocess.run(
        ["apt-get", "-s", "install", *wanted], env=apt_env, capture_output=True, text=True,
        timeout=60, check=False,
    )
    assert simulated.returncode == 0, simulated.stdout + simulated.stderr
    assert re.findall(r"^Inst (\S+) \((\S+)", simulated.stdout, re.M) == [
        ("libnvidia-compute", "590.44.01-1"), ("cuda-drivers", "590.44.01-1")
    ], simulated.stdout


# --- an owner's own APT source of a repository the role would add -------------------------------


def expand_imports(tasks):
    """The tasks with every static `import_tasks: <file>` replaced by that file's tasks (its
    `vars` and `when` on each of them), as Ansible does inside the role; blocks expanded too."""
    out = []
    for task in tasks:
        imported = task.get("ansible.builtin.import_tasks")
        if imported is not None:
            for inner in expand_imports(role_tasks(imported)):
                inner = dict(inner)
                inner["vars"] = {**task.get("vars", {}), **inner.get("vars", {})}
                when = _conditions(task) + _conditions(inner)
                if when:
                    inner["when"] = when
                out.append(inner)
        elif "block" in task:
            out.append({**task, "block": expand_imports(task["block"])})
        else:
            out.append(task)
    return out


def _conditions(task):
    when = task.get("when", [])
    return list(when) if isinstance(when, list) else [when]


def deb822_repository_double(task, etc):
    """Stand-in for one deb822_repository task (the module writes only under /etc/apt and needs
    python3-debian): with the task's own parameters, condition and `state` expression, it writes
    the .sources file the module would write (a URL Signed-By becomes the key file the module
    downloads to keyrings/<name>.asc) into the private APT folder, or removes it."""
    params = task["ansible.builtin.deb822_repository"]
    dest = f"{etc}/sources.list.d/{params['name']}.sources"
    task_vars = {
        **task.get("vars", {}),
        "_double_state": params.get("state", "present"),
        "_double_uris": params["uris"],
        "_double_suites": params["suites"],
        "_double_components": params.get("components", []),
    }
    content = (
        f"X-Repolib-Name: {params['name']}\n"
        "{% if _double_components %}Components: {{ _double_components | join(' ') }}\n{% endif %}"
        f"Signed-By: {etc}/keyrings/{params['name']}.asc\n"
        "Suites: {{ _double_suites | join(' ') }}\nTypes: deb\n"
        "URIs: {{ [_double_uris] | flatten | join(' ') }}\n"
    )
    return [
        {
            "name": f"{task['name']} (double: writes what the module would)",
            "ansible.builtin.copy": {"dest": dest, "content": content, "mode": "0644"},
            "vars": task_vars,
            "when": _conditions(task) + ["_double_state == 'present'"],
        },
        {
            "name": f"{task['name']} (double: removes what the module would)",
            "ansible.builtin.file": {"path": dest, "state": "absent"},
            "vars": task_vars,
            "when": _conditions(task) + ["_double_state == 'absent'"],
        },
    ]


def source_tasks(name, etc):
    """A task file's APT source tasks as they run on a rig: everything up to its last
    deb822_repository task, imports expanded, package installs left out (they would change this
    machine), each deb822_repository task replaced by its double."""
    tasks = expand_imports(role_tasks(name))
    last = max(i for i, t in enumerate(tasks) if "ansible.builtin.deb822_repository" in t)
    out = []
    for task in no_host_apt_paths(tasks[: last + 1]):
        if "ansible.builtin.deb822_repository" in task:
            out.extend(deb822_repository_double(task, etc))
        elif "ansible.builtin.apt" not in task and "ansible.builtin.package_facts" not in task:
            out.append(task)
    return out


def cuda_repo_double(tmp_path, packages=None):
    """A flat repository standing in for NVIDIA's CUDA repository (unreachable here)."""
    cuda = tmp_path / "cuda"
    cuda.mkdir(exist_ok=True)
    packages = packages or stanza("cuda-drivers-580", "580.105.08-1")
    (cuda / "Packages").write_text(packages)
    (cuda / "Release").write_text(
        "Origin: NVIDIA\nLabel: NVIDIA CUDA\nDate: Thu, 01 Jan 2026 00:00:00 UTC\nSHA256:\n"
        f" {hashlib.sha256(packages.encode()).hexdigest()} {len(packages.encode())} Packages\n"
    )
    return cuda


def apt_update(conf):
    return subprocess.run(
        ["apt-get", "update", "-q"],
        env=dict(os.environ, APT_CONFIG=str(conf)),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def apt_candidate(conf, package):
    policy = subprocess.run(
        ["apt-cache", "policy", package],
        env=dict(os.environ, APT_CONFIG=str(conf)),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    found = re.search(r"^\s*Candidate:\s*(\S+)", policy, re.M)
    return found[1] if found else None


@needs_apt
def test_cuda_repo_source_gives_way_to_an_owners_cuda_keyring_source(tmp_path):
    etc, _archive, _security, conf = apt_world(tmp_path, "bookworm", "535.261.03-1")
    cuda = cuda_repo_double(tmp_path)
    tasks = source_tasks("driver_cuda_repo.yml", etc)
    cuda_vars = {
        "_vllm_dual_fast_apt_dir": str(etc),
        "vllm_dual_fast_cuda_repo_url": f"file:{cuda}",
        "vllm_dual_fast_cuda_repo_key_url": f"file:{cuda}/3bf863cc.pub",
    }
    ours = etc / "sources.list.d/vllm-dual-fast-cuda.sources"

    # A host without NVIDIA's repository: the role adds its source, and a re-run keeps it (the
    # owner-source check does not take the role's own file for the owner's).
    for _ in range(2):
        result, out = run_playbook(tmp_path, play(tasks), cuda_vars)
        assert result.returncode == 0, out
        assert ours.exists(), out
    assert recap(out)["changed"] == 0, out
    assert apt_update(conf).returncode == 0
    assert apt_candidate(conf, "cuda-drivers-580") == "580.105.08-1"

    # The owner then sets NVIDIA's repository up with cuda-keyring: its list, verbatim but for
    # the address. Next to the role's source, every apt run fails, as on a real host.
    owner = etc / "sources.list.d/cuda-debian12-x86_64.list"
    owner_text = f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] file:{cuda}/ /\n"
    owner.write_text(owner_text)
    broken = apt_update(conf)
    assert broken.returncode != 0 and "Conflicting values set for option Signed-By" in broken.stderr

    # The next run uses the owner's source and removes its own: apt works, the owner's file is as
    # cuda-keyring wrote it, and the driver branch still comes from NVIDIA's repository.
    result, out = run_playbook(tmp_path, play(tasks), cuda_vars)
    assert result.returncode == 0, out
    assert not ours.exists(), out
    assert owner.read_text() == owner_text
    fixed = apt_update(conf)
    assert fixed.returncode == 0, fixed.stderr
    assert "Conflicting" not in fixed.stderr, fixed.stderr
    assert apt_candidate(conf, "cuda-drivers-580") == "580.105.08-1"


@pytest.mark.parametrize(
    ("owner_has", "role_adds"),
    [
        ((), {"docker", "nvidia-container-toolkit"}),
        (("docker", "nvidia-container-toolkit"), set()),
        (("nvidia-container-toolkit",), {"docker"}),
    ],
    ids=["fresh", "owner-has-both", "owner-has-the-toolkit"],
)
def test_container_stack_adds_only_the_sources_the_owner_lacks(tmp_path, owner_has, role_adds):
    record = tmp_path / "state/docker-installed-by-role.json"
    etc = tmp_path / "etc/apt"
    (etc / "sources.list.d").mkdir(parents=True)
    docker_url = f"file:{tmp_path}/docker/linux/debian"
    ctk_url = f"file:{tmp_path}/libnvidia-container/stable/deb/amd64"
    # What Docker's and NVIDIA's install documents leave (NVIDIA's with $(ARCH) in the URI).
    owner_files = {
        "docker": (
            "docker.list",
            "deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] "
            f"{docker_url} bookworm stable\n",
        ),
        "nvidia-container-toolkit": (
            "nvidia-container-toolkit.list",
            "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
            f"file:{tmp_path}/libnvidia-container/stable/deb/$(ARCH) /\n",
        ),
    }
    for what in owner_has:
        file_name, text = owner_files[what]
        (etc / "sources.list.d" / file_name).write_text(text)

    result, out = run_playbook(
        tmp_path,
        play(source_tasks("container_stack.yml", etc)),
        {
            "_vllm_dual_fast_apt_dir": str(etc),
            "vllm_dual_fast_docker_source": "docker_repo",
            "_vllm_dual_fast_docker_distro_ok": False,
            "ansible_facts": {"distribution_release": "bookworm"},
            "vllm_dual_fast_docker_repo_url": docker_url,
            "vllm_dual_fast_docker_repo_key_url": f"{docker_url}/gpg",
            "vllm_dual_fast_nvidia_ctk_repo_url": ctk_url,
            "vllm_dual_fast_nvidia_ctk_key_url": f"{ctk_url}/gpgkey",
            # The role's record of an engine it installed goes here, not into /var/lib.
            "_vllm_dual_fast_state_dir": str(tmp_path / "state"),
            "_vllm_dual_fast_docker_by_role_file": str(record),
            "_vllm_dual_fast_docker_engines": ROLE_VARS["_vllm_dual_fast_docker_engines"],
        },
    )
    assert result.returncode == 0, out
    # Recorded as the role's engine only where dpkg knew none before the run (this machine's).
    engines = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Status} ${Package}\n",
         *ROLE_VARS["_vllm_dual_fast_docker_engines"]],
        capture_output=True, text=True, check=False).stdout
    assert record.exists() is not any(line.startswith("installed ")
                                      for line in engines.splitlines())
    added = {
        p.name.removeprefix("vllm-dual-fast-").removesuffix(".sources")
        for p in (etc / "sources.list.d").glob("vllm-dual-fast-*.sources")
    }
    assert added == role_adds, out
    for what in owner_has:
        file_name, text = owner_files[what]
        assert (etc / "sources.list.d" / file_name).read_text() == text


# --- package holds: only the role's own are ever released ---------------------------------------

DEBIAN_USER_SPACE = ["nvidia-driver", "libcuda1", "nvidia-smi", "nvidia-persistenced"]


def dpkg_world(tmp_path, installed, held):
    """A private dpkg database (DPKG_ADMINDIR for dpkg, which dpkg_selections runs; APT_CONFIG's
    Dir::State::status for `apt-mark showhold`): the real tools, never this machine's selections."""
    admin = tmp_path / "dpkg"
    for sub in ("updates", "info"):
        (admin / sub).mkdir(parents=True, exist_ok=True)
    (admin / "available").write_text("")
    (admin / "status").write_text(
        "".join(
            f"Package: {name}\nStatus: {'hold' if name in held else 'install'} ok installed\n"
            "Priority: optional\nMaintainer: x <x@x>\nArchitecture: amd64\n"
            f"{'Multi-Arch: same' + chr(10) if name.startswith('lib') else ''}"
            "Version: 580.105.08-1\nDescription: double\n\n"
            for name in installed
        )
    )
    state = tmp_path / "apt-state"
    for sub in ("lists/partial", "cache/archives/partial", "empty.d"):
        (state / sub).mkdir(parents=True, exist_ok=True)
    conf = tmp_path / "apt-dpkg.conf"
    conf.write_text(
        f'Dir::State::status "{admin}/status";\nDir::Etc::sourcelist "/dev/null";\n'
        f'Dir::Etc::sourceparts "{state}/empty.d";\nDir::State::Lists "{state}/lists";\n'
        f'Dir::Cache "{state}/cache";\n'
    )
    return admin, {"DPKG_ADMINDIR": str(admin), "APT_CONFIG": str(conf)}


def selections(admin):
    out = subprocess.run(
        ["dpkg", f"--admindir={admin}", "--get-selections"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    return {line.split()[0].split(":")[0]: line.split()[1] for line in out.splitlines()}


FACTS = {
    "name": "Gather the facts the hold list reads",
    "ansible.builtin.setup": {"gather_subset": ["min"]},
}
HOLD_VARS = {
    "_vllm_dual_fast_driver_family": "debian",
    "vllm_dual_fast_driver_source": "distro",
    "vllm_dual_fast_driver_branch": 580,
    "vllm_dual_fast_driver_install": True,
}


def hold_tasks():
    """driver.yml's hold tasks, imports expanded (they read `apt-mark showhold` themselves)."""
    tasks = role_tasks("driver.yml")
    holds = [t for t in tasks if t["name"].startswith("Hold what must move only with")]
    assert holds, [t["name"] for t in tasks]
    return [FACTS, *expand_imports(holds)]


@pytest.mark.parametrize(
    ("install", "warned"), [(False, False), (True, True)], ids=["install-off", "install-on"]
)
def test_driver_stage_releases_no_hold_the_owner_set(tmp_path, install, warned):
    """On a rig whose driver already satisfies, a run with driver_install on still holds the
    driver's user space it finds unheld (a rig installed by an older role gets today's holds),
    and never touches the owner's."""
    # The owner holds a kernel-following package and one of the driver's (earlier versions of the
    # role held nvidia-kernel-dkms too, and released it on every run, whoever had set it).
    held = ["nvidia-kernel-dkms", "nvidia-driver", "linux-modules-nvidia-580-server-generic"]
    admin, env = dpkg_world(tmp_path, [*held, "libcuda1"], held)
    before = selections(admin)
    extra = {
        **HOLD_VARS,
        "vllm_dual_fast_driver_install": install,
        "vllm_dual_fast_driver_satisfied": True,
        "vllm_dual_fast_driver_loaded": True,
        "vllm_dual_fast_driver_hold": True,
        # Off: it would write this machine's /etc/apt (tests/integration/test_upgrade_guard.py
        # checks it).
        "vllm_dual_fast_upgrade_guard": False,
        "vllm_dual_fast_power_limit_watts": 0,
        "_vllm_dual_fast_state_dir": str(tmp_path / "state"),
    }
    result, out = run_playbook(
        tmp_path, play([FACTS, *expand_imports(role_tasks("driver.yml"))]), extra, env=env
    )
    assert result.returncode == 0, out
    assert selections(admin) == {**before, "libcuda1": "hold" if install else "install"}, out
    again, out = run_playbook(
        tmp_path, play([FACTS, *expand_imports(role_tasks("driver.yml"))]), extra, env=env
    )
    assert recap(out)["changed"] == 0, out
    unhold = "apt-mark unhold linux-modules-nvidia-580-server-generic nvidia-kernel-dkms"
    assert (unhold in out) is warned, out


def test_hold_off_releases_only_the_holds_the_role_set(tmp_path):
    # nvidia-driver was held by its owner before the role ever ran.
    admin, env = dpkg_world(tmp_path, DEBIAN_USER_SPACE, ["nvidia-driver"])
    state = tmp_path / "state"

    def run(hold):
        return run_playbook(
            tmp_path,
            play(hold_tasks()),
            {
                **HOLD_VARS,
                "vllm_dual_fast_driver_hold": hold,
                "_vllm_dual_fast_state_dir": str(state),
            },
            env=env,
        )

    result, out = run(True)
    assert result.returncode == 0, out
    assert set(selections(admin).values()) == {"hold"}, out
    again, out = run(True)
    assert again.returncode == 0 and recap(out)["changed"] == 0, out

    released, out = run(False)
    assert released.returncode == 0, out
    assert selections(admin) == {
        "nvidia-driver": "hold",  # the owner's
        "libcuda1": "install",
        "nvidia-smi": "install",
        "nvidia-persistenced": "install",
    }, out
    again, out = run(False)
    assert again.returncode == 0 and recap(out)["changed"] == 0, out


def test_holds_the_role_sets_are_recorded_before_they_are_set(tmp_path):
    admin, env = dpkg_world(tmp_path, DEBIAN_USER_SPACE, ["nvidia-driver"])
    state = tmp_path / "state"
    record = state / "driver-holds.json"
    tasks = hold_tasks()
    hold_at = next(i for i, t in enumerate(tasks) if "ansible.builtin.dpkg_selections" in t)
    extra = {
        **HOLD_VARS,
        "vllm_dual_fast_driver_hold": True,
        "_vllm_dual_fast_state_dir": str(state),
    }
    # A run stopped right after the holds were set, before anything else: the record already
    # names every hold the role set.
    stopped, out = run_playbook(tmp_path, play(tasks[: hold_at + 1]), extra, env=env)
    assert stopped.returncode == 0, out
    assert set(selections(admin).values()) == {"hold"}, out
    assert json.loads(record.read_text())["held_by_role"] == [
        "libcuda1",
        "nvidia-persistenced",
        "nvidia-smi",
    ], record.read_text()

    extra["vllm_dual_fast_driver_hold"] = False
    result, out = run_playbook(tmp_path, play(tasks), extra, env=env)
    assert result.returncode == 0, out
    assert selections(admin)["libcuda1"] == "install", out
    assert selections(admin)["nvidia-driver"] == "hold", out
    assert json.loads(record.read_text())["held_by_role"] == [], record.read_text()


# --- Secure Boot in preflight -------------------------------------------------------------------


def secure_boot_tasks(read=True):
    """Preflight's Secure Boot tasks, after (read) the host-reads module asking mokutil here."""
    tasks = [t for t in role_tasks("preflight.yml") if "Secure Boot" in t["name"]]
    assert len(tasks) >= 3, [t["name"] for t in role_tasks("preflight.yml")]
    reading = {"name": "Ask mokutil", "register": "_vllm_dual_fast_host_read",
               "vllm_dual_fast_host_reads": {"read": ["secure_boot"]}}
    return ([reading] if read else []) + tasks


SB_VARS = {
    "vllm_dual_fast_driver_satisfied": False,
    "vllm_dual_fast_driver_install": True,
    "vllm_dual_fast_stages": ["preflight", "driver"],
    "vllm_dual_fast_secure_boot_mok_enrolled": False,
}


@pytest.mark.skipif(shutil.which("mokutil") is not None, reason="needs a host without mokutil")
def test_secure_boot_without_mokutil_is_unknown_and_warned_not_off(tmp_path):
    result, out = run_playbook(
        tmp_path,
        play(secure_boot_tasks()),
        {
            **SB_VARS,
            "_vllm_dual_fast_driver_family": "debian",
            "vllm_dual_fast_driver_source": "distro",
        },
    )
    assert result.returncode == 0, out
    # The warning itself (a debug message), not only its task's title.
    assert re.search(r"msg\"?:\s*['\"]?Secure Boot state is unknown: mokutil", out), out
    assert "Secure Boot off" in out and "ignore this notice" in out, out


@pytest.mark.skipif(shutil.which("mokutil") is not None, reason="needs a host without mokutil")
def test_secure_boot_notice_is_shown_once_when_preflight_runs_twice(tmp_path):
    # site.yml runs preflight in its provision and its deploy playbook.
    once = play(secure_boot_tasks())[0]
    result, out = run_playbook(
        tmp_path,
        [once, {**once, "name": "Preflight again"}],
        {
            **SB_VARS,
            "_vllm_dual_fast_driver_family": "debian",
            "vllm_dual_fast_driver_source": "distro",
        },
    )
    assert result.returncode == 0, out
    assert "Preflight again" in out, out
    assert len(re.findall(r"Secure Boot state is unknown: mokutil", out)) == 1, out


@pytest.mark.parametrize(
    ("family", "source", "key"),
    [
        ("debian", "distro", "/var/lib/dkms/mok.pub"),
        ("ubuntu", "cuda_repo", "/var/lib/shim-signed/mok/MOK.der"),
    ],
)
def test_secure_boot_on_stops_a_dkms_install_naming_the_distributions_key(
    tmp_path, family, source, key
):
    # What an enabled host's mokutil prints, as the host-reads module returns it.
    result, out = run_playbook(
        tmp_path,
        play(secure_boot_tasks(read=False)),
        {
            **SB_VARS,
            "_vllm_dual_fast_driver_family": family,
            "vllm_dual_fast_driver_source": source,
            "_vllm_dual_fast_host_read": {
                "secure_boot": {"rc": 0, "stdout": "SecureBoot enabled", "stderr": ""}},
        },
    )
    assert result.returncode != 0, out
    assert f"mokutil --import {key}" in out, out


def test_secure_boot_on_lets_ubuntus_signed_modules_through(tmp_path):
    result, out = run_playbook(
        tmp_path,
        play(secure_boot_tasks(read=False)),
        {
            **SB_VARS,
            "_vllm_dual_fast_driver_family": "ubuntu",
            "vllm_dual_fast_driver_source": "distro",
            "_vllm_dual_fast_host_read": {
                "secure_boot": {"rc": 0, "stdout": "SecureBoot enabled", "stderr": ""}},
        },
    )
    assert result.returncode == 0, out


# --- preflight's stop for serving stages on a host without a usable driver ----------------------


def driver_stop_task():
    tasks = [t for t in role_tasks("preflight.yml") if "driver is not loaded" in t["name"]]
    assert len(tasks) == 1, [t["name"] for t in role_tasks("preflight.yml")]
    return tasks


@pytest.mark.parametrize(
    ("loaded", "stages", "stop_says"),
    [
        (False, ["preflight", "model"], "The NVIDIA driver on localhost is not loaded"),
        (False, ["preflight", "deploy"], "The NVIDIA driver on localhost is not loaded"),
        (False, ["verify"], "The NVIDIA driver on localhost is not loaded"),
        (True, ["deploy"], "The NVIDIA driver on localhost is older than 575"),
        # The driver stage is what installs it: preflight must not stop the run that would fix it.
        (False, ["preflight", "driver", "container_stack"], None),
    ],
    ids=["model", "deploy", "verify", "old-driver", "provisioning-goes-on"],
)
def test_serving_stages_stop_in_preflight_without_a_usable_driver(
    tmp_path, loaded, stages, stop_says
):
    result, out = run_playbook(
        tmp_path,
        play(driver_stop_task()),
        {
            "vllm_dual_fast_driver_min_version": "575",
            "vllm_dual_fast_driver_loaded": loaded,
            "vllm_dual_fast_driver_satisfied": False,
            "vllm_dual_fast_stages": stages,
        },
    )
    if stop_says is None:
        assert result.returncode == 0, out
    else:
        assert result.returncode != 0, out
        assert stop_says in out, out


# --- the driver install: a background job followed until it ends -------------------------------

# apt-get install as on a DKMS host: apt's own lines for a while, then a silent module build
# whose make.log grows, then (unless FAKE_APT_FAIL) the packages are installed: written into the
# private dpkg database (DPKG_ADMINDIR), where the real dpkg-query the role runs reads them.
FAKE_APT_GET = """#!/bin/bash
echo "$*" >> "${FAKE_ROOT}/apt-calls"
echo "Reading package lists..."
echo "Setting up nvidia-kernel-dkms (550.163.01-2) ..."
sleep 3
log="${FAKE_ROOT}/dkms/nvidia-current/550.163.01/build/make.log"
mkdir -p "$(dirname "${log}")"
for i in 1 2 3 4 5; do echo "  CC [M]  nvidia/nv-step${i}.o" >> "${log}"; sleep 1; done
if [ -n "${FAKE_APT_FAIL:-}" ]; then
  echo "E: Sub-process /usr/bin/dpkg returned an error code (1)"; exit 100
fi
for arg in "$@"; do
  case "${arg}" in -*|install|*=*) ;; *)
    printf 'Package: %s\nStatus: install ok installed\nArchitecture: amd64\n%b\n\n' "${arg}" \
      'Version: 550.163.01-2\nMaintainer: x <x@x>\nDescription: double' \
      >> "${DPKG_ADMINDIR}/status" ;;
  esac
done
"""


def install_world(tmp_path, installed=("linux-headers-amd64",), held=()):
    """A rig for the install: the apt-get stand-in on PATH and a private dpkg database holding
    `installed` (`held` ones on hold, as the role leaves the driver) for the real dpkg-query."""
    root = tmp_path / "rig"
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "apt-get").write_text(FAKE_APT_GET)
    (bin_dir / "apt-get").chmod(0o755)
    dpkg_world(root, list(installed), list(held))
    # A failed build of an earlier run left its log: it must not be shown as this run's.
    stale = root / "dkms/nvidia-current/535.261.03/build/make.log"
    stale.parent.mkdir(parents=True)
    stale.write_text("stale line of an old build\n")
    os.utime(stale, (1_700_000_000, 1_700_000_000))
    return root


def dpkg_shows(root, package):
    """What the real dpkg-query says of a package in the rig's private database."""
    return subprocess.run(
        [
            "dpkg-query",
            f"--admindir={root / 'dpkg'}",
            "--show",
            "--showformat=${db:Status-Abbrev}",
            package,
        ],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def run_driver_install(tmp_path, root, args=(), fail=False):
    tasks = [
        {
            "name": "Install the driver packages",
            "ansible.builtin.include_tasks": str(ROLE / "tasks/driver_install.yml"),
        }
    ]
    env = {
        "PATH": f"{root / 'bin'}:{os.environ['PATH']}",
        "FAKE_ROOT": str(root),
        "DPKG_ADMINDIR": str(root / "dpkg"),
        "ANSIBLE_ASYNC_DIR": str(tmp_path / "async"),
    }
    if fail:
        env["FAKE_APT_FAIL"] = "1"
    return run_playbook(
        tmp_path,
        play(tasks),
        {
            "_vllm_dual_fast_driver_install_packages": ["linux-headers-amd64", "nvidia-driver"],
            "_vllm_dual_fast_driver_install_recommends": False,
            "_vllm_dual_fast_state_dir": str(root / "state"),
            "_vllm_dual_fast_dkms_dir": str(root / "dkms"),
            "_vllm_dual_fast_job_interval": 1,
            "_vllm_dual_fast_driver_install_timeout": 120,
        },
        env=env,
        args=args,
    )


def test_driver_install_shows_apt_then_the_dkms_build_and_then_changes_nothing(tmp_path):
    root = install_world(tmp_path)
    result, out = run_driver_install(tmp_path, root)
    assert result.returncode == 0, out
    # Only the missing package is installed, without recommends, as the apt module did.
    [call] = (root / "apt-calls").read_text().splitlines()
    assert call.endswith("install --no-install-recommends nvidia-driver"), call
    assert re.search(r"running \d+ s, apt: ", out), out
    assert re.search(r"running \d+ s, DKMS build:\s+CC \[M\]\s+nvidia/nv-step\d\.o", out), out
    assert re.search(r"finished after \d+ s", out), out
    assert "stale line" not in out, out
    assert recap(out)["changed"] == 1, out

    again, out = run_driver_install(tmp_path, root)
    assert again.returncode == 0, out
    assert recap(out)["changed"] == 0, out
    assert len((root / "apt-calls").read_text().splitlines()) == 1, "a second install ran"
    start = r"TASK \[Start the install of the missing driver packages\][^\n]*\nskipping"
    assert re.search(start, out), out
    assert "follow_job.yml" not in out, out


def test_driver_install_that_fails_fails_the_task_with_apts_error(tmp_path):
    root = install_world(tmp_path)
    result, out = run_driver_install(tmp_path, root, fail=True)
    assert result.returncode != 0, out
    assert recap(out)["failed"] == 1, out
    assert re.search(r"the driver install \(nvidia-driver\) failed \(rc 100\)", out), out
    assert "E: Sub-process /usr/bin/dpkg returned an error code (1)" in out, out
    assert dpkg_shows(root, "nvidia-driver") == ""
    assert dpkg_shows(root, "linux-headers-amd64") == "ii"


def test_driver_install_in_check_mode_names_the_packages_and_installs_nothing(tmp_path):
    root = install_world(tmp_path)
    result, out = run_driver_install(tmp_path, root, args=("--check",))
    assert result.returncode == 0, out
    assert "Check mode: would install nvidia-driver" in out, out
    assert recap(out)["changed"] == 1, out
    assert not (root / "apt-calls").exists(), out


def test_held_driver_packages_count_as_installed(tmp_path):
    # The role holds the driver packages after installing them; dpkg then says `hi`, and the
    # driver scenario's idempotence run started a second install of every held package.
    root = install_world(
        tmp_path, installed=("linux-headers-amd64", "nvidia-driver"), held=("nvidia-driver",)
    )
    assert dpkg_shows(root, "nvidia-driver") == "hi"  # what the real dpkg says of a hold
    result, out = run_driver_install(tmp_path, root)
    assert result.returncode == 0, out
    assert recap(out)["changed"] == 0, out
    assert not (root / "apt-calls").exists() or not (root / "apt-calls").read_text().strip(), out


@pytest.mark.parametrize(("installed", "recorded"), [
    ([], True),                                  # no engine before the run: the role's
    (["docker.io", "containerd", "runc"], False),   # the owner's Debian engine
    (["docker-ce", "containerd.io"], False),        # the owner's engine from Docker's repository
])
def test_only_an_engine_the_role_installed_is_recorded_as_the_roles(tmp_path, installed,
                                                                    recorded):
    """container_stack.yml's own record tasks, given what dpkg held before the run: the record
    decides whether maintenance runs move runc and containerd (maintain.yml)."""
    record = tmp_path / "state/docker-installed-by-role.json"
    tasks = [t for t in role_tasks("container_stack.yml")
             if t["name"] in ("Create the role's state folder",
                              "Record that the role installed the Docker engine")]
    assert len(tasks) == 2
    result, out = run_playbook(tmp_path, play(tasks), {
        "_vllm_dual_fast_installed": installed,
        "_vllm_dual_fast_state_dir": str(tmp_path / "state"),
        "_vllm_dual_fast_docker_by_role_file": str(record),
        "_vllm_dual_fast_docker_engines": ROLE_VARS["_vllm_dual_fast_docker_engines"]})
    assert result.returncode == 0, out
    assert record.exists() is recorded
    if recorded:
        assert "installed_at" in json.loads(record.read_text())


def test_holds_wait_for_dpkg_s_lock_as_apt_does(tmp_path):
    """Another dpkg run (the nightly upgrades, a boot's apt-daily) holds dpkg's frontend lock
    when the holds are set: the real dpkg refuses ("dpkg frontend lock was locked by ..."), and the
    role waits for the lock instead of failing the run. The lock is let go 3 s after the role
    recorded the holds it is about to set (the task before the holds), not after a fixed time:
    on a loaded machine the play reached the holds after a 4 s timer had let go, and nothing was
    waited for."""
    import fcntl
    import threading
    import time

    admin, env = dpkg_world(tmp_path, DEBIAN_USER_SPACE, [])
    fd = os.open(admin / "lock-frontend", os.O_RDWR | os.O_CREAT, 0o640)
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    record = tmp_path / "state/driver-holds.json"

    def let_go():
        deadline = time.monotonic() + 120
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(3)
        fcntl.lockf(fd, fcntl.LOCK_UN)
        os.close(fd)

    release = threading.Thread(target=let_go)
    release.start()
    try:
        result, out = run_playbook(tmp_path, play(hold_tasks()), {
            **HOLD_VARS, "vllm_dual_fast_driver_hold": True,
            "_vllm_dual_fast_state_dir": str(tmp_path / "state")}, env=env)
    finally:
        release.join()
    assert result.returncode == 0, out
    assert "FAILED - RETRYING" in out, out
    assert set(selections(admin).values()) == {"hold"}, out
