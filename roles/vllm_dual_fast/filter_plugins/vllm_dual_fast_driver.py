"""Pure helpers for the NVIDIA driver tasks: facts and file text in, plain data out (tested in
tests/unit/test_driver_filters.py).

Which APT entries are Debian's archive (the ones that get `contrib` and `non-free`):
an entry (a one-line `deb`/`deb-src` line, or a deb822 stanza) counts when ALL of these hold:
  1. it is active: not commented out, not `Enabled: no`, not a `cdrom:` source;
  2. it has components and `main` is one of them (every suite of Debian's archive carries main;
     Docker's `stable`, NVIDIA's flat `/` repositories and the like do not);
  3. every suite is the release's codename (or a Debian alias: stable, oldstable, testing,
     unstable, sid), alone or with -updates, -security, -backports, -backports-sloppy or
     -proposed-updates: another project's suite (bookworm-pgdg) or another release is not ours;
  4. it is Debian's by signature or by address: a Signed-By naming debian-archive-keyring, or,
     when it names no keyring, a URI whose last path segment is `debian` or `debian-security`
     (also `debian*.list` for mirror+file: lists, as Debian's cloud images use) or whose host is
     under debian.org. A Signed-By naming any other keyring (or an inline key) is never Debian's.
Mirror hosts vary, so no host is required. What this cannot tell apart: a third party that copies
Debian's layout (a /debian path, the release codename, `main`) and names no keyring; APT then only
warns that such a repository has no `non-free` component.
"""

import re
from urllib.parse import urlsplit

WANTED_COMPONENTS = ("contrib", "non-free")
_SUITE_SUFFIXES = (
    "",
    "-updates",
    "-security",
    "-backports",
    "-backports-sloppy",
    "-proposed-updates",
)
_ALIASES = ("stable", "oldstable", "oldoldstable", "testing", "unstable", "sid")
_ONE_LINE = re.compile(
    r"^(?P<head>\s*(?P<type>deb|deb-src)\s+(?:\[(?P<options>[^\]]*)\]\s*)?"
    r"(?P<uri>\S+)\s+(?P<suite>\S+))(?P<components>(?:\s+\S+)*?)(?P<tail>\s*)$"
)
_FIELD = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_-]*):(?P<value>.*?)(?P<eol>\r?\n?)$", re.S)
_KERNEL_FLAVOUR = re.compile(
    r"^\d+\.\d+(?:\.\d+)?(?:-\d+|\+deb\d+|\+bpo)-(?P<flavour>[a-z][a-z0-9-]*)$"
)


# --- 1. Debian archive entries get contrib and non-free -----------------------------------------


def _debian_suite(suite, codename):
    bases = {codename, *_ALIASES} if codename else set(_ALIASES)
    return any(suite == base + suffix for base in bases for suffix in _SUITE_SUFFIXES)


def _debian_address(uri):
    parts = urlsplit(uri)
    last = parts.path.rstrip("/").rsplit("/", 1)[-1].lower()
    if uri.startswith("mirror") and last.endswith(".list"):
        last = last[: -len(".list")]
    host = (parts.hostname or "").lower()
    return (
        last in ("debian", "debian-security")
        or host == "debian.org"
        or host.endswith(".debian.org")
    )


def _is_debian_archive(uris, suites, components, signed_by, codename):
    if not uris or not suites or "main" not in components:
        return False
    if any(uri.startswith("cdrom:") for uri in uris):
        return False
    if not all(_debian_suite(suite, codename) for suite in suites):
        return False
    if signed_by.strip():
        return "debian-archive-keyring" in signed_by
    return all(_debian_address(uri) for uri in uris)


def _completed(components):
    """Components in their order, each once, the wanted ones appended when missing."""
    unique = list(dict.fromkeys(components))
    return unique + [c for c in WANTED_COMPONENTS if c not in unique]


def _split_comment(line):
    """(body, comment) of a one-line entry: `#` starts a comment unless inside [options]."""
    depth = 0
    for index, char in enumerate(line):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(depth - 1, 0)
        elif char == "#" and depth == 0:
            return line[:index], line[index:]
    return line, ""


def _option(options, name):
    for item in (options or "").split():
        key, _, value = item.partition("=")
        if key.lower().rstrip("+-") == name:
            return value
    return ""


def apt_sources_list_enable(text, codename):
    """One-line sources.list text with contrib and non-free on every Debian archive entry."""
    out = []
    for line in text.splitlines(keepends=True):
        content = line.rstrip("\r\n")
        eol = line[len(content) :]
        body, comment = _split_comment(content)
        match = _ONE_LINE.match(body)
        if not match or body.lstrip().startswith("#"):
            out.append(line)
            continue
        components = match["components"].split()
        signed_by = _option(match["options"], "signed-by")
        if not _is_debian_archive(
            [match["uri"]], [match["suite"]], components, signed_by, codename
        ):
            out.append(line)
            continue
        wanted = _completed(components)
        if wanted == components:
            out.append(line)
            continue
        if len(set(components)) == len(components):  # only appending: keep the owner's spacing
            new = (
                match["head"]
                + match["components"]
                + "".join(" " + c for c in wanted[len(components) :])
            )
        else:
            new = match["head"] + " " + " ".join(wanted)
        out.append(new + match["tail"] + comment + eol)
    return "".join(out)


def _stanzas(lines):
    """Index ranges of deb822 stanzas (runs of non-blank lines)."""
    start = None
    for index, line in enumerate(lines + ["\n"]):
        if line.strip():
            start = index if start is None else start
        elif start is not None:
            yield start, index
            start = None


def _fields(lines, start, end):
    """{lower-case name: (value, index of the field's last line)}, comments skipped."""
    fields, name = {}, None
    for index in range(start, end):
        line = lines[index]
        if line.startswith("#"):
            continue
        if line[:1] in (" ", "\t") and name:
            value, _ = fields[name]
            fields[name] = (value + " " + line.strip(), index)
            continue
        match = _FIELD.match(line)
        if match:
            name = match["name"].lower()
            fields[name] = (match["value"].strip(), index)
    return fields


def apt_deb822_enable(text, codename):
    """deb822 .sources text with contrib and non-free on every Debian archive stanza."""
    lines = text.splitlines(keepends=True)
    for start, end in _stanzas(lines):
        fields = _fields(lines, start, end)
        values = {name: value for name, (value, _) in fields.items()}
        if values.get("enabled", "").lower() == "no":
            continue
        if not {"deb", "deb-src"} & set(values.get("types", "").split()):
            continue
        components = values.get("components", "").split()
        uris, suites = values.get("uris", "").split(), values.get("suites", "").split()
        if not _is_debian_archive(uris, suites, components, values.get("signed-by", ""), codename):
            continue
        missing = [c for c in _completed(components) if c not in components]
        if not missing:
            continue
        last = fields["components"][1]  # the field's last line: append there
        content = lines[last].rstrip("\r\n")
        stripped = content.rstrip()
        appended = "".join(" " + c for c in missing)
        lines[last] = stripped + appended + content[len(stripped) :] + lines[last][len(content) :]
    return "".join(lines)


def apt_sources_enable(text, path, codename):
    """The right one of the two by file name: *.sources is deb822, anything else one-line."""
    if str(path).endswith(".sources"):
        return apt_deb822_enable(text, codename)
    return apt_sources_list_enable(text, codename)


# --- 2. the packaged driver's version -----------------------------------------------------------


def apt_policy_candidate(stdout):
    """The Candidate of `apt-cache policy <one package>`, or "" when APT has none."""
    match = re.search(r"^\s*Candidate:\s*(\S+)", stdout or "", re.M)
    return "" if not match or match[1] == "(none)" else match[1]


def upstream_version(version):
    """550.163.01-2 -> 550.163.01; 1:580.95.05-1 -> 580.95.05 (no epoch, no Debian revision)."""
    version = str(version).split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def _numbers(version):
    return tuple(int(part) for part in re.findall(r"\d+", str(version)))


def driver_candidate_problem(candidate, minimum, package="nvidia-driver"):
    """Empty when APT's candidate is at least the minimum; else what is wrong and the ways out."""
    ways_out = (
        "Either set vllm_dual_fast_driver_source: cuda_repo to install the "
        "vllm_dual_fast_driver_branch from NVIDIA's CUDA repository, or, if you accept the older "
        "driver for your vLLM image, lower vllm_dual_fast_driver_min_version."
    )
    if not candidate:
        return (
            f"APT has no candidate for {package}: the non-free component is not enabled for "
            f"Debian's archive (see /etc/apt/sources.list and /etc/apt/sources.list.d). {ways_out}"
        )
    upstream = upstream_version(candidate)
    if _numbers(upstream) >= _numbers(minimum):
        return ""
    return (
        f"APT would install {package} {upstream} ({candidate}), older than "
        f"vllm_dual_fast_driver_min_version {minimum}, which the vLLM image's CUDA needs. "
        f"No package was installed. {ways_out}"
    )


# --- 3. CUDA repository -------------------------------------------------------------------------


def cuda_repo_dir(distribution, version, architecture="x86_64"):
    """NVIDIA's repository folder: debian12/x86_64, ubuntu2204/x86_64 (Debian by major version,
    Ubuntu by year and month; arm64 servers are `sbsa`)."""
    name = str(distribution).lower()
    parts = str(version).split(".")
    release = parts[0] if name == "debian" else "".join(parts[:2])
    arch = {"aarch64": "sbsa", "arm64": "sbsa", "amd64": "x86_64"}.get(architecture, architecture)
    return f"{name}{release}/{arch}"


# --- 4. Ubuntu: Canonical's signed, prebuilt modules --------------------------------------------


def _kernel_flavour(kernel):
    match = _KERNEL_FLAVOUR.match(str(kernel))
    return match["flavour"] if match else None


def ubuntu_kernel_flavour(kernel, packages, release=None):
    """The flavour of the installed kernel meta package: generic, lowlatency, ... or its HWE
    variant (generic-hwe-22.04) when linux-<flavour>-hwe-<release> (or its linux-image- meta) is
    installed, since that meta package decides which kernel boots next."""
    base = _kernel_flavour(kernel) or "generic"
    hwe = re.compile(rf"^linux-(?:image-)?({re.escape(base)}-hwe-(\d\d\.\d\d))$")
    found = sorted(
        match[1]
        for match in map(hwe.match, packages or {})
        if match and (not release or match[2] == str(release))
    )
    return found[-1] if found else base


def ubuntu_driver_packages(branch, flavour, variant="-server"):
    """Canonical's compute-host set: user space without DKMS, and the signed module meta package
    of the kernel flavour (it follows every kernel update of that flavour); of the variant a rig
    already has (ubuntu_driver_variant), else the -server branch's proprietary modules."""
    server = "-server" if variant.startswith("-server") else ""
    return [
        f"nvidia-headless-no-dkms-{branch}{variant}",
        f"nvidia-utils-{branch}{server}",
        f"linux-modules-nvidia-{branch}{variant}-{flavour}",
    ]


def kernel_headers_package(kernel, distribution, packages=None):
    """The headers meta package that follows kernel updates (DKMS then builds for the next
    kernel too): Debian linux-headers-<flavour> (amd64, cloud-amd64, ...), Ubuntu
    linux-headers-<kernel meta flavour>; linux-headers-<running kernel> when no flavour is known."""
    name = str(distribution).lower()
    if name == "ubuntu":
        return f"linux-headers-{ubuntu_kernel_flavour(kernel, packages)}"
    flavour = _kernel_flavour(kernel) if name == "debian" else None
    return f"linux-headers-{flavour or kernel}"


def debian_kernel_packages(kernel, distribution, headers):
    """The kernel packages a Debian driver install names: the headers package, and with the
    flavour's headers meta (linux-headers-amd64) the flavour's image meta too. The headers meta
    brings the archive's newest kernel's headers, and DKMS builds only for kernels with headers:
    a rig that has not upgraded since would reboot into its older kernel without a module, so the
    image moves with the headers (tests/integration/test_debian_kernel_packages.py). An owner's own
    headers
    package, or a kernel of no known flavour, leaves the kernel alone."""
    flavour = _kernel_flavour(kernel) if str(distribution).lower() == "debian" else None
    if flavour and headers == f"linux-headers-{flavour}":
        return [headers, f"linux-image-{flavour}"]
    return [headers]


# --- 5. Secure Boot -----------------------------------------------------------------------------

MOK_KEYS = {
    # DKMS (3.x, Debian 12/13) signs with its own key and writes it here on its first build.
    "debian": ("/var/lib/dkms/mok.pub", "sudo apt install dkms && sudo dkms generate_mok"),
    # Ubuntu's DKMS signs with shim-signed's MOK.
    "ubuntu": ("/var/lib/shim-signed/mok/MOK.der", "sudo update-secureboot-policy --new-key"),
}


def secure_boot_state(result):
    """enabled / disabled / unknown from the registered `mokutil --sb-state` result. A host
    without mokutil (command not found) is unknown, not off; a host without EFI has none."""
    result = result or {}
    text = f"{result.get('stdout', '')}\n{result.get('stderr', '')}"
    if "SecureBoot enabled" in text:
        return "enabled"
    if "SecureBoot disabled" in text or "EFI variables are not supported" in text:
        return "disabled"
    return "unknown"


def secure_boot_refusal(family):
    """Why the play stops on a Secure Boot host whose module DKMS would build, with the key path
    of this distribution's DKMS."""
    key, create = MOK_KEYS.get(family, MOK_KEYS["debian"])
    return (
        "Secure Boot is on and this driver's kernel module is built by DKMS, so the kernel would "
        "refuse it unless it is signed by a key enrolled in the firmware. Either enrol the DKMS "
        f"signing key ({create} creates it if it is missing; then sudo mokutil --import {key}, "
        "reboot, confirm in the blue MOK screen) and set vllm_dual_fast_secure_boot_mok_enrolled: "
        "true, or turn Secure Boot off in the firmware."
    )


# --- 6. holds -----------------------------------------------------------------------------------

# The driver's user space: what containers and nvidia-smi load, which must stay the version of the
# loaded module until the owner upgrades and reboots on purpose.
# Debian's DKMS rebuilds the held driver for every new kernel, so the kernel may move alone there.
# Ubuntu's module for a kernel is prebuilt against the driver in the archive at the kernel's build
# (linux-modules-nvidia-<b>-server-<abi> needs exactly that nvidia-kernel-common, and the held
# utils need exactly theirs): after a driver point release the next kernel's module needs the
# newer driver, so holding user space alone lets the kernel move without its module (proved with
# APT: tests/integration/test_ubuntu_kernel_updates.py). There the kernel's meta packages and the
# module meta
# are held with user space, as one unit that only the maintenance run (playbooks/maintain.yml)
# moves, all together.
_USER_SPACE = {
    ("debian", "distro"): ["nvidia-driver", "libcuda1", "nvidia-smi", "nvidia-persistenced"],
    # {v}: the variant installed (-server, -server-open, -open or none: ubuntu_driver_variant);
    # the utilities are one package for a branch's open and proprietary modules ({s}: -server
    # or none).
    ("ubuntu", "distro"): [
        "linux-{f}",
        "linux-image-{f}",
        "linux-headers-{f}",
        "linux-modules-nvidia-{b}{v}-{f}",
        "nvidia-headless-no-dkms-{b}{v}",
        "nvidia-utils-{b}{s}",
    ],
    # NVIDIA's repository: Debian-style names on Debian, branch-suffixed names on Ubuntu; the
    # apt preferences file keeps apt on the branch, the hold on the installed point release.
    ("debian", "cuda_repo"): [
        "nvidia-driver",
        "nvidia-driver-cuda",
        "libcuda1",
        "nvidia-smi",
        "nvidia-persistenced",
    ],
    ("ubuntu", "cuda_repo"): [
        "nvidia-driver-{b}",
        "libnvidia-compute-{b}",
        "nvidia-utils-{b}",
        "nvidia-compute-utils-{b}",
        # From branch 590 NVIDIA names its Ubuntu packages without the branch
        # (libnvidia-compute-580 -> libnvidia-compute) and drops cuda-drivers-<branch> for
        # cuda-drivers; the preferences file keeps them on the branch (driver installation guide,
        # "Ubuntu 590 and later packages").
        "cuda-drivers",
        "libnvidia-compute",
    ],
}
# The first branch whose packages in NVIDIA's Ubuntu repository carry no branch in their names.
_CUDA_BRANCHLESS_FROM = 590
# What a maintenance run upgrades besides the held unit: the kernel meta packages (Debian's
# follow the kernel flavour: linux-image-amd64; DKMS then builds the new driver for the new kernel).
_KERNEL_METAS = {
    "debian": ["linux-image-{f}", "linux-headers-{f}"],
    "ubuntu": ["linux-{f}", "linux-image-{f}", "linux-headers-{f}"],
}
_KERNEL_FOLLOWING_HELD = re.compile(r"^(nvidia-kernel-dkms|linux-modules-nvidia-\S+)$")
_MODULE_META = re.compile(r"^linux-modules-nvidia-\d+(?:-server)?(?:-open)?-(?P<flavour>[a-z].*)$")


# Canonical's driver packages come in four variants of a branch (`ubuntu-drivers list --gpgpu`:
# nvidia-driver-580-server, -580-server-open, -580-open, -580): the server branch or the desktop
# one, each with NVIDIA's proprietary or open kernel modules. From 580 the open one is marked
# preferred (XB-Prefer-Variant: Open), so `ubuntu-drivers --gpgpu` installs -server-open.
_VARIANT = re.compile(r"^(?:nvidia-headless-no-dkms|nvidia-driver|linux-modules-nvidia)-(?P<b>\d+)"
                      r"(?P<v>-server-open|-server|-open)?(?:-[a-z0-9].*)?$")
_VARIANT_ORDER = ("-server", "-server-open", "-open", "")


def installed_driver_branches(installed):
    """The driver branches (ints, oldest first) whose headless, driver or module meta packages
    are installed."""
    return sorted({int(match["b"]) for match in map(_VARIANT.match, map(str, installed or []))
                   if match})


def ubuntu_driver_variant(installed, branch, default="-server"):
    """The variant of the branch's driver installed: '-server', '-server-open', '-open' or ''
    (from the headless, driver or module meta packages' names); with none of the branch's, the
    variant of the newest older branch installed (the one a branch move leaves); `default` (the
    role's own install: -server) when none is."""
    found = set()
    for name in installed or []:
        match = _VARIANT.match(str(name))
        if match and match["b"] == str(branch):
            found.add(match["v"] or "")
    older = [b for b in installed_driver_branches(installed) if b < int(branch)]
    if not found and older:
        return ubuntu_driver_variant(installed, older[-1], default)
    return next((v for v in _VARIANT_ORDER if v in found), default)


def _names(templates, branch, flavour, installed, move=False):
    """The templates' names for the branch and, while an older branch is still installed (the
    owner moved vllm_dual_fast_driver_branch on; maintain.yml moves the rig), for that one too;
    with `installed`, those installed, and with `move` the new branch's names to install."""
    variant = ubuntu_driver_variant(installed, branch)
    server = "-server" if variant.startswith("-server") else ""
    older = [b for b in installed_driver_branches(installed) if b < int(branch)]

    def named(b):
        return [name.format(b=b, f=flavour or "generic", v=variant, s=server)
                for name in templates]

    names = [name for b in (branch, *older) for name in named(b)]
    # The new branch's own names (a template without the branch names the same package).
    to_install = set(named(branch)).difference(*map(named, older)) if move and older else set()
    if installed is not None:
        names = [name for name in names if name in installed or name in to_install]
    return list(dict.fromkeys(names))


def cuda_drivers_package(branch):
    """The CUDA repository's driver meta package the role installs: cuda-drivers-<branch> up to
    589, cuda-drivers from 590 (NVIDIA removed the branch names; the role's preferences file
    keeps cuda-drivers on the branch)."""
    return "cuda-drivers" if int(branch) >= _CUDA_BRANCHLESS_FROM else f"cuda-drivers-{branch}"


def driver_hold_packages(family, source, branch, installed=None, flavour=None):
    """The packages to hold for this family and source; with `installed` (package facts or
    names), only those present (NVIDIA's repository names differ between releases). flavour:
    Ubuntu's kernel flavour (generic, generic-hwe-24.04, ...), for its kernel and module metas."""
    return _names(_USER_SPACE[(family, source)], branch, flavour, installed)


# The NVIDIA Container Toolkit's packages (NVIDIA's repository): the nightly upgrades leave them
# alone with the driver (the unattended-upgrades guard's nvidia-/libnvidia- patterns), so the
# maintenance run moves them, through the canary and the batches like the driver: a toolkit
# that is never upgraded keeps its container escapes (preflight names them).
_CONTAINER_TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                      "libnvidia-container-tools", "libnvidia-container1"]


# The container runtime under the engine (runc, containerd), as each Docker family packages it:
# Docker's repository (containerd.io bundles runc), the distribution's, Microsoft's moby. A run
# moves it only where the role installed the engine: an owner's engine is the owner's to update.
_CONTAINER_RUNTIME = ["containerd.io", "containerd", "runc", "moby-containerd", "moby-runc"]


def maintenance_upgrade_packages(family, source, branch, installed, flavour=None,
                                 runtime=False):
    """What a maintenance run upgrades in one APT transaction, so that kernel, module and user
    space arrive together: the held unit, the kernel meta packages and the container toolkit,
    and with `runtime` (the role installed the Docker engine) runc and containerd; those
    installed."""
    templates = (_USER_SPACE[(family, source)] + _KERNEL_METAS[family] + _CONTAINER_TOOLKIT
                 + (_CONTAINER_RUNTIME if runtime else []))
    # Canonical's branches: the owner's new branch is installed by the run that moves the rig.
    return _names(templates, branch, flavour, installed,
                  move=(family, source) == ("ubuntu", "distro"))


def kernel_following_holds(showhold):
    """Kernel-following packages among `apt-mark showhold`'s output held while their kernel may
    still move. Earlier versions of this role held nvidia-kernel-dkms (Debian) and
    linux-modules-nvidia-* (Ubuntu) without recording it, so whose hold it is cannot be told: the
    owner is warned, the hold is left alone. Ubuntu's module meta held together with its kernel's
    image meta (linux-image-<flavour>, as the role holds them now) cannot strand the kernel."""
    held = _held(showhold)
    found = []
    for name in sorted(held):
        if not _KERNEL_FOLLOWING_HELD.match(name):
            continue
        meta = _MODULE_META.match(name)
        if meta and f"linux-image-{meta['flavour']}" in held:
            continue
        found.append(name)
    return found


def _held(showhold):
    """The package names `apt-mark showhold` printed (a foreign architecture's :arch dropped)."""
    return {line.strip().split(":", 1)[0] for line in (showhold or "").splitlines() if line.strip()}


def driver_hold_plan(to_hold, hold, showhold, recorded):
    """Which holds the role sets and which of its own it releases. A hold is the role's only when
    the rig's record of the role's holds (`recorded`, written by the role) names it and it is still
    held; a package held when the role came to it is the owner's: never released, never recorded.
    to_hold: the driver's user-space packages; hold: vllm_dual_fast_driver_hold.
    Returns hold (to set now), release (the role's own it no longer wants: `hold` off, or a package
    no longer in the list), record_during (written before any change: a run interrupted after
    setting a hold has it recorded already) and record_after (written once the changes are made)."""
    held = _held(showhold)
    wanted = list(dict.fromkeys(to_hold or [])) if hold else []
    mine = {name for name in recorded or [] if name in held}
    to_set = [name for name in wanted if name not in held]
    release = sorted(mine - set(wanted))
    return {
        "hold": to_set,
        "release": release,
        "record_during": sorted(mine | set(to_set)),
        "record_after": sorted((mine - set(release)) | set(to_set)),
    }


def dpkg_locked(result):
    """Whether a dpkg_selections result failed because another process holds dpkg's lock
    ("dpkg frontend lock was locked by another process", "unable to lock the dpkg database"):
    worth waiting for, unlike any other failure. dpkg --set-selections stops at the lock before
    it reads its input: when it is gone before Ansible wrote the selection, run_command fails on
    the write ("Error executing command.", rc 32: EPIPE) and never sees dpkg's message (make test, a
    loaded machine); that is waited for too."""
    text = " ".join(str((result or {}).get(key) or "") for key in ("msg", "stderr", "stdout"))
    broken_pipe = ("--set-selections" in str((result or {}).get("cmd") or "")
                   and (result or {}).get("rc") == 32)    # EPIPE: run_command's errno
    return bool(result and result.get("failed")) and (broken_pipe or bool(
        re.search(r"lock(ed)? (was locked|by another process)|unable to lock|could not get lock",
                  text, re.IGNORECASE)))


def reboot_decision(state):
    """What to do once the driver's packages are in place while the loaded driver is missing or
    too old: "none" when it already satisfies, "reboot" when allowed, else "pending" (nothing may
    be deployed until a reboot; a later run reboots then, if allowed). Check mode never reboots.
    state: loaded, satisfied, reboot_allowed, check_mode (bools)."""
    if state.get("satisfied"):
        return "none"
    if state.get("reboot_allowed") and not state.get("check_mode"):
        return "reboot"
    return "pending"


class FilterModule:
    # Only what the role's YAML uses; the other functions here are the filters' parts, which
    # tests call as plain Python.
    def filters(self):
        return {
            "vllm_dual_fast_reboot_decision": reboot_decision,
            "vllm_dual_fast_apt_sources_enable": apt_sources_enable,
            "vllm_dual_fast_apt_policy_candidate": apt_policy_candidate,
            "vllm_dual_fast_driver_candidate_problem": driver_candidate_problem,
            "vllm_dual_fast_cuda_repo_dir": cuda_repo_dir,
            "vllm_dual_fast_ubuntu_kernel_flavour": ubuntu_kernel_flavour,
            "vllm_dual_fast_ubuntu_driver_packages": ubuntu_driver_packages,
            "vllm_dual_fast_kernel_headers_package": kernel_headers_package,
            "vllm_dual_fast_debian_kernel_packages": debian_kernel_packages,
            "vllm_dual_fast_secure_boot_state": secure_boot_state,
            "vllm_dual_fast_secure_boot_refusal": secure_boot_refusal,
            "vllm_dual_fast_driver_hold_packages": driver_hold_packages,
            "vllm_dual_fast_maintenance_upgrade_packages": maintenance_upgrade_packages,
            "vllm_dual_fast_ubuntu_driver_variant": ubuntu_driver_variant,
            "vllm_dual_fast_cuda_drivers_package": cuda_drivers_package,
            "vllm_dual_fast_dpkg_locked": dpkg_locked,
            "vllm_dual_fast_kernel_following_holds": kernel_following_holds,
            "vllm_dual_fast_driver_hold_plan": driver_hold_plan,
        }
