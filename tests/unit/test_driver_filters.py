"""The driver's pure helpers (filter_plugins/vllm_dual_fast_driver.py), on the shapes real hosts
have: installer-written APT sources, `apt-cache policy`, `apt-mark showhold`, `mokutil`, the
package facts of GA and HWE Ubuntu kernels."""

import importlib.util
from pathlib import Path

import pytest

_PATH = Path(__file__).parents[2] / "roles/vllm_dual_fast/filter_plugins/vllm_dual_fast_driver.py"
_spec = importlib.util.spec_from_file_location("vdf_driver_filters", _PATH)
drv = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(drv)

# What the Debian 12 installer writes (netinst with firmware), verbatim.
BOOKWORM_SOURCES_LIST = """\
#deb cdrom:[Debian GNU/Linux 12.11.0 _Bookworm_ - Official amd64 NETINST with firmware 20250517-09:51]/ bookworm main non-free-firmware

deb http://deb.debian.org/debian/ bookworm main non-free-firmware
deb-src http://deb.debian.org/debian/ bookworm main non-free-firmware

deb http://security.debian.org/debian-security bookworm-security main non-free-firmware
deb-src http://security.debian.org/debian-security bookworm-security main non-free-firmware

# bookworm-updates, to get updates before a point release is made;
deb http://deb.debian.org/debian/ bookworm-updates main non-free-firmware
deb-src http://deb.debian.org/debian/ bookworm-updates main non-free-firmware
"""  # noqa: E501 (verbatim)

BOOKWORM_ENABLED = """\
#deb cdrom:[Debian GNU/Linux 12.11.0 _Bookworm_ - Official amd64 NETINST with firmware 20250517-09:51]/ bookworm main non-free-firmware

deb http://deb.debian.org/debian/ bookworm main non-free-firmware contrib non-free
deb-src http://deb.debian.org/debian/ bookworm main non-free-firmware contrib non-free

deb http://security.debian.org/debian-security bookworm-security main non-free-firmware contrib non-free
deb-src http://security.debian.org/debian-security bookworm-security main non-free-firmware contrib non-free

# bookworm-updates, to get updates before a point release is made;
deb http://deb.debian.org/debian/ bookworm-updates main non-free-firmware contrib non-free
deb-src http://deb.debian.org/debian/ bookworm-updates main non-free-firmware contrib non-free
"""  # noqa: E501

# What the Debian 13 installer writes (another mirror than deb.debian.org on purpose).
TRIXIE_SOURCES = """\
Types: deb deb-src
URIs: http://ftp.de.debian.org/debian/
Suites: trixie trixie-updates
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb deb-src
URIs: http://security.debian.org/debian-security/
Suites: trixie-security
Components: main non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

DOCKER_LIST = (
    "deb [arch=amd64 signed-by=/etc/apt/keyrings/docker.asc] "
    "https://download.docker.com/linux/debian bookworm stable\n"
)
NVIDIA_TOOLKIT_LIST = (
    "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
    "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
)


def components_of(line):
    """Components of a one-line entry (after type, options, URI and suite)."""
    body = line.split("#", 1)[0]
    if "]" in body:
        body = body.split("]", 1)[1]
        return body.split()[2:]
    return body.split()[3:]


# --- 1. non-free on stock sources -------------------------------------------------------------


def test_stock_bookworm_sources_list_gets_contrib_and_non_free_on_every_archive_line():
    assert drv.apt_sources_list_enable(BOOKWORM_SOURCES_LIST, "bookworm") == BOOKWORM_ENABLED


def test_non_free_firmware_is_not_mistaken_for_non_free():
    line = "deb http://deb.debian.org/debian bookworm main non-free-firmware\n"
    out = drv.apt_sources_list_enable(line, "bookworm")
    assert components_of(out) == ["main", "non-free-firmware", "contrib", "non-free"]


def test_commented_lines_are_untouched_even_when_they_name_the_archive():
    text = (
        "# deb http://deb.debian.org/debian bookworm main\n"
        "#deb-src http://deb.debian.org/debian bookworm main\n"
    )
    assert drv.apt_sources_list_enable(text, "bookworm") == text


@pytest.mark.parametrize("other", [DOCKER_LIST, NVIDIA_TOOLKIT_LIST])
def test_other_repositories_in_the_same_file_are_untouched(other):
    text = other + "deb http://deb.debian.org/debian bookworm main\n"
    out = drv.apt_sources_list_enable(text, "bookworm")
    assert out.splitlines()[0] == other.rstrip("\n")
    assert components_of(out.splitlines()[1]) == ["main", "contrib", "non-free"]


def test_each_component_ends_up_exactly_once_and_existing_order_is_kept():
    text = (
        "deb http://deb.debian.org/debian bookworm main non-free contrib\n"
        "deb http://deb.debian.org/debian bookworm-updates main contrib contrib\n"
        "deb http://deb.debian.org/debian bookworm-backports main non-free-firmware non-free\n"
    )
    out = drv.apt_sources_list_enable(text, "bookworm").splitlines()
    assert components_of(out[0]) == ["main", "non-free", "contrib"]
    assert components_of(out[1]) == ["main", "contrib", "non-free"]
    assert components_of(out[2]) == ["main", "non-free-firmware", "non-free", "contrib"]


def test_options_trailing_comments_and_mirror_layouts_are_handled():
    text = (
        "deb [arch=amd64] https://mirror.example.net/pub/debian bookworm main  # local mirror\n"
        "deb [ signed-by=/usr/share/keyrings/debian-archive-keyring.gpg ]"
        " http://10.0.0.5:3142/x bookworm main\n"
        "deb mirror+file:///etc/apt/mirrors/debian-security.list bookworm-security main\n"
        "deb http://deb.debian.org/debian stable-updates main\n"
    )
    out = drv.apt_sources_list_enable(text, "bookworm").splitlines()
    assert out[0] == (
        "deb [arch=amd64] https://mirror.example.net/pub/debian bookworm main contrib non-free"
        "  # local mirror"
    )
    assert all(components_of(line) == ["main", "contrib", "non-free"] for line in out[1:]), out


@pytest.mark.parametrize(
    "line",
    [
        # A third party signing with its own key is never Debian's archive, whatever its path says.
        "deb [signed-by=/etc/apt/keyrings/jellyfin.gpg]"
        " https://repo.jellyfin.org/debian bookworm main",
        # Another release's suite, another project's suite.
        "deb http://deb.debian.org/debian trixie main",
        "deb https://apt.postgresql.org/pub/repos/apt bookworm-pgdg main",
        # Not a Debian archive path and no Debian keyring.
        "deb https://packages.sury.org/php/ bookworm main",
        # A flat repository and an uncommented cdrom.
        "deb http://deb.debian.org/debian/ ./",
        "deb cdrom:[Debian GNU/Linux 12.11.0 _Bookworm_ - Official amd64 NETINST]/ bookworm main",
    ],
)
def test_entries_that_are_not_the_debian_archive_are_left_alone(line):
    assert drv.apt_sources_list_enable(line + "\n", "bookworm") == line + "\n"


def test_stock_trixie_deb822_gets_contrib_and_non_free_in_both_stanzas():
    out = drv.apt_deb822_enable(TRIXIE_SOURCES, "trixie")
    assert out == TRIXIE_SOURCES.replace(
        "Components: main non-free-firmware", "Components: main non-free-firmware contrib non-free"
    )


def test_deb822_keeps_comments_other_stanzas_and_disabled_ones():
    text = (
        "# Written by the installer\n"
        "Types: deb\n"
        "# http://snapshot.debian.org/archive/debian/20250520T000000Z\n"
        "URIs: http://deb.debian.org/debian\n"
        "Suites: bookworm bookworm-updates\n"
        "Components: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
        "\n"
        "Types: deb\n"
        "URIs: https://download.docker.com/linux/debian\n"
        "Suites: bookworm\n"
        "Components: stable\n"
        "Signed-By: /etc/apt/keyrings/docker.asc\n"
        "\n"
        "Enabled: no\n"
        "Types: deb\n"
        "URIs: http://deb.debian.org/debian\n"
        "Suites: bookworm-backports\n"
        "Components: main\n"
    )
    out = drv.apt_deb822_enable(text, "bookworm")
    assert out == text.replace(
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg",
        "Components: main contrib non-free\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg",
    )


def test_deb822_stanza_with_components_on_continuation_lines():
    text = (
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\n"
        "Components: main\n non-free-firmware\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
    )
    out = drv.apt_deb822_enable(text, "trixie")
    assert "Components: main\n non-free-firmware contrib non-free\n" in out


def test_deb822_with_a_suite_of_another_project_is_not_debian():
    text = (
        "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie mystuff\nComponents: main\n"
    )
    assert drv.apt_deb822_enable(text, "trixie") == text


@pytest.mark.parametrize(
    ("text", "path", "codename"),
    [
        (BOOKWORM_SOURCES_LIST + DOCKER_LIST, "/etc/apt/sources.list", "bookworm"),
        (TRIXIE_SOURCES, "/etc/apt/sources.list.d/debian.sources", "trixie"),
        (NVIDIA_TOOLKIT_LIST, "/etc/apt/sources.list.d/nvidia-container-toolkit.list", "trixie"),
    ],
)
def test_a_second_pass_changes_nothing(text, path, codename):
    once = drv.apt_sources_enable(text, path, codename)
    assert drv.apt_sources_enable(once, path, codename) == once


def test_the_file_name_picks_the_format():
    assert drv.apt_sources_enable(
        TRIXIE_SOURCES, "/x/debian.sources", "trixie"
    ) == drv.apt_deb822_enable(TRIXIE_SOURCES, "trixie")
    line = "deb http://deb.debian.org/debian trixie main\n"
    assert drv.apt_sources_enable(line, "/x/extra.list", "trixie") == drv.apt_sources_list_enable(
        line, "trixie"
    )


# --- 2. the packaged driver's version ---------------------------------------------------------

POLICY_TRIXIE = """\
nvidia-driver:
  Installed: (none)
  Candidate: 550.163.01-2
  Version table:
     550.163.01-2 500
        500 http://deb.debian.org/debian trixie/non-free amd64 Packages
"""

POLICY_BOOKWORM_INSTALLED = """\
nvidia-driver:
  Installed: 535.247.01-1~deb12u1
  Candidate: 535.261.03-1
  Version table:
     535.261.03-1 500
        500 http://deb.debian.org/debian bookworm/non-free amd64 Packages
 *** 535.247.01-1~deb12u1 100
        100 /var/lib/dpkg/status
"""


@pytest.mark.parametrize(
    ("stdout", "candidate"),
    [
        (POLICY_TRIXIE, "550.163.01-2"),
        (POLICY_BOOKWORM_INSTALLED, "535.261.03-1"),
        ("nvidia-driver:\n  Installed: (none)\n  Candidate: (none)\n  Version table:\n", ""),
        ("", ""),  # apt-cache prints nothing for a package it has never heard of
    ],
)
def test_apt_policy_candidate(stdout, candidate):
    assert drv.apt_policy_candidate(stdout) == candidate


@pytest.mark.parametrize(
    ("version", "upstream"),
    [
        ("550.163.01-2", "550.163.01"),
        ("535.247.01-1~deb12u1", "535.247.01"),
        ("1:580.95.05-1", "580.95.05"),
    ],
)
def test_upstream_version(version, upstream):
    assert drv.upstream_version(version) == upstream


def test_a_candidate_older_than_the_minimum_names_it_the_minimum_and_the_ways_out():
    problem = drv.driver_candidate_problem("550.163.01-2", "575")
    assert "550.163.01" in problem and "575" in problem
    assert "vllm_dual_fast_driver_source: cuda_repo" in problem
    assert "vllm_dual_fast_driver_min_version" in problem


@pytest.mark.parametrize(
    ("candidate", "minimum"), [("550.163.01-2", "550"), ("580.95.05-1", "575"), ("575.0-1", "575")]
)
def test_a_candidate_at_least_the_minimum_is_accepted(candidate, minimum):
    assert drv.driver_candidate_problem(candidate, minimum) == ""


def test_no_candidate_at_all_says_non_free_is_missing():
    problem = drv.driver_candidate_problem("", "575")
    assert "no candidate" in problem and "non-free" in problem
    assert "vllm_dual_fast_driver_source: cuda_repo" in problem


# --- 3. CUDA repository path ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("distribution", "version", "arch", "expected"),
    [
        ("Debian", "12.11", "x86_64", "debian12/x86_64"),
        ("Debian", "13.1", "x86_64", "debian13/x86_64"),
        ("Debian", "13", "x86_64", "debian13/x86_64"),
        ("Ubuntu", "22.04", "x86_64", "ubuntu2204/x86_64"),
        ("Ubuntu", "24.04", "x86_64", "ubuntu2404/x86_64"),
        ("Ubuntu", "24.04", "aarch64", "ubuntu2404/sbsa"),
    ],
)
def test_cuda_repo_dir(distribution, version, arch, expected):
    assert drv.cuda_repo_dir(distribution, version, arch) == expected


# --- 4. Ubuntu: Canonical's signed modules for the installed kernel flavour -------------------


def pkgs(*names):
    """The shape of ansible_facts.packages: name -> list of installed versions."""
    return {name: [{"name": name, "version": "1", "source": "apt"}] for name in names}


@pytest.mark.parametrize(
    ("kernel", "packages", "release", "flavour"),
    [
        # 22.04 GA: linux-generic, 5.15 kernel.
        (
            "5.15.0-160-generic",
            pkgs("linux-generic", "linux-image-generic", "bash"),
            "22.04",
            "generic",
        ),
        # 22.04 HWE: linux-generic-hwe-22.04, 6.8 kernel.
        (
            "6.8.0-85-generic",
            pkgs("linux-generic-hwe-22.04", "linux-image-generic-hwe-22.04"),
            "22.04",
            "generic-hwe-22.04",
        ),
        # 24.04 GA.
        ("6.8.0-90-generic", pkgs("linux-generic", "linux-image-generic"), "24.04", "generic"),
        # 24.04 HWE, only the image meta installed.
        ("6.14.0-33-generic", pkgs("linux-image-generic-hwe-24.04"), "24.04", "generic-hwe-24.04"),
        # A stale HWE meta of the release upgraded from does not count.
        ("6.8.0-90-generic", pkgs("linux-generic", "linux-generic-hwe-22.04"), "24.04", "generic"),
        # lowlatency kernels have their own flavour (and HWE variant).
        ("6.8.0-90-lowlatency", pkgs("linux-lowlatency"), "24.04", "lowlatency"),
        (
            "6.8.0-85-lowlatency",
            pkgs("linux-lowlatency-hwe-22.04"),
            "22.04",
            "lowlatency-hwe-22.04",
        ),
    ],
)
def test_ubuntu_kernel_flavour(kernel, packages, release, flavour):
    assert drv.ubuntu_kernel_flavour(kernel, packages, release) == flavour


@pytest.mark.parametrize(
    ("kernel", "packages", "release", "modules"),
    [
        (
            "5.15.0-160-generic",
            pkgs("linux-generic"),
            "22.04",
            "linux-modules-nvidia-580-server-generic",
        ),
        (
            "6.8.0-85-generic",
            pkgs("linux-generic-hwe-22.04"),
            "22.04",
            "linux-modules-nvidia-580-server-generic-hwe-22.04",
        ),
        (
            "6.8.0-90-generic",
            pkgs("linux-generic"),
            "24.04",
            "linux-modules-nvidia-580-server-generic",
        ),
    ],
)
def test_ubuntu_driver_packages_are_canonicals_signed_prebuilt_set(
    kernel, packages, release, modules
):
    flavour = drv.ubuntu_kernel_flavour(kernel, packages, release)
    packages = drv.ubuntu_driver_packages(580, flavour)
    assert packages == ["nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server", modules]
    assert not [name for name in packages if "dkms" in name.replace("no-dkms", "")]


@pytest.mark.parametrize(
    ("kernel", "distribution", "packages", "expected"),
    [
        ("6.1.0-37-amd64", "Debian", {}, "linux-headers-amd64"),
        ("6.12.48+deb13-amd64", "Debian", {}, "linux-headers-amd64"),
        ("6.1.0-37-cloud-amd64", "Debian", {}, "linux-headers-cloud-amd64"),
        ("6.12.12+bpo-amd64", "Debian", {}, "linux-headers-amd64"),
        (
            "6.8.0-85-generic",
            "Ubuntu",
            pkgs("linux-generic-hwe-22.04"),
            "linux-headers-generic-hwe-22.04",
        ),
        ("5.15.0-160-generic", "Ubuntu", pkgs("linux-generic"), "linux-headers-generic"),
        ("6.6.6-custom", "Debian", {}, "linux-headers-6.6.6-custom"),
    ],
)
def test_kernel_headers_package_is_the_meta_package_that_follows_kernel_updates(
    kernel, distribution, packages, expected
):
    assert drv.kernel_headers_package(kernel, distribution, packages) == expected


# --- 5. Secure Boot ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "state"),
    [
        ({"rc": 0, "stdout": "SecureBoot enabled", "stderr": ""}, "enabled"),
        ({"rc": 0, "stdout": "SecureBoot disabled", "stderr": ""}, "disabled"),
        (
            {"rc": 0, "stdout": "SecureBoot disabled\nPlatform is in Setup Mode", "stderr": ""},
            "disabled",
        ),
        # Legacy BIOS boot: no EFI, so no Secure Boot.
        (
            {"rc": 255, "stdout": "", "stderr": "EFI variables are not supported on this system"},
            "disabled",
        ),
        # mokutil missing: what ansible.builtin.command registers (failed_when: false),
        # and a shell's 127.
        (
            {
                "rc": 2,
                "stdout": "",
                "stderr": "",
                "msg": "Error executing command.",
                "failed": False,
            },
            "unknown",
        ),
        ({"rc": 127, "stdout": "", "stderr": "sh: 1: mokutil: not found"}, "unknown"),
        ({}, "unknown"),
    ],
)
def test_secure_boot_state(result, state):
    assert drv.secure_boot_state(result) == state


@pytest.mark.parametrize(
    ("family", "key", "other"),
    [
        ("debian", "/var/lib/dkms/mok.pub", "/var/lib/shim-signed/mok/MOK.der"),
        ("ubuntu", "/var/lib/shim-signed/mok/MOK.der", "/var/lib/dkms/mok.pub"),
    ],
)
def test_secure_boot_refusal_names_the_distributions_mok_key(family, key, other):
    message = drv.secure_boot_refusal(family)
    assert f"mokutil --import {key}" in message
    assert other not in message
    assert "vllm_dual_fast_secure_boot_mok_enrolled: true" in message


# --- 6. holds ---------------------------------------------------------------------------------

KERNEL_FOLLOWING = ("nvidia-kernel-dkms", "linux-modules-nvidia", "linux-headers", "linux-image")


def test_debian_holds_user_space_only_since_dkms_rebuilds_it_for_every_kernel():
    held = drv.driver_hold_packages("debian", "distro", 580)
    assert held == ["nvidia-driver", "libcuda1", "nvidia-smi", "nvidia-persistenced"]
    assert not [name for name in held if name.startswith(KERNEL_FOLLOWING) or "dkms" in name]


@pytest.mark.parametrize("flavour", ["generic", "generic-hwe-24.04"])
def test_ubuntu_holds_kernel_module_and_user_space_as_one_unit(flavour):
    """The prebuilt module of the next kernel needs the next driver (why:
    test_ubuntu_kernel_updates.py), so the kernel metas are held with the module meta."""
    held = drv.driver_hold_packages("ubuntu", "distro", 580, flavour=flavour)
    assert held == [
        f"linux-{flavour}",
        f"linux-image-{flavour}",
        f"linux-headers-{flavour}",
        f"linux-modules-nvidia-580-server-{flavour}",
        "nvidia-headless-no-dkms-580-server",
        "nvidia-utils-580-server",
    ]
    installed = pkgs(f"linux-image-{flavour}", "nvidia-utils-580-server")
    assert drv.driver_hold_packages("ubuntu", "distro", 580, installed, flavour) == [
        f"linux-image-{flavour}",
        "nvidia-utils-580-server",
    ]


@pytest.mark.parametrize(
    ("family", "flavour", "installed", "expected"),
    [
        (
            "debian",
            "amd64",
            ["nvidia-driver", "libcuda1", "linux-image-amd64", "linux-headers-amd64", "openssl"],
            ["nvidia-driver", "libcuda1", "linux-image-amd64", "linux-headers-amd64"],
        ),
        (
            "ubuntu",
            "generic",
            [
                "linux-generic",
                "linux-image-generic",
                "linux-modules-nvidia-580-server-generic",
                "nvidia-utils-580-server",
                "nvidia-headless-no-dkms-580-server",
                "openssl",
            ],
            [
                "linux-generic",
                "linux-image-generic",
                "linux-modules-nvidia-580-server-generic",
                "nvidia-headless-no-dkms-580-server",
                "nvidia-utils-580-server",
            ],
        ),
    ],
)
def test_a_maintenance_run_upgrades_the_installed_kernel_metas_with_the_driver(
    family, flavour, installed, expected
):
    got = drv.maintenance_upgrade_packages(family, "distro", 580, pkgs(*installed), flavour)
    assert sorted(got) == sorted(expected)


@pytest.mark.parametrize("family", ["debian", "ubuntu"])
def test_cuda_repo_holds_only_installed_user_space_packages_and_never_the_meta(family):
    installed = pkgs(
        "cuda-drivers-580",
        "nvidia-driver",
        "nvidia-kernel-dkms",
        "libcuda1",
        "nvidia-smi",
        "nvidia-driver-580",
        "nvidia-dkms-580",
        "libnvidia-compute-580",
        "nvidia-utils-580",
    )
    held = drv.driver_hold_packages(family, "cuda_repo", 580, installed)
    assert held, held
    assert set(held) <= set(installed)
    assert "cuda-drivers-580" not in held
    assert not [name for name in held if name.startswith(KERNEL_FOLLOWING) or "dkms" in name]


def test_kernel_following_holds_a_previous_run_left_are_found():
    showhold = (
        "nvidia-driver\nnvidia-kernel-dkms\nnvidia-smi\n"
        "linux-modules-nvidia-580-server-generic\nopenssl\n"
    )
    assert drv.kernel_following_holds(showhold) == [
        "linux-modules-nvidia-580-server-generic",
        "nvidia-kernel-dkms",
    ]
    assert drv.kernel_following_holds("") == []


def test_a_module_meta_held_with_its_kernel_is_no_danger():
    showhold = "linux-image-generic\nlinux-modules-nvidia-580-server-generic\n"
    assert drv.kernel_following_holds(showhold) == []
    assert drv.kernel_following_holds(
        showhold.replace("linux-image-generic", "linux-image-lowlatency")
    ) == ["linux-modules-nvidia-580-server-generic"]


USER_SPACE = ["nvidia-driver", "libcuda1", "nvidia-smi", "nvidia-persistenced"]


def test_hold_plan_sets_only_missing_holds_and_never_claims_the_owners():
    # nvidia-driver was held by its owner before the role came to it.
    plan = drv.driver_hold_plan(USER_SPACE, True, "nvidia-driver\nopenssl\n", [])
    assert plan["hold"] == ["libcuda1", "nvidia-smi", "nvidia-persistenced"]
    assert plan["release"] == []
    assert (
        plan["record_during"]
        == plan["record_after"]
        == ["libcuda1", "nvidia-persistenced", "nvidia-smi"]
    )
    # The next run (libcuda1 printed with its architecture, as for a foreign one).
    steady = drv.driver_hold_plan(
        USER_SPACE,
        True,
        "libcuda1:amd64\nnvidia-driver\nnvidia-persistenced\nnvidia-smi\n",
        plan["record_after"],
    )
    assert steady["hold"] == steady["release"] == []
    assert steady["record_during"] == steady["record_after"] == plan["record_after"]


def test_hold_plan_off_releases_the_roles_own_and_leaves_the_owners():
    showhold = "libcuda1\nnvidia-driver\nnvidia-smi\nopenssl\n"
    # nvidia-persistenced is recorded but the owner released it since: not held, nothing to do.
    plan = drv.driver_hold_plan(
        USER_SPACE, False, showhold, ["libcuda1", "nvidia-smi", "nvidia-persistenced"]
    )
    assert plan["hold"] == []
    assert plan["release"] == ["libcuda1", "nvidia-smi"]
    assert plan["record_during"] == ["libcuda1", "nvidia-smi"]  # until they are released
    assert plan["record_after"] == []


def test_hold_plan_releases_the_roles_hold_on_a_package_the_list_no_longer_has():
    old, new = (
        drv.driver_hold_packages("ubuntu", "cuda_repo", 570),
        drv.driver_hold_packages("ubuntu", "cuda_repo", 580),
    )
    # cuda-drivers and libnvidia-compute (NVIDIA's names from 590) are every branch's.
    assert {"cuda-drivers", "libnvidia-compute"} == set(old) & set(new)
    plan = drv.driver_hold_plan(new, True, "\n".join(old + ["openssl"]), old)
    assert plan["hold"] == [name for name in new if name not in old]
    assert plan["release"] == sorted(set(old) - set(new))
    assert plan["record_during"] == sorted(set(old) | set(new))
    assert plan["record_after"] == sorted(new)


def test_filter_names_are_prefixed_and_point_at_the_functions():
    filters = drv.FilterModule().filters()
    assert filters and all(name.startswith("vllm_dual_fast_") for name in filters)
    assert filters["vllm_dual_fast_apt_sources_enable"] is drv.apt_sources_enable
    assert filters["vllm_dual_fast_secure_boot_state"] is drv.secure_boot_state


# The reboot decision, taken with the driver's packages in place while the loaded driver is
# missing or too old (main's rerun after a refused reboot went on as if the driver were loaded).
def _state(loaded, satisfied, allowed, check):
    return {
        "loaded": loaded,
        "satisfied": satisfied,
        "reboot_allowed": allowed,
        "check_mode": check,
    }


@pytest.mark.parametrize(
    ("state", "decision"),
    [
        (_state(False, False, True, False), "reboot"),
        # a rerun after a refused or interrupted reboot: nothing changes now, a reboot is still due
        (_state(False, False, False, False), "pending"),
        (_state(True, False, True, False), "reboot"),
        (_state(False, False, True, True), "pending"),
        (_state(True, True, True, False), "none"),
    ],
)
def test_reboot_decision(state, decision):
    assert drv.reboot_decision(state) == decision


@pytest.mark.parametrize("family", ["debian", "ubuntu"])
def test_a_maintenance_run_moves_the_installed_container_toolkit_with_the_driver(family):
    """Before: no run ever upgraded the toolkit (state: present, and the nightly upgrades' guard
    keeps nvidia-* and libnvidia-* away), so its container-escape fixes never arrived."""
    toolkit = ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
               "libnvidia-container-tools", "libnvidia-container1"]
    got = drv.maintenance_upgrade_packages(family, "distro", 580, pkgs("linux-image-generic",
                                                                        *toolkit), "generic")
    assert set(toolkit) <= set(got) and "linux-image-generic" in got
    bare = drv.maintenance_upgrade_packages(family, "distro", 580, pkgs("linux-image-generic"),
                                            "generic")
    assert not set(toolkit) & set(bare)            # only what is installed


@pytest.mark.parametrize(("installed", "runtime"), [
    (["containerd.io"], ["containerd.io"]),                 # Docker's repository: runc inside
    (["containerd", "runc", "docker.io"], ["containerd", "runc"]),   # the distribution's
    (["moby-containerd", "moby-runc", "moby-engine"], ["moby-containerd", "moby-runc"]),
])
def test_a_maintenance_run_moves_runc_and_containerd_only_where_the_role_installed_docker(
        installed, runtime):
    """Before: no run moved them (Docker's repository is no origin of the nightly upgrades):
    runc's container escapes (CVE-2024-21626, fixed in 1.1.12) stayed open on a rig the role
    set up. An engine the owner installed stays the owner's to update."""
    have = pkgs("linux-image-generic", "nvidia-container-toolkit", *installed)
    by_role = drv.maintenance_upgrade_packages("ubuntu", "distro", 580, have, "generic",
                                               runtime=True)
    owners = drv.maintenance_upgrade_packages("ubuntu", "distro", 580, have, "generic")
    assert [name for name in by_role if name not in owners] == runtime
    assert "nvidia-container-toolkit" in owners and "docker.io" not in by_role



# The four variants of a branch as `ubuntu-drivers list --gpgpu` names them on noble
# ("nvidia-driver-580-server-open, (kernel modules provided by
# linux-modules-nvidia-580-server-open-generic)", and -580-server, -580-open, -580).
@pytest.mark.parametrize(("variant", "headless", "utils", "module"), [
    ("-server", "nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server",
     "linux-modules-nvidia-580-server-generic"),
    ("-server-open", "nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server",
     "linux-modules-nvidia-580-server-open-generic"),
    ("-open", "nvidia-headless-no-dkms-580-open", "nvidia-utils-580",
     "linux-modules-nvidia-580-open-generic"),
    ("", "nvidia-headless-no-dkms-580", "nvidia-utils-580", "linux-modules-nvidia-580-generic"),
])
def test_the_installed_variant_is_what_is_held_and_maintained(variant, headless, utils, module):
    """A rig ubuntu-drivers installed (-server-open from 580 on) is held and upgraded by the
    names it has: with -server names alone the role held only its kernel metas and every
    maintenance run failed."""
    installed = ["linux-generic", "linux-image-generic", "linux-headers-generic", headless, utils,
                 module, "nvidia-kernel-common-580" + ("-server" if "server" in variant else "")]
    assert drv.ubuntu_driver_variant(installed, 580) == variant
    unit = ["linux-generic", "linux-image-generic", "linux-headers-generic", module, headless,
            utils]
    assert drv.driver_hold_packages("ubuntu", "distro", 580, installed, "generic") == unit
    assert drv.maintenance_upgrade_packages("ubuntu", "distro", 580, installed, "generic") == unit


def test_a_rig_without_the_branch_installed_gets_the_roles_own_variant():
    assert drv.ubuntu_driver_variant([], 580) == "-server"
    # An older branch's variant carries over (the move from it keeps the owner's modules); a
    # later branch's does not.
    assert drv.ubuntu_driver_variant(["nvidia-headless-no-dkms-570-open"], 580) == "-open"
    assert drv.ubuntu_driver_variant(["nvidia-headless-no-dkms-590-open"], 580) == "-server"
    assert drv.ubuntu_driver_variant(["linux-modules-nvidia-580-open-6.8.0-50-generic"], 580) == (
        "-open")


def test_a_driver_install_keeps_the_variant_the_rig_has():
    assert drv.ubuntu_driver_packages(580, "generic") == [
        "nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-generic"]
    assert drv.ubuntu_driver_packages(580, "generic-hwe-24.04", "-server-open") == [
        "nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-open-generic-hwe-24.04"]


# What the real dpkg (1.21.22) printed to dpkg_selections while another process held its lock.
DPKG_LOCKED = ("dpkg: error: dpkg frontend lock was locked by /usr/bin/python3 process with pid "
               "18065\nNote: removing the lock file is always wrong, can damage the locked area\n")


def test_only_a_held_dpkg_lock_is_waited_for():
    assert drv.dpkg_locked({"failed": True, "msg": DPKG_LOCKED, "stderr": DPKG_LOCKED})
    assert drv.dpkg_locked({"failed": True,
                            "stderr": "dpkg frontend lock is locked by another process"})
    assert not drv.dpkg_locked(
        {"failed": True, "msg": "Failed to find package 'x' to perform selection 'hold'."})
    assert not drv.dpkg_locked({"changed": True})


def test_a_selection_dpkg_never_read_for_its_lock_is_waited_for():
    """make test's run of test_holds_wait_for_dpkg_s_lock_as_apt_does on a loaded machine: dpkg
    exited at the lock before Ansible wrote the selection, and the module said only this."""
    epipe = {"failed": True, "msg": "Error executing command.", "rc": 32, "stderr": "",
             "stdout": "", "cmd": "/usr/bin/dpkg --set-selections"}
    assert drv.dpkg_locked(epipe)
    assert not drv.dpkg_locked({**epipe, "cmd": "/usr/bin/apt-mark hold x"})
    assert not drv.dpkg_locked({**epipe, "rc": 2})


# --- a branch move (issue 45, item 3) -----------------------------------------------------------


def test_the_cuda_repo_meta_package_loses_its_branch_name_from_590():
    assert drv.cuda_drivers_package(580) == "cuda-drivers-580"
    assert drv.cuda_drivers_package("589") == "cuda-drivers-589"
    assert drv.cuda_drivers_package(590) == "cuda-drivers"


def test_installed_branches_come_from_the_headless_driver_and_module_meta_names():
    installed = ["nvidia-headless-no-dkms-580-server", "linux-modules-nvidia-590-server-generic",
                 "nvidia-utils-535-server", "nvidia-firmware-580-server-580.95.05"]
    assert drv.installed_driver_branches(installed) == [580, 590]


def test_a_branch_not_installed_yet_takes_the_variant_of_the_branch_it_leaves():
    installed = ["nvidia-headless-no-dkms-580-server-open",
                 "linux-modules-nvidia-580-server-open-generic"]
    assert drv.ubuntu_driver_variant(installed, 590) == "-server-open"
    # An older branch never gives its variant to one installed itself.
    both = [*installed, "nvidia-headless-no-dkms-590-server"]
    assert drv.ubuntu_driver_variant(both, 590) == "-server"
    # A later branch installed is not the one being left.
    assert drv.ubuntu_driver_variant(["nvidia-headless-no-dkms-595-open"], 590) == "-server"


def test_a_raised_branch_puts_its_names_in_the_maintenance_unit_and_keeps_the_old_holds():
    installed = ["linux-generic", "linux-image-generic", "linux-headers-generic",
                 "nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server",
                 "linux-modules-nvidia-580-server-generic"]
    unit = drv.maintenance_upgrade_packages("ubuntu", "distro", 590, installed, "generic")
    assert unit == ["linux-generic", "linux-image-generic", "linux-headers-generic",
                    "linux-modules-nvidia-590-server-generic", "nvidia-headless-no-dkms-590-server",
                    "nvidia-utils-590-server", "linux-modules-nvidia-580-server-generic",
                    "nvidia-headless-no-dkms-580-server", "nvidia-utils-580-server"]
    # Until the move ran, the holds stay on what is installed, never on names to come.
    assert drv.driver_hold_packages("ubuntu", "distro", 590, installed, "generic") == [
        "linux-generic", "linux-image-generic", "linux-headers-generic",
        "linux-modules-nvidia-580-server-generic", "nvidia-headless-no-dkms-580-server",
        "nvidia-utils-580-server"]
    # The branch set is installed: nothing else named; a lower setting never installs a lower one.
    assert drv.maintenance_upgrade_packages("ubuntu", "distro", 580, installed, "generic") == [
        "linux-generic", "linux-image-generic", "linux-headers-generic",
        "linux-modules-nvidia-580-server-generic", "nvidia-headless-no-dkms-580-server",
        "nvidia-utils-580-server"]
    assert "nvidia-headless-no-dkms-570-server" not in drv.maintenance_upgrade_packages(
        "ubuntu", "distro", 570, installed, "generic")
