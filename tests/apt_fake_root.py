"""The real APT resolver, on a fake root: a dpkg status file the test writes and sources that
point at a repository double on disk (file: URIs, signed). What `apt-get -s` says it would
install, upgrade or remove is applied to the status file, so a sequence of runs (install, then
a nightly dist-upgrade, then a maintenance run) is followed the way APT itself decides it.
No package is unpacked: this answers "what would APT do with these holds", nothing more."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

_ACTION = re.compile(r"^(Inst|Remv|Purg) (\S+) (?:\[(\S+)\] )?(?:\((\S+))?")


def _stanzas(text):
    for block in text.strip().split("\n\n"):
        fields, name = {}, None
        for line in block.splitlines():
            if line[:1] in (" ", "\t") and name:
                fields[name] += "\n" + line
                continue
            name, _, value = line.partition(":")
            fields[name] = value.strip()
        if fields.get("Package"):
            yield fields


class AptRoot:
    """APT confined to `root`; `archive` is the Ubuntu archive double's OUTDIR (its `snapshot`
    is used), `suites` the enabled suites. Another `distribution` folder is a test's own unsigned
    archive, trusted as it is (the Ubuntu double's is always checked against its key)."""

    def __init__(
        self, root: Path, archive: Path, suites, snapshot="updates", distribution="ubuntu"
    ):
        self.root = Path(root)
        ubuntu = distribution == "ubuntu"
        self.key = Path(archive) / "ubuntu-archive-keyring.gpg" if ubuntu else None
        self.archive = Path(archive) / snapshot / distribution
        self.status = self.root / "var/lib/dpkg/status"
        for sub in (
            "etc/apt/apt.conf.d",
            "etc/apt/preferences.d",
            "etc/apt/sources.list.d",
            "etc/apt/trusted.gpg.d",
            "var/lib/apt/lists/partial",
            "var/cache/apt/archives/partial",
            "var/lib/dpkg",
            "var/log/apt",
        ):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.status.touch()
        self.config = self.root / "apt.conf"
        self.config.write_text(
            f'Dir "{self.root}/";\n'
            f'Dir::State::status "{self.status}";\n'
            'Dir::Etc::main "none"; Dir::Etc::Parts "apt.conf.d";\n'
            'APT::Architecture "amd64"; APT::Architectures { "amd64"; };\n'
            'Debug::NoLocking "true"; APT::Get::Assume-Yes "true";\n'
            'APT::Install-Recommends "false";\n'
        )
        self.set_suites(suites)

    def set_suites(self, suites):
        trust = f"signed-by={self.key}" if self.key else "trusted=yes"
        (self.root / "etc/apt/sources.list").write_text(
            "".join(
                f"deb [{trust}] file:{self.archive} {suite} main restricted\n" for suite in suites
            )
        )
        self.apt("update")

    def apt(self, *args):
        proc = subprocess.run(
            ["apt-get", *args],
            env={"APT_CONFIG": str(self.config), "PATH": "/usr/bin:/bin", "LC_ALL": "C"},
            capture_output=True,
            text=True,
            timeout=120,
        )
        if proc.returncode != 0:
            raise AssertionError(f"apt-get {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def _available(self):
        versions = {}
        for lists in (self.root / "var/lib/apt/lists").glob("*_Packages"):
            for fields in _stanzas(lists.read_text()):
                versions[(fields["Package"], fields["Version"])] = fields
        return versions

    def installed(self):
        """{name: (version, held)} of what the status file says is installed."""
        out = {}
        for fields in _stanzas(self.status.read_text()):
            want, _, state = fields["Status"].split()
            if state == "installed":
                out[fields["Package"]] = (fields["Version"], want == "hold")
        return out

    def _write(self, entries):
        keep = (
            "Package",
            "Status",
            "Priority",
            "Section",
            "Maintainer",
            "Architecture",
            "Source",
            "Version",
            "Depends",
            "Provides",
            "Conflicts",
            "Description",
        )
        self.status.write_text(
            "".join(
                "".join(f"{k}: {f[k]}\n" for k in keep if k in f) + "\n"
                for _, f in sorted(entries.items())
            )
        )

    def _entries(self):
        return {f["Package"]: f for f in _stanzas(self.status.read_text())}

    def run(self, *args):
        """`apt-get -s ARGS`, then the status file as APT would leave it; returns the actions."""
        out = self.apt("-s", *args)
        actions = [m.groups() for m in map(_ACTION.match, out.splitlines()) if m]
        available, entries = self._available(), self._entries()
        for verb, name, _old, new in actions:
            if verb in ("Remv", "Purg"):
                entries.pop(name, None)
                continue
            held = entries.get(name, {}).get("Status", "").startswith("hold")
            fields = dict(available[(name, new)])
            fields["Status"] = f"{'hold' if held else 'install'} ok installed"
            entries[name] = fields
        self._write(entries)
        return actions

    def hold(self, names, held=True):
        entries = self._entries()
        for name in names:
            if name in entries:
                entries[name]["Status"] = f"{'hold' if held else 'install'} ok installed"
        self._write(entries)

    def held(self):
        return sorted(name for name, (_, held) in self.installed().items() if held)
