#!/usr/bin/env python3
"""TEST DOUBLE of Canonical's Ubuntu archive, as far as the NVIDIA -server driver and the kernel
go: a signed APT repository whose packages carry Canonical's names and dependency shapes (read
from Canonical's nvidia-graphics-drivers debian/control and `apt show` of linux-restricted-modules
packages; every known difference: README.md next to this file). The packages drive nothing: their
files are marker files that the other doubles (the kernel double, nvidia-smi) read.

    OUTDIR/ubuntu-archive-keyring.gpg      the throw-away signing key's public half (binary)
    OUTDIR/<snapshot>/ubuntu/dists/<codename>{,-updates,-security}/{Release,InRelease}
    OUTDIR/<snapshot>/ubuntu/dists/<suite>/{main,restricted,universe,multiverse}/binary-amd64/Packages
    OUTDIR/<snapshot>/ubuntu/pool/<component>/*.deb

Each snapshot is the archive at one moment (archive() says which); all are signed by one key,
so a rig whose sources name .../current/ubuntu/ sees an update published when the `current`
link moves from `first` to `updates` (or `broken`, then `fixed`). Each kernel's module package is
built against the driver in the archive at its build: ABI 2's module needs point release 2; ABI
1's is respun for point release 2 (`+2`), as Canonical respins linux-restricted-modules for
kernels still in the archive. The kernel packages run update-grub as Ubuntu's kernel hooks do;
nvidia-utils ships the nvidia-smi double.

Usage: build.py OUTDIR [--codename noble|jammy]
Re-running with unchanged inputs prints "up to date" and changes nothing. Needs dpkg-deb and gpg.
"""

from __future__ import annotations

import argparse
import email.utils
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ARCH = "amd64"
BRANCH = "580"
# (codename, release, kernel ABIs (ABI, kernel upload number), driver point releases). The third
# ABI is published only in `ahead`, without its NVIDIA module.
RELEASES = {
    "noble": ("24.04", [("6.8.0-50", 51), ("6.8.0-51", 52), ("6.8.0-52", 53)],
              ["580.95.05", "580.105.08"]),
    "jammy": ("22.04", [("5.15.0-126", 136), ("5.15.0-127", 137), ("5.15.0-128", 138)],
              ["580.95.05", "580.105.08"]),
}
# The hardware enablement kernel each release's -updates carries from `updates` on (ABI,
# upload): a newer upstream under the same -generic kernel name, with its own metas
# (linux-generic-hwe-<release>) and module meta (linux-modules-nvidia-580-server-generic-hwe-...).
HWE = {"noble": ("6.14.0-36", 36), "jammy": ("6.8.0-90", 90)}
FLAVOUR = "generic"
# Debian 13's docker-compose (the Compose v2 CLI plugin), which docker-compose-v2 stands on.
DEBIAN_COMPOSE_UPSTREAM = "2.26.1"
SMI_DOUBLE = Path(__file__).resolve().parent.parent / "nvidia-smi-double"
PERSISTENCED_UNIT = """[Unit]
Description=TEST DOUBLE of NVIDIA Persistence Daemon (does nothing)

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true

[Install]
WantedBy=multi-user.target
"""
UPDATE_GRUB = "if [ -x /usr/sbin/update-grub ]; then /usr/sbin/update-grub; fi\n"
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "1748563200"))


def _pkg(
    name,
    version,
    *,
    depends=(),
    provides=(),
    conflicts=(),
    files=None,
    postinst="",
    postrm="",
    arch=ARCH,
    source=None,
    section="misc",
    modaliases="",
):
    return {
        "name": name,
        "version": version,
        "arch": arch,
        "depends": list(depends),
        "provides": list(provides),
        "conflicts": list(conflicts),
        "files": dict(files or {}),
        "postinst": postinst,
        "postrm": postrm,
        "source": source or name,
        "section": section,
        "modaliases": modaliases,
    }


# The RTX 3090 (10de:2204) as nvidia-driver-<N>-server's Modaliases field lists its GPUs.
RTX_3090_MODALIASES = "nvidia(pci:v000010DEd00002204sv*sd*bc03sc*i*)"


def driver_version(upstream, release):
    """Canonical's user-space version for a point release: 580.95.05-0ubuntu0.24.04.1."""
    return f"{upstream}-0ubuntu0.{release}.1"


def driver_packages(upstream, release, branch=BRANCH):
    """The -server user space of one point release, with Canonical's dependency shapes: the
    meta packages pin each other with `=`, and utils and the compute library need exactly this
    upstream version of nvidia-kernel-common through its versioned virtual name."""
    b = f"{branch}-server"
    v = driver_version(upstream, release)
    exact_common = f"nvidia-kernel-common-{b}-{upstream}"
    src = f"nvidia-graphics-drivers-{b}"
    return [
        _pkg(
            f"nvidia-firmware-{b}-{upstream}",
            v,
            source=src,
            files={f"/lib/firmware/nvidia/{upstream}/gsp.bin.double": f"{upstream}\n"},
        ),
        _pkg(
            f"nvidia-kernel-common-{b}",
            v,
            source=src,
            depends=[f"nvidia-firmware-{b}-{upstream}"],
            provides=["nvidia-kernel-common", exact_common],
            conflicts=["nvidia-kernel-common"],
        ),
        _pkg(f"nvidia-kernel-source-{b}", v, source=src),
        _pkg(
            f"libnvidia-compute-{b}",
            v,
            source=src,
            depends=[exact_common],
            files={f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{upstream}": f"{upstream}\n"},
        ),
        _pkg(f"libnvidia-cfg1-{b}", v, source=src),
        # The real package ships nvidia-persistenced and its unit; the double's unit does nothing.
        _pkg(
            f"nvidia-compute-utils-{b}",
            v,
            source=src,
            depends=[f"libnvidia-compute-{b}"],
            files={"/usr/lib/systemd/system/nvidia-persistenced.service": PERSISTENCED_UNIT},
        ),
        _pkg(
            f"nvidia-utils-{b}",
            v,
            source=src,
            depends=[exact_common],
            provides=["nvidia-utils", "nvidia-smi"],
            conflicts=["nvidia-utils", "nvidia-smi"],
            # nvidia-smi is the project's double: it answers as the kernel double's boot left the
            # module and these libraries (molecule/doubles/nvidia-smi-double).
            files={"/usr/bin/nvidia-smi": (SMI_DOUBLE.read_text(), 0o755)},
        ),
        _pkg(
            f"nvidia-headless-no-dkms-{b}",
            v,
            source=src,
            depends=[
                f"nvidia-kernel-common-{b} (<= {upstream}-1)",
                f"nvidia-kernel-common-{b} (>= {upstream})",
                f"nvidia-kernel-source-{b} (= {v})",
                f"libnvidia-compute-{b} (= {v})",
                f"nvidia-compute-utils-{b} (= {v})",
                f"libnvidia-cfg1-{b} (= {v})",
            ],
        ),
        # What ubuntu-drivers reasons from (molecule/doubles/ubuntu-drivers-double): the driver
        # meta carrying the GPUs' Modaliases, and its DKMS fallback. Depends as Canonical's
        # debian/control (580-server-noble) less what this archive lacks (GL, X, dkms itself);
        # the role installs neither.
        _pkg(
            f"nvidia-dkms-{b}",
            v,
            source=src,
            depends=[
                f"nvidia-kernel-source-{b} (<= {upstream}-1)",
                f"nvidia-kernel-source-{b} (>= {upstream})",
                f"nvidia-kernel-common-{b} (<= {upstream}-1)",
                f"nvidia-kernel-common-{b} (>= {upstream})",
                f"nvidia-firmware-{b}-{upstream}",
            ],
        ),
        _pkg(
            f"nvidia-driver-{b}",
            v,
            source=src,
            depends=[
                f"nvidia-dkms-{b} (<= {upstream}-1)",
                f"nvidia-dkms-{b} (>= {upstream})",
                f"nvidia-kernel-common-{b} (<= {upstream}-1)",
                f"nvidia-kernel-common-{b} (>= {upstream})",
                *(f"{name}-{b} (= {v})" for name in (
                    "nvidia-kernel-source", "libnvidia-compute", "nvidia-compute-utils",
                    "nvidia-utils", "libnvidia-cfg1")),
            ],
            modaliases=RTX_3090_MODALIASES,
        ),
    ]


def kernel_packages(abi, upload, meta_flavour=FLAVOUR, meta_suffix="", panics=False):
    """One kernel ABI of the flavour, and the flavour's meta packages pointing at it (the meta
    packages are what move a rig to the next ABI: each ABI is a new package name). An HWE
    kernel is a -generic kernel whose metas are named generic-hwe-<release> and versioned
    <abi>.<upload>~<release>.1. A kernel that `panics` does so at boot on the rig's kernel
    double (molecule/images/kernel-target), as a regression on one board can."""
    k = f"{abi}-{FLAVOUR}"
    version = f"{abi}.{upload}{meta_suffix}"
    meta = f"{abi.replace('-', '.')}.{upload}{meta_suffix}"
    return [
        _pkg(
            f"linux-image-{k}",
            version,
            source="linux-signed",
            section="kernel",
            files={
                f"/boot/vmlinuz-{k}": f"TEST DOUBLE kernel {k}\n"
                + ("VDF-KERNEL-DOUBLE: panics at boot\n" if panics else ""),
                f"/lib/modules/{k}/modules.order": "",
            },
            # As Ubuntu's kernel hooks (/etc/kernel/postinst.d/zz-update-grub) do.
            postinst=UPDATE_GRUB,
            postrm=UPDATE_GRUB,
        ),
        _pkg(
            f"linux-headers-{k}",
            version,
            source="linux",
            section="kernel",
            files={f"/usr/src/linux-headers-{k}/Makefile": "# TEST DOUBLE\n"},
        ),
        _pkg(
            f"linux-image-{meta_flavour}",
            meta,
            source="linux-meta",
            section="kernel",
            depends=[f"linux-image-{k}"],
        ),
        _pkg(
            f"linux-headers-{meta_flavour}",
            meta,
            source="linux-meta",
            section="kernel",
            depends=[f"linux-headers-{k}"],
        ),
        _pkg(
            f"linux-{meta_flavour}",
            meta,
            source="linux-meta",
            section="kernel",
            depends=[f"linux-image-{meta_flavour} (= {meta})",
                     f"linux-headers-{meta_flavour} (= {meta})"],
        ),
    ]


def module_packages(abi, upload, upstream, respin, branch=BRANCH, broken=False):
    """linux-restricted-modules for one kernel ABI, built against one driver point release: the
    signed module needs exactly that upstream version of nvidia-kernel-common (a range, as
    Canonical writes it); the flavour's meta package follows the newest ABI."""
    b = f"{branch}-server"
    k = f"{abi}-{FLAVOUR}"
    version = f"{abi}.{upload}+{respin}"
    ko = (
        f"TEST DOUBLE nvidia.ko\nversion={upstream}\nkernel={k}\n"
        "signer=Canonical Ltd. Kernel Module Signing\n"
    )
    staged = f"/usr/lib/linux-restricted-modules-double/{k}/nvidia.ko"
    module = f"/lib/modules/{k}/kernel/nvidia-{branch}srv/nvidia.ko"
    # The real postinst links and signs the module into /lib/modules; the double copies it
    # there, so a postinst that fails leaves the kernel without it, as a real one would.
    fail = (
        f'echo "linux-restricted-modules: linking nvidia.ko for {k} failed'
        ' (TEST DOUBLE fault)" >&2\n'
        "exit 1\n"
    )
    postinst = fail if broken else f"mkdir -p {module.rsplit('/', 1)[0]}\ncp {staged} {module}\n"
    return [
        _pkg(f"linux-signatures-nvidia-{k}", version, source="linux-restricted-modules"),
        _pkg(f"linux-objects-nvidia-{b}-{k}", version, source="linux-restricted-modules"),
        _pkg(
            f"linux-modules-nvidia-{b}-{k}",
            version,
            source="linux-restricted-modules",
            section="kernel",
            postinst=postinst,
            postrm=f'if [ "$1" = remove ] || [ "$1" = purge ]; then rm -f {module}; fi\n',
            depends=[
                f"linux-image-{k} | linux-image-unsigned-{k}",
                f"linux-signatures-nvidia-{k} (= {version})",
                f"linux-objects-nvidia-{b}-{k} (= {version})",
                f"nvidia-kernel-common-{b} (<= {upstream}-1)",
                f"nvidia-kernel-common-{b} (>= {upstream})",
            ],
            files={staged: ko},
        ),
    ]


def module_meta(abi, upload, upstream, respin, branch=BRANCH, meta_flavour=FLAVOUR):
    b = f"{branch}-server"
    version = f"{abi}.{upload}+{respin}"
    return _pkg(
        f"linux-modules-nvidia-{b}-{meta_flavour}",
        version,
        source="linux-restricted-modules",
        section="kernel",
        depends=[
            f"linux-modules-nvidia-{b}-{abi}-{FLAVOUR} (= {version})",
            f"nvidia-kernel-common-{b} (>= {upstream})",
        ],
    )


# The packages of an ended branch that Canonical publishes again as transitional ones (the
# next branch's debian/control: "Transitional package for nvidia-driver-515-server", Depends on
# it alone, no version), and linux-restricted-modules' module meta ("dummy transitional
# package", packages.ubuntu.com's linux-modules-nvidia-590-generic on
# linux-modules-nvidia-595-generic).
TRANSITIONAL = ("nvidia-driver", "nvidia-kernel-source", "nvidia-dkms", "nvidia-utils",
                "libnvidia-compute", "nvidia-compute-utils", "nvidia-headless-no-dkms",
                "nvidia-kernel-common", "libnvidia-cfg1")


def transitional_packages(old_branch, new_branch, upstream, release, abi, upload):
    """Branch `old_branch`'s -server names, built from `new_branch`'s source at `upstream`, each
    depending on the same name of `new_branch`; its flavour's module meta likewise."""
    old, new = f"{old_branch}-server", f"{new_branch}-server"
    return [
        *(_pkg(f"{name}-{old}", driver_version(upstream, release),
               source=f"nvidia-graphics-drivers-{new}", depends=[f"{name}-{new}"])
          for name in TRANSITIONAL),
        _pkg(f"linux-modules-nvidia-{old}-{FLAVOUR}", f"{abi}.{upload}+1",
             source="linux-restricted-modules", section="kernel",
             depends=[f"linux-modules-nvidia-{new}-{FLAVOUR}"]),
    ]


def hwe_packages(codename, upstream):
    """The release's HWE kernel with its signed module, built against point release 2."""
    release = RELEASES[codename][0]
    abi, upload = HWE[codename]
    flavour = f"{FLAVOUR}-hwe-{release}"
    return [
        *kernel_packages(abi, upload, meta_flavour=flavour, meta_suffix=f"~{release}.1"),
        *module_packages(abi, upload, upstream, 1),
        module_meta(abi, upload, upstream, 1, meta_flavour=flavour),
    ]


def container_stack_packages(release):
    """Ubuntu's Compose v2 package name over Debian's Compose v2: the rig keeps Debian's sources
    (README), so docker.io and the plugin's binary are Debian 13's; what the double adds is the
    name the role installs on Ubuntu, depending on Debian's package that ships the plugin, and
    on Debian's docker-cli: Ubuntu's docker.io carries the CLI, Debian 13's does not."""
    return [
        _pkg(
            "docker-compose-v2",
            f"{DEBIAN_COMPOSE_UPSTREAM}-0ubuntu1~{release}.1",
            source="docker-compose-v2",
            section="admin",
            depends=[f"docker-compose (>= {DEBIAN_COMPOSE_UPSTREAM})", "docker-cli"],
        )
    ]


def unrelated_package(release, update):
    """A package outside the kernel and the driver, so a guard that stops every upgrade shows."""
    return _pkg(
        "openssl",
        f"3.0.13-0ubuntu3.{update}",
        source="openssl",
        section="utils",
        files={"/usr/share/doc/openssl/version": f"{release}.{update}\n"},
    )


SNAPSHOTS = ("first", "updates", "broken", "fixed", "ahead", "skew", "panics", "eol")
# The branch that follows BRANCH in `eol`, and its point release.
NEXT_BRANCH, NEXT_UPSTREAM = "590", "590.48.01"


def archive(codename="noble", snapshot="updates"):
    """{suite: [package]} as published at one moment (one version per package and suite, as in
    Canonical's indexes):
      first    the release suite only: kernel ABI 1, driver point release 1 (a rig's install);
      updates  -updates adds ABI 2 and point release 2 with ABI 2's module built for it (ABI
               1's module is not rebuilt: it stays built for point release 1), and the HWE
               kernel (HWE) with its module;
      broken   the same, but ABI 2's module fails in its postinst (a module that will not install);
      fixed    the same, with ABI 2's module and its meta published again (+2), installing;
      ahead    `fixed` plus kernel ABI 3 (the flavour's metas follow it) whose NVIDIA module is
               not published yet: the module meta still names ABI 2's;
      skew     `first`, and in -updates point release 2's user space alone: its modules (for any
               ABI) are not published yet, so installing it with the module metas has unmet
               dependencies (the driver's sources are published before linux-restricted-modules
               is rebuilt for them);
      panics   `fixed` plus kernel ABI 3 with its NVIDIA module published, the flavour's metas
               following it: a kernel that installs cleanly and panics at boot;
      eol      `first`, and in -updates ABI 2 and branch NEXT_BRANCH (its user space, ABI 2's
               module and the module meta), with BRANCH's packages published again as
               transitional ones depending on NEXT_BRANCH's: BRANCH reached its end of life.
    -security stays empty (a Release file only)."""
    release, kernels, drivers = RELEASES[codename]
    (abi1, up1), (abi2, up2), (abi3, up3) = kernels
    first, second = drivers
    respin = 2 if snapshot in ("fixed", "ahead", "panics") else 1
    kernel = kernel_packages(abi2, up2)
    if snapshot in ("ahead", "panics"):    # ABI 2's image and headers stay; the metas name ABI 3
        kernel = [p for p in kernel if p["name"].endswith(f"{abi2}-{FLAVOUR}")]
        kernel += kernel_packages(abi3, up3, panics=snapshot == "panics")
    updates = [
        *kernel,
        *driver_packages(second, release),
        # No module of ABI 1 for point release 2: Canonical builds linux-restricted-modules for
        # a new driver only for the kernels it publishes then, so the kernel a rig runs loses
        # its module when user space moves (APT removes it: its kernel-common range excludes the
        # new driver).
        *module_packages(abi2, up2, second, respin, broken=snapshot == "broken"),
        *([*module_packages(abi3, up3, second, 1), module_meta(abi3, up3, second, 1)]
          if snapshot == "panics" else [module_meta(abi2, up2, second, respin)]),
        *hwe_packages(codename, second),
        unrelated_package(release, 4),
    ]
    if snapshot == "skew":
        updates = [*driver_packages(second, release), unrelated_package(release, 4)]
    if snapshot == "eol":
        updates = [
            *kernel_packages(abi2, up2),
            *driver_packages(NEXT_UPSTREAM, release, branch=NEXT_BRANCH),
            *module_packages(abi2, up2, NEXT_UPSTREAM, 1, branch=NEXT_BRANCH),
            module_meta(abi2, up2, NEXT_UPSTREAM, 1, branch=NEXT_BRANCH),
            *transitional_packages(BRANCH, NEXT_BRANCH, NEXT_UPSTREAM, release, abi2, up2),
            unrelated_package(release, 4),
        ]
    return {
        codename: [
            *kernel_packages(abi1, up1),
            *driver_packages(first, release),
            *module_packages(abi1, up1, first, 1),
            module_meta(abi1, up1, first, 1),
            unrelated_package(release, 1),
            *container_stack_packages(release),
        ],
        f"{codename}-updates": [] if snapshot == "first" else updates,
        f"{codename}-security": [],
    }


# --------------------------------------------------------------------------- writing the repo


def _control(pkg):
    fields = [
        ("Package", pkg["name"]),
        ("Source", pkg["source"]),
        ("Version", pkg["version"]),
        ("Architecture", pkg["arch"]),
        ("Maintainer", "vllm-dual-fast test doubles <root@localhost>"),
        ("Depends", ", ".join(pkg["depends"])),
        ("Provides", ", ".join(pkg["provides"])),
        ("Conflicts", ", ".join(pkg["conflicts"])),
        ("Section", pkg["section"]),
        ("Modaliases", pkg.get("modaliases", "")),
        ("Priority", "optional"),
        ("Description", f"TEST DOUBLE of Ubuntu's {pkg['name']}\n drives no hardware"),
    ]
    return "".join(f"{key}: {value}\n" for key, value in fields if value)


def _build_deb(pkg, stage, pool):
    root = stage / f"{pkg['name']}_{pkg['version']}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(_control(pkg))
    for name in ("postinst", "postrm"):
        if pkg.get(name):
            script = root / "DEBIAN" / name
            script.write_text("#!/bin/sh\nset -e\n" + pkg[name])
            script.chmod(0o755)
    doc = root / "usr" / "share" / "doc" / pkg["name"] / "README.test-double"
    doc.parent.mkdir(parents=True)
    doc.write_text("TEST DOUBLE built by vllm-dual-fast's molecule/doubles/ubuntu-archive.\n")
    for path, content in pkg["files"].items():
        text, mode = content if isinstance(content, tuple) else (content, 0o644)
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)
    for path in root.rglob("*"):
        os.utime(path, (EPOCH, EPOCH), follow_symlinks=False)
    pool.mkdir(parents=True, exist_ok=True)
    deb = pool / f"{pkg['name']}_{pkg['version'].replace(':', '%3a')}_{pkg['arch']}.deb"
    subprocess.run(
        ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)],
        check=True,
        capture_output=True,
    )
    return deb


def _packages_entry(pkg, deb, outdir):
    data = deb.read_bytes()
    return (
        _control(pkg) + f"Filename: {deb.relative_to(outdir)}\nSize: {len(data)}\n"
        f"SHA256: {hashlib.sha256(data).hexdigest()}\n\n"
    )


def _release(suite, files, published):
    lines = [
        "Origin: Ubuntu (TEST DOUBLE)",
        "Label: Ubuntu (TEST DOUBLE)",
        f"Suite: {suite}",
        f"Codename: {suite}",
        "Architectures: amd64",
        f"Components: {' '.join(COMPONENTS)}",
        f"Date: {email.utils.formatdate(published, usegmt=True)}",
        "SHA256:",
    ]
    for rel, data in files.items():
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data):16d} {rel}")
    return "\n".join(lines) + "\n"


def _inputs_digest(codename):
    here = Path(__file__).read_bytes() + SMI_DOUBLE.read_bytes()
    return hashlib.sha256(here + json.dumps([codename, EPOCH]).encode()).hexdigest()


COMPONENTS = ("main", "restricted", "universe", "multiverse")


def component(pkg):
    """Canonical's: the NVIDIA driver and linux-restricted-modules are in restricted, Compose v2
    in universe."""
    if pkg["source"] == "docker-compose-v2":
        return "universe"
    restricted = pkg["source"].startswith("nvidia-graphics-drivers") or (
        pkg["source"] == "linux-restricted-modules"
    )
    return "restricted" if restricted else "main"


def _write_snapshot(work, root, suites, published):
    """One snapshot's repository. `published` (epoch seconds) dates its Release files and their
    mtimes: APT asks the server If-Modified-Since, so a later snapshot must be newer, as each
    publication of a real archive is."""
    pool = root / "pool"
    for suite, packages in suites.items():
        files = {}
        for comp in COMPONENTS:
            index = "".join(
                _packages_entry(
                    p, _build_deb(p, work / "stage" / root.parent.name / suite, pool / comp), root
                )
                for p in packages
                if component(p) == comp
            )
            rel = f"{comp}/binary-{ARCH}/Packages"
            (root / "dists" / suite / rel).parent.mkdir(parents=True)
            (root / "dists" / suite / rel).write_text(index)
            files[rel] = index.encode()
        (root / "dists" / suite / "Release").write_text(_release(suite, files, published))


def build(outdir, codename="noble"):
    """OUTDIR/<snapshot>/ubuntu/{dists,pool} for each of SNAPSHOTS, signed by one throw-away
    key (OUTDIR/ubuntu-archive-keyring.gpg): a rig's sources name .../<snapshot>/ubuntu/, and
    moving a link from `first` to `all` publishes the updates."""
    outdir = Path(outdir).resolve()
    digest = _inputs_digest(codename)
    stamp = outdir / ".build-inputs.sha256"
    if stamp.is_file() and stamp.read_text().strip() == digest:
        return f"build.py: {outdir} up to date (inputs {digest[:12]})"
    with tempfile.TemporaryDirectory(prefix="ubuntu-archive-double.") as work:
        work = Path(work)
        out = work / "out"
        for day, name in enumerate(SNAPSHOTS):
            root = out / name / "ubuntu"
            root.mkdir(parents=True)
            _write_snapshot(work, root, archive(codename, name), EPOCH + day * 86400)
        _sign(work, out)
        for day, name in enumerate(SNAPSHOTS):
            for path in (out / name / "ubuntu" / "dists").rglob("*"):
                os.utime(path, (EPOCH + day * 86400,) * 2)
        (out / ".build-inputs.sha256").write_text(digest + "\n")
        outdir.mkdir(parents=True, exist_ok=True)
        for child in outdir.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        shutil.copytree(out, outdir, dirs_exist_ok=True)
    return f"build.py: built {outdir} ({codename}: {', '.join(SNAPSHOTS)})"


def _sign(work, out):
    """A throw-away key per build; only its public half leaves the temporary directory."""
    home = work / "gnupg"
    home.mkdir(mode=0o700)
    gpg = [
        "gpg",
        "--homedir",
        str(home),
        "--batch",
        "--quiet",
        "--pinentry-mode",
        "loopback",
        "--passphrase",
        "",
    ]
    subprocess.run(
        [
            *gpg,
            "--quick-gen-key",
            "Ubuntu archive TEST DOUBLE (throw-away key)",
            "ed25519",
            "sign",
            "never",
        ],
        check=True,
        capture_output=True,
    )
    for release in out.glob("*/ubuntu/dists/*/Release"):
        subprocess.run(
            [*gpg, "--yes", "--clearsign", "-o", str(release.with_name("InRelease")), str(release)],
            check=True,
            capture_output=True,
        )
    key = subprocess.run([*gpg, "--export"], check=True, capture_output=True).stdout
    (out / "ubuntu-archive-keyring.gpg").write_bytes(key)
    subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "gpg-agent"], capture_output=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir")
    parser.add_argument("--codename", default="noble", choices=sorted(RELEASES))
    args = parser.parse_args(argv)
    print(build(args.outdir, args.codename))


if __name__ == "__main__":
    sys.exit(main())
