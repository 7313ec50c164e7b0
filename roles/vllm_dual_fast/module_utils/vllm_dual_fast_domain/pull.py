"""Pure helpers for pull mode (tested in tests/integration/test_pull_python.py)."""

import re

_RANGE = re.compile(r"installs on Python (\d+)\.(\d+)-(\d+)\.(\d+)")
_PINNED = re.compile(r"^ansible-core==(\S+)", re.M)


def pull_python_range(requirements):
    """((major, minor) lowest, (major, minor) highest) the hash-pinned requirements install on,
    from the header scripts/pin-pull-requirements.sh writes ("installs on Python 3.11-3.13")."""
    found = _RANGE.search(requirements or "")
    if not found:
        raise ValueError(
            "pull-requirements.txt names no Python range (scripts/pin-pull-requirements.sh)"
        )
    low_major, low_minor, high_major, high_minor = map(int, found.groups())
    return (low_major, low_minor), (high_major, high_minor)


def pull_python_problem(version, requirements, interpreter="python3"):
    """Empty when `interpreter` at `version` (3.11, 3.11.0rc1, 3.12.3) can install pull mode's
    pinned Ansible; else why not, for the enrolment to stop on before pip would."""
    low, high = pull_python_range(requirements)
    found = re.match(r"^(\d+)\.(\d+)", str(version or "").strip())
    core = _PINNED.search(requirements or "")
    pinned = f"ansible-core {core[1]}" if core else "Ansible"
    span = f"Python {low[0]}.{low[1]} to {high[0]}.{high[1]}"
    if not found:
        return (
            f"Pull mode cannot tell the version of {interpreter} ({version!r}); "
            f"its {pinned} needs {span}."
        )
    have = (int(found[1]), int(found[2]))
    if low <= have <= high:
        return ""
    return (
        f"Pull mode's hash-pinned {pinned} installs on {span}; this release's {interpreter} is "
        f"{version}, so pip would find no matching files. Enrol this rig in push mode "
        "(ansible-playbook site.yml from a controller) instead."
    )
