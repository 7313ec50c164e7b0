"""Pure helpers for the maintenance run (tasks/maintain.yml): what APT would do, which kernel
GRUB boots, how to name the previous one for grub-reboot, and the one builder of the run's
result (files/schemas/maintenance.schema.json). Tested in
tests/integration/test_maintenance_filters.py."""

import re

MAINTENANCE_STATES = ("maintained", "maintenance-failed", "maintenance-waiting", "unchanged")
_ACTION = re.compile(r"^(Inst|Remv|Purg) (\S+)(?: \[([^\]]+)\])?(?: \((\S+))?")
_MENU_ID = re.compile(
    r"^\s*(submenu|menuentry) '((?:[^'\\]|\\.)*)'.*\$menuentry_id_option '([^']+)'"
)
LINES = 20


def apt_simulation(stdout):
    """What `apt-get -s install ...` would do: {install: [{name, from, to}], remove: [names]}.
    `from` is empty for a package new to the rig (a kernel ABI is always new)."""
    install, remove = [], []
    for line in (stdout or "").splitlines():
        found = _ACTION.match(line)
        if not found:
            continue
        verb, name, old, new = found.groups()
        if verb == "Inst":
            install.append({"name": name, "from": old or "", "to": new or ""})
        else:
            remove.append(name)
    return {"install": install, "remove": remove}


# What APT (2.6 here, 3.0.4 on the Ubuntu-shaped rig: tests/recorded/apt-unmet-*.txt) prints,
# with exit status 100, when the packages asked for cannot be installed together.
_CANNOT_INSTALL = "Some packages could not be installed."
_UNMET_HEADING = "The following packages have unmet dependencies:"


def apt_unmet(stdout):
    """The dependencies `apt-get -s install ...` could not meet, one line each
    ("pkg : Depends: dep ..."), or [] when APT could plan the install. Canonical publishes a
    driver point release's user space before linux-restricted-modules is rebuilt for it: until
    then, the user space and the module metas cannot be installed together."""
    text = stdout or ""
    if _CANNOT_INSTALL not in text:
        return []
    lines, package, inside = [], "", False
    for line in text.splitlines():
        if line.strip() == _UNMET_HEADING:
            inside = True
            continue
        if not inside:
            continue
        if not line.startswith(" ") or not line.strip():
            break
        name, colon, rest = line.strip().partition(" : ")
        if colon:
            package, line = name, f"{name} : {rest}"
        else:
            line = f"{package} : {line.strip()}"
        lines.append(" ".join(line.split()))
    return lines or ["APT could not plan the install (no unmet dependency named)"]


_VERSION_MISSING = re.compile(r"^E: Version '[^']+' for '[^']+' was not found$")


def apt_versions_missing(stderr):
    """APT's lines for a `name=version` this rig's archive does not have (yet: a mirror that lags,
    a phased update): the fleet installs what the canary proved, and waits for it here."""
    return [line.strip() for line in (stderr or "").splitlines()
            if _VERSION_MISSING.match(line.strip())]


def plan_versions(plan):
    """{name: version} of what apt_simulation's plan installs: the exact set a canary proved."""
    return {item["name"]: item["to"] for item in (plan or {}).get("install", []) if item.get("to")}


def maintenance_install_args(unit, versions=None):
    """What the maintenance run asks APT to install: the unit's names as they are (each rig's
    candidates: a canary, a single rig), or, given the versions a canary installed, `name=version`
    for each unit package the canary moved and nothing else (later batches install what the
    canary proved, not their candidate of the moment: phased updates, a mirror that lags)."""
    if versions is None:
        return list(unit)
    return [f"{name}={versions[name]}" for name in unit if name in versions]


def _version_key(kernel):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", kernel) if part]


def newest_kernel(vmlinuz):
    """The kernel GRUB's entry 0 boots: the newest of /boot/vmlinuz-<release> (paths or names),
    by version order as GRUB's version_sort; "" when none is installed."""
    kernels = [str(path).rsplit("/", 1)[-1].removeprefix("vmlinuz-") for path in vmlinuz or []]
    kernels = [k for k in kernels if k and not k.endswith((".old", ".bak"))]
    return max(kernels, key=_version_key) if kernels else ""


def module_package(branch, kernel, variant="-server"):
    """Canonical's signed NVIDIA module of one kernel: linux-modules-nvidia-<branch><variant>-
    <kernel> (variant: -server, -server-open, -open or '')."""
    return f"linux-modules-nvidia-{branch}{variant}-{kernel}"


def kernel_without_module(plan, installed, branch, variant="-server"):
    """The kernel GRUB would boot once APT carried out `plan` (apt_simulation's) on a rig with
    the `installed` package names, when Canonical's signed NVIDIA module of the branch's variant
    (module_package) would be missing for it; else "". Canonical
    can publish a kernel before its module: ubuntu-drivers then installs nothing, or DKMS with
    --include-dkms (ubuntu-drivers-common's get_linux_modules_metapackage); the role stops and
    says why."""
    names = set(installed or []) | {item["name"] for item in (plan or {}).get("install", [])}
    names -= set((plan or {}).get("remove", []))
    kernels = [n.removeprefix("linux-image-") for n in names if re.match(r"linux-image-\d", n)]
    nxt = newest_kernel(kernels)
    # A branch at its end of life moves on through Canonical's transitional packages (the old
    # branch's metas depend on the next branch's): the module may come under a later branch's
    # number, of the same variant (never an older branch's: its module would not match the
    # user space).
    later = re.compile(r"^linux-modules-nvidia-(\d+)" + re.escape(f"{variant}-{nxt}") + "$")
    has_module = nxt and any(match and int(match[1]) >= int(branch)
                             for match in map(later.match, names))
    return nxt if nxt and not has_module else ""


# Canonical's driver packages that name their branch (the user space and the module metas).
_BRANCH_NAMED = re.compile(
    r"^(?:nvidia-headless-no-dkms|nvidia-headless|nvidia-driver|nvidia-utils|nvidia-compute-utils|"
    r"nvidia-kernel-common|nvidia-kernel-source|nvidia-dkms|libnvidia-compute|libnvidia-cfg1|"
    r"linux-modules-nvidia)-(?P<branch>\d+)(?:-|$)")


def branch_move(plan, branch):
    """The later driver branch APT's plan (apt_simulation's) would move the rig to, else 0. At a
    branch's end of life Canonical publishes its packages again as transitional ones, built from
    the next branch's source and depending on its packages (canonical/nvidia-graphics-drivers
    debian/control: nvidia-headless-no-dkms-510-server depends on
    nvidia-headless-no-dkms-515-server; linux-restricted-modules' linux-modules-nvidia-590-generic
    is a "dummy transitional package" depending on linux-modules-nvidia-595-generic): a plan
    installs packages named for a later branch, or takes the branch's own names to a later
    branch's version."""
    later = set()
    for item in (plan or {}).get("install", []):
        named = _BRANCH_NAMED.match(item["name"])
        if not named:
            continue
        later.add(int(named["branch"]))
        major = re.match(r"^(?:\d+:)?(\d+)\.", item.get("to", ""))
        if major and int(named["branch"]) == int(branch):
            later.add(int(major[1]))
    return max((b for b in later if b > int(branch)), default=0)


def branch_end_of_life(branch, to_branch):
    """Why a maintenance run takes no branch move the owner did not ask for (branch_move's)."""
    return (f"Driver branch {branch} reached its end of life: Canonical's transitional packages "
            f"move it to branch {to_branch}. APT did not run; nothing was changed. Set "
            f"vllm_dual_fast_driver_branch: {to_branch} to move the rig (the canary first).")


# The kernels themselves: the fallback boots the installed one, whatever the plan does to them.
_KERNEL_ITSELF = re.compile(r"^linux-(image|headers|modules|modules-extra)-\d")
# Canonical's per-kernel NVIDIA packages (linux-restricted-modules), of any branch and variant.
_KERNEL_NVIDIA = re.compile(r"^linux-(modules|objects|signatures)-nvidia-")


def fallback_packages(plan, installed, kernel):
    """What the kernel running now (`kernel`) needs to drive its GPUs again after the upgrade,
    when APT's `plan` (apt_simulation's) takes its NVIDIA module away: Canonical builds a new
    driver's modules only for the kernels it publishes then, so the old kernel's module (built for
    the old driver) goes when user space moves. Every `installed` package the plan removes or
    upgrades, but the kernels themselves, sorted: kept as they are now (dpkg-repack) and put
    back if the rig ends up on this kernel without GPUs. [] when the kernel keeps its module."""
    removed = set((plan or {}).get("remove", []))
    if not any(_KERNEL_NVIDIA.match(name) and name.endswith(f"-{kernel}") for name in removed):
        return []
    upgraded = {item["name"] for item in (plan or {}).get("install", [])
                if item["name"] in set(installed or [])}
    return sorted(name for name in removed | upgraded if not _KERNEL_ITSELF.match(name))


def module_not_published(kernel, branch, variant="-server"):
    """Why the role takes no kernel `kernel` (kernel_without_module's) yet: the one sentence the
    driver install's refusal and the maintenance result both start with."""
    return (f"Kernel {kernel} boots next without its signed NVIDIA module: Canonical has not "
            f"published {module_package(branch, kernel, variant)} yet, so the driver would not "
            "load.")


def grub_entry(grub_cfg, kernel):
    """The grub-reboot name of the normal (not recovery) entry of `kernel` in a grub.cfg written
    by grub-mkconfig's 10_linux (Debian and Ubuntu): `<submenu id>><entry id>`, ids being stable
    where titles are translated; "" when the menu has no such entry."""
    submenu = ""
    depth = 0
    for line in (grub_cfg or "").splitlines():
        found = _MENU_ID.match(line)
        if found:
            kind, _title, ident = found.groups()
            if kind == "submenu":
                submenu = ident
            elif ident.startswith(f"gnulinux-{kernel}-advanced-"):
                return f"{submenu}>{ident}" if submenu and depth > 0 else ident
        depth += line.count("{") - line.count("}")
        if depth == 0:
            submenu = ""
    return ""


def module_file_for(find_stdout, kernel):
    """Whether `find /lib/modules/<kernel> -name 'nvidia.ko*'` found the NVIDIA module of that
    kernel (Ubuntu's signed module package, or what DKMS built)."""
    return any(f"/lib/modules/{kernel}/" in line for line in (find_stdout or "").splitlines())


def _tail(lines, limit=LINES):
    return [str(line)[:300] for line in (lines or [])][-limit:]


def phase_durations(marks):
    """{phase: seconds} from [[phase, epoch seconds when it ended], ...] in order, the first
    being the run's start: each phase lasted from the mark before it to its own."""
    marks = [(str(name), float(at)) for name, at in marks or []]
    return {name: round(at - marks[i][1], 1) for i, (name, at) in enumerate(marks[1:])}


def maintenance_result(state, reason="", kernel_before="", kernel_after="", driver_before="",
                       driver_after="", packages=None, apt_lines=None, kernel_log=None,
                       fell_back=False, marks=None, serving_release="", healthy=None,
                       versions=None, boot_default="", restored=None):
    """What one maintenance run did to a rig (files/schemas/maintenance.schema.json): the one
    builder of `vllm_dual_fast_maintenance` and of maintenance.json on the rig. `healthy` is
    None when the run checked nothing (unchanged, or no release served before), else whether the
    release serves healthy. `boot_default` is the kernel GRUB boots by default after the run
    ('' when the run did not set it); `restored` the packages put back at the versions kept
    before the upgrade (fallback_packages)."""
    if state not in MAINTENANCE_STATES:
        raise ValueError(f"unknown maintenance state {state!r} ({', '.join(MAINTENANCE_STATES)})")
    return {
        "state": state,
        "reason": " ".join(str(reason or "").split())[:300],
        "kernel_before": str(kernel_before or ""),
        "kernel_after": str(kernel_after or ""),
        "driver_before": str(driver_before or ""),
        "driver_after": str(driver_after or ""),
        "packages": sorted(str(p) for p in (packages or [])),
        "versions": {str(k): str(v) for k, v in sorted((versions or {}).items())},
        "fell_back_to_previous_kernel": bool(fell_back),
        "boot_default": str(boot_default or ""),
        "fallback_restored": sorted(str(p) for p in (restored or [])),
        "apt_lines": _tail(apt_lines),
        "kernel_log": _tail(kernel_log),
        "phases_s": phase_durations(marks),
        "serving": {
            "release": str(serving_release or ""),
            "healthy": None if healthy is None else bool(healthy and serving_release),
        },
    }


def maintenance_verdict(evidence):
    """The result of a maintenance run that upgraded (maintain_apply.yml's one call), from:
    kernel_before, driver_before, next_kernel (what GRUB boots by default after the upgrade),
    kernel_after, driver_after ('' when the GPUs do not answer), satisfied (the driver answers
    and is new enough), gpu_lost (the driver loaded but cannot reach a GPU: one fell off the
    bus, Xid 79), apt_failed, apt_lines, smi_lines (what nvidia-smi said), failed_boot_lines
    (the NVRM lines of the boot the run fell back from), fell_back, packages, versions ({name:
    version} APT installed), marks (phase_durations' input), serving_release (the release
    serving again, '' when none was or it could not start), was_serving (a release served before
    the run: without one, health is none, not failed), health_failure (why it failed health
    afterwards, '' when it passed or nothing serves), trial (the new kernel was booted once,
    GRUB's default staying the old one), kernel_first_boot (the kernel the first reboot came
    up on), boot_default (the kernel GRUB boots by default now), restored (the packages put back
    for the previous kernel, fallback_packages). `maintained` only when APT
    finished, the GPUs answer on the new kernel and what serves passes health."""
    ev = evidence or {}
    release = ev.get("serving_release") or ""
    healthy = bool(release) and not ev.get("health_failure")
    if not ev.get("was_serving", True) and not release:
        healthy = None
    nxt, after = ev.get("next_kernel") or "", ev.get("kernel_after") or ""
    smi = next((line for line in ev.get("smi_lines") or [] if str(line).strip()), "")
    if ev.get("apt_failed"):
        last = next((line for line in reversed(ev.get("apt_lines") or []) if str(line).strip()), "")
        reason = f"APT did not finish the upgrade: {last or 'no output'}"
    elif not ev.get("satisfied") and ev.get("gpu_lost"):
        # The module loaded: the kernel and driver are fine. A card off the bus (Xid 79) comes
        # back only from a cold power cycle, not from a reboot into another kernel.
        reason = (f"a GPU fell off the bus after the reboot into kernel {after}, the driver "
                  "loaded: power the rig off and on (a reboot does not bring a card back); the "
                  f"new kernel was kept. nvidia-smi: {smi or 'nothing'}")
    elif not ev.get("satisfied"):
        reason = f"the GPUs did not answer on kernel {after}: {smi or 'nvidia-smi said nothing'}"
    elif after != nxt and ev.get("trial") and ev.get("kernel_first_boot") != nxt:
        # The one-time boot never reached userspace: panic= or the watchdog rebooted the rig,
        # and GRUB booted its default, the kernel that served before.
        reason = (f"kernel {nxt} did not come up on its trial boot (a panic or a hang: the rig "
                  "rebooted by itself into GRUB's default)")
    elif after != nxt and ev.get("kernel_first_boot") == nxt:
        reason = f"the GPUs did not answer on kernel {nxt}: {smi or 'nvidia-smi said nothing'}"
    elif after != nxt:
        reason = f"kernel {nxt} has no NVIDIA module; the rig runs {after}"
    elif ev.get("health_failure"):
        reason = f"the serving release failed health after the upgrade: {ev['health_failure']}"
    else:
        reason = ""
    if not reason:
        state = "maintained"
    else:
        state = "maintenance-failed"
        if ev.get("satisfied") and ev.get("fell_back"):
            serves = (f"release {release} {'healthy' if healthy else 'failing health'}"
                      if release else "no release running")
            driver = ev.get("driver_after")
            put_back = (", put back from the packages kept before the upgrade"
                        if ev.get("restored") else "")
            reason += f" (back on the previous kernel {after}, driver {driver}{put_back}; {serves})"
    return maintenance_result(
        state, reason=reason, kernel_before=ev.get("kernel_before"), kernel_after=after,
        driver_before=ev.get("driver_before"),
        driver_after=ev.get("driver_after") if ev.get("satisfied") else "",
        packages=ev.get("packages"), apt_lines=ev.get("apt_lines") if ev.get("apt_failed") else [],
        kernel_log=[] if state == "maintained" else [
            *(ev.get("smi_lines") or []), *(ev.get("failed_boot_lines") or [])],
        fell_back=ev.get("fell_back"), marks=ev.get("marks"), serving_release=release,
        healthy=healthy, versions=ev.get("versions"), boot_default=ev.get("boot_default"),
        restored=ev.get("restored"))
