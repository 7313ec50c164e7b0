#!/usr/bin/env python3
"""TEST DOUBLE of Canonical's Ubuntu archive, as far as the NVIDIA -server driver and the kernel
go: a signed APT repository whose packages carry Canonical's names and dependency shapes (read
from Canonical's nvidia-graphics-drivers debian/control and `apt show` of linux-restricted-modules
packages; every known difference: README.md next to this file). The packages drive nothing: their
files are marker files that the other doubles (the kernel double, nvidia-smi) read.

    OUTDIR/ubuntu-archive-keyring.gpg          the throw-away signing key's public half (binary)
    OUTDIR/dists/<codename>[-updates]/{Release,InRelease}
    OUTDIR/dists/<suite>/main/binary-amd64/Packages
    OUTDIR/pool/main/*.deb

Two suites model "a good install, then months later":
  <codename>          kernel ABI 1 and driver point release 1 (the rig's install)
  <codename>-updates  kernel ABI 2 and driver point release 2, each kernel's module package built
                      against the driver in the archive at its build: ABI 2's module needs point
                      release 2; ABI 1's module is respun for point release 2 (`+2`), as
                      Canonical respins linux-restricted-modules for kernels still in the archive.

Usage: build.py OUTDIR [--codename noble] [--broken-module ABI]
  --broken-module ABI   that ABI's module package fails in its postinst (a module that does not
                        install), for the maintenance run's fault test.
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
# (codename, release, kernel ABIs (ABI, kernel upload number), driver point releases).
RELEASES = {
    "noble": ("24.04", [("6.8.0-50", 51), ("6.8.0-51", 52)], ["580.95.05", "580.105.08"]),
    "jammy": ("22.04", [("5.15.0-126", 136), ("5.15.0-127", 137)], ["580.95.05", "580.105.08"]),
}
FLAVOUR = "generic"
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
    arch=ARCH,
    source=None,
    section="misc",
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
        "source": source or name,
        "section": section,
    }


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
        _pkg(f"nvidia-compute-utils-{b}", v, source=src, depends=[f"libnvidia-compute-{b}"]),
        _pkg(
            f"nvidia-utils-{b}",
            v,
            source=src,
            depends=[exact_common],
            provides=["nvidia-utils", "nvidia-smi"],
            conflicts=["nvidia-utils", "nvidia-smi"],
            files={f"/usr/share/doc/nvidia-utils-{b}/version": f"{upstream}\n"},
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
    ]


def kernel_packages(abi, upload):
    """One kernel ABI of the flavour, and the flavour's meta packages pointing at it (the meta
    packages are what move a rig to the next ABI: each ABI is a new package name)."""
    k = f"{abi}-{FLAVOUR}"
    version = f"{abi}.{upload}"
    meta = f"{abi.replace('-', '.')}.{upload}"
    return [
        _pkg(
            f"linux-image-{k}",
            version,
            source="linux-signed",
            section="kernel",
            files={
                f"/boot/vmlinuz-{k}": f"TEST DOUBLE kernel {k}\n",
                f"/lib/modules/{k}/modules.order": "",
            },
        ),
        _pkg(
            f"linux-headers-{k}",
            version,
            source="linux",
            section="kernel",
            files={f"/usr/src/linux-headers-{k}/Makefile": "# TEST DOUBLE\n"},
        ),
        _pkg(
            f"linux-image-{FLAVOUR}",
            meta,
            source="linux-meta",
            section="kernel",
            depends=[f"linux-image-{k}"],
        ),
        _pkg(
            f"linux-headers-{FLAVOUR}",
            meta,
            source="linux-meta",
            section="kernel",
            depends=[f"linux-headers-{k}"],
        ),
        _pkg(
            f"linux-{FLAVOUR}",
            meta,
            source="linux-meta",
            section="kernel",
            depends=[f"linux-image-{FLAVOUR} (= {meta})", f"linux-headers-{FLAVOUR} (= {meta})"],
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
    fail = (
        (
            f"echo \"modprobe: ERROR: could not insert 'nvidia': Key was rejected by service "
            f'({k}, TEST DOUBLE fault)" >&2\nexit 1\n'
        )
        if broken
        else ""
    )
    return [
        _pkg(f"linux-signatures-nvidia-{k}", version, source="linux-restricted-modules"),
        _pkg(f"linux-objects-nvidia-{b}-{k}", version, source="linux-restricted-modules"),
        _pkg(
            f"linux-modules-nvidia-{b}-{k}",
            version,
            source="linux-restricted-modules",
            section="kernel",
            postinst=fail,
            depends=[
                f"linux-image-{k} | linux-image-unsigned-{k}",
                f"linux-signatures-nvidia-{k} (= {version})",
                f"linux-objects-nvidia-{b}-{k} (= {version})",
                f"nvidia-kernel-common-{b} (<= {upstream}-1)",
                f"nvidia-kernel-common-{b} (>= {upstream})",
            ],
            files={f"/lib/modules/{k}/kernel/nvidia-{branch}srv/nvidia.ko": ko},
        ),
    ]


def module_meta(abi, upload, upstream, respin, branch=BRANCH):
    b = f"{branch}-server"
    version = f"{abi}.{upload}+{respin}"
    return _pkg(
        f"linux-modules-nvidia-{b}-{FLAVOUR}",
        version,
        source="linux-restricted-modules",
        section="kernel",
        depends=[
            f"linux-modules-nvidia-{b}-{abi}-{FLAVOUR} (= {version})",
            f"nvidia-kernel-common-{b} (>= {upstream})",
        ],
    )


def unrelated_package(release, update):
    """A package outside the kernel and the driver, so a guard that stops every upgrade shows."""
    return _pkg(
        "openssl",
        f"3.0.13-0ubuntu3.{update}",
        source="openssl",
        section="utils",
        files={"/usr/share/doc/openssl/version": f"{release}.{update}\n"},
    )


def archive(codename="noble", broken_module=None):
    """{suite: [package]} for the two suites described at the top."""
    release, kernels, drivers = RELEASES[codename]
    (abi1, up1), (abi2, up2) = kernels
    first, second = drivers
    return {
        codename: [
            *kernel_packages(abi1, up1),
            *driver_packages(first, release),
            *module_packages(abi1, up1, first, 1, broken=broken_module == abi1),
            module_meta(abi1, up1, first, 1),
            unrelated_package(release, 1),
        ],
        f"{codename}-updates": [
            *kernel_packages(abi2, up2),
            *driver_packages(second, release),
            *module_packages(abi1, up1, second, 2),
            *module_packages(abi2, up2, second, 1, broken=broken_module == abi2),
            module_meta(abi2, up2, second, 1),
            unrelated_package(release, 4),
        ],
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
        ("Priority", "optional"),
        ("Description", f"TEST DOUBLE of Ubuntu's {pkg['name']}\n drives no hardware"),
    ]
    return "".join(f"{key}: {value}\n" for key, value in fields if value)


def _build_deb(pkg, stage, pool):
    root = stage / f"{pkg['name']}_{pkg['version']}"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(_control(pkg))
    if pkg["postinst"]:
        script = root / "DEBIAN" / "postinst"
        script.write_text("#!/bin/sh\nset -e\n" + pkg["postinst"])
        script.chmod(0o755)
    doc = root / "usr" / "share" / "doc" / pkg["name"] / "README.test-double"
    doc.parent.mkdir(parents=True)
    doc.write_text("TEST DOUBLE built by vllm-dual-fast's molecule/doubles/ubuntu-archive.\n")
    for path, text in pkg["files"].items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    for path in root.rglob("*"):
        os.utime(path, (EPOCH, EPOCH), follow_symlinks=False)
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


def _release(suite, files):
    lines = [
        "Origin: Ubuntu (TEST DOUBLE)",
        "Label: Ubuntu (TEST DOUBLE)",
        f"Suite: {suite}",
        f"Codename: {suite}",
        "Architectures: amd64",
        "Components: main",
        f"Date: {email.utils.formatdate(EPOCH, usegmt=True)}",
        "SHA256:",
    ]
    for rel, data in files.items():
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data):16d} {rel}")
    return "\n".join(lines) + "\n"


def _inputs_digest(codename, broken_module):
    here = Path(__file__).read_bytes()
    return hashlib.sha256(here + json.dumps([codename, broken_module, EPOCH]).encode()).hexdigest()


def build(outdir, codename="noble", broken_module=None):
    outdir = Path(outdir).resolve()
    digest = _inputs_digest(codename, broken_module)
    stamp = outdir / ".build-inputs.sha256"
    if stamp.is_file() and stamp.read_text().strip() == digest:
        return f"build.py: {outdir} up to date (inputs {digest[:12]})"
    with tempfile.TemporaryDirectory(prefix="ubuntu-archive-double.") as work:
        work = Path(work)
        out = work / "out"
        pool = out / "pool" / "main"
        pool.mkdir(parents=True)
        for suite, packages in archive(codename, broken_module).items():
            index = "".join(
                _packages_entry(p, _build_deb(p, work / "stage" / suite, pool), out)
                for p in packages
            )
            rel = f"main/binary-{ARCH}/Packages"
            (out / "dists" / suite / rel).parent.mkdir(parents=True)
            (out / "dists" / suite / rel).write_text(index)
            (out / "dists" / suite / "Release").write_text(_release(suite, {rel: index.encode()}))
        _sign(work, out)
        (out / ".build-inputs.sha256").write_text(digest + "\n")
        outdir.mkdir(parents=True, exist_ok=True)
        for child in outdir.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
        shutil.copytree(out, outdir, dirs_exist_ok=True)
    return f"build.py: built {outdir} ({codename}, broken module: {broken_module or 'none'})"


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
    for release in (out / "dists").glob("*/Release"):
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
    parser.add_argument("--broken-module", metavar="ABI", default=None)
    args = parser.parse_args(argv)
    print(build(args.outdir, args.codename, args.broken_module))


if __name__ == "__main__":
    sys.exit(main())
