"""Container-stack choices (pure; tested in tests/integration/test_stack_filters.py)."""

# Engines an owner may already run, and the Compose v2 plugin that goes with each.
_ENGINE_FAMILIES = (
    ("docker-ce", ["docker-ce", "docker-ce-cli", "containerd.io", "docker-compose-plugin"]),
    ("docker.io", None),  # Debian's and Ubuntu's own: the distribution's package set
    ("moby-engine", ["moby-engine", "moby-cli", "moby-compose"]),
)


def installed_packages(dpkg_query_output):
    """The names of the packages dpkg has fully installed, from lines of
    `dpkg-query --show --showformat='${db:Status-Status} ${Package}\\n'`. A package removed with
    its configuration kept (config-files), half-installed or unpacked is not installed: apt must
    still see to it."""
    names = set()
    for line in (dpkg_query_output or "").splitlines():
        status, _, name = line.strip().partition(" ")
        if status == "installed" and name:
            names.add(name)
    return sorted(names)


def docker_packages(installed, from_repo, distro_packages, repo_packages):
    """The Docker packages to make present. An engine the owner already installed decides the
    family (installing the other family's engine would make apt remove theirs); otherwise the
    role's choice does (`from_repo`: Docker's repository, else the distribution's packages).
    installed: the names of the installed packages (package_facts keys)."""
    installed = set(installed or [])
    for engine, family in _ENGINE_FAMILIES:
        if engine in installed:
            return list(family if family is not None else distro_packages)
    return list(repo_packages if from_repo else distro_packages)


def disk_shortfalls(places):
    """What lacks room, one sentence each (empty: enough). places: dicts with what, fs (device
    id), free_gib, need_gib; places on one file system share its free space."""
    by_fs = {}
    for place in places:
        entry = by_fs.setdefault(str(place["fs"]),
                                 {"free": float(place["free_gib"]), "need": 0.0, "what": []})
        entry["need"] += float(place["need_gib"])
        if float(place["need_gib"]) > 0:
            entry["what"].append(f"{place['what']} ({float(place['need_gib']):g} GiB)")
    return [
        f"{e['free']:g} GiB free where {' and '.join(e['what'])} must fit: "
        f"{e['need']:g} GiB needed."
        for e in by_fs.values() if e["need"] > e["free"]
    ]


def _upstream_key(version):
    """A Debian package version's upstream part as numbers to compare (`1.17.8-1` -> (1, 17, 8);
    an epoch and a Debian revision are dropped; `1.17.0~rc.1` sorts before `1.17.0`)."""
    text = str(version or "").split(":", 1)[-1].rsplit("-", 1)[0]
    main, _, pre = text.partition("~")
    numbers = tuple(int(part) for part in main.replace("-", ".").split(".") if part.isdigit())
    return numbers + ((-1,) if pre else (0,))


def toolkit_cves_open(version, fixes):
    """The container-escape fixes an installed NVIDIA Container Toolkit lacks: each of `fixes`
    ({cve, fixed_in}, vars/main.yml's list) whose fixed_in is newer than `version` (dpkg's
    version of nvidia-container-toolkit; empty: not installed, nothing to say)."""
    if not str(version or "").strip():
        return []
    have = _upstream_key(version)
    return [fix for fix in fixes or [] if have < _upstream_key(fix["fixed_in"])]


class FilterModule:
    def filters(self):
        return {
            "vllm_dual_fast_installed_packages": installed_packages,
            "vllm_dual_fast_docker_packages": docker_packages,
            "vllm_dual_fast_disk_shortfalls": disk_shortfalls,
            "vllm_dual_fast_toolkit_cves_open": toolkit_cves_open,
        }
