"""Real FlashInfer releases for the patcher tests, downloaded from the package index on first use.

Archives are kept in ``${VDF_CACHE:-~/.cache/vllm-dual-fast}/flashinfer/`` (never in the repository)
and unpacked once, as an installed tree (``flashinfer/`` plus its ``.dist-info/METADATA``), under
``trees/<version>/`` there. Only the package's Python files are unpacked: the patcher reads nothing
else and ``import flashinfer`` needs nothing else. Source-only releases are unpacked, never built.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

# Releases the patcher must handle (flashinfer-python on the package index). 0.2.14.post1 and 0.4.1
# are published as source archives only.
RELEASES = (
    "0.2.14.post1",
    "0.4.1",
    "0.5.3",
    "0.6.16.post3",
    "0.6.18.post1",
    "0.7.2.post1",
    "0.7.4",
)
TARGETS = ("decode.py", "prefill.py", "sparse.py", "pod.py")


def cache_dir() -> Path:
    root = os.environ.get("VDF_CACHE") or os.path.expanduser("~/.cache/vllm-dual-fast")
    path = Path(root) / "flashinfer"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _archive(version: str) -> Path | None:
    for pattern in (f"flashinfer_python-{version}-*.whl", f"flashinfer_python-{version}.tar.gz"):
        hits = sorted(glob.glob(str(cache_dir() / pattern)))
        if hits:
            return Path(hits[0])
    return None


def _pip_download(version: str, extra: list[str], env: dict | None = None) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(cache_dir())]
    subprocess.run(
        [*cmd, *extra, f"flashinfer-python=={version}"],
        check=True,
        env=env,
        capture_output=True,
    )


def download(version: str) -> Path:
    """The release's archive in the cache, fetched with `pip download --no-deps` if missing."""
    found = _archive(version)
    if found:
        return found
    try:
        _pip_download(version, ["--only-binary", ":all:"])
    except subprocess.CalledProcessError:
        # A source-only release. pip prepares metadata even for `download`, and with build
        # isolation it installs the build requirements: some are gone from the index
        # (0.4.1: apache-tvm-ffi==0.1.0b15), others are slow. So: no build isolation, a current
        # setuptools on the path (the sources' pyproject needs one). Nothing is built.
        tools = cache_dir() / "_buildtools"
        if not (tools / "setuptools").is_dir():
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "-q", "--target", str(tools),
                 "setuptools"],
                check=True,
                stdout=subprocess.PIPE,
            )
        env = dict(os.environ, PYTHONPATH=str(tools))
        _pip_download(version, ["--no-build-isolation"], env)
    found = _archive(version)
    assert found, f"pip download left no archive for flashinfer-python=={version}"
    return found


def _unpack_wheel(archive: Path, dest: Path) -> None:
    with zipfile.ZipFile(archive) as zf:
        for name in zf.namelist():
            is_py = name.startswith("flashinfer/") and name.endswith(".py")
            if is_py or (".dist-info/" in name and name.endswith("/METADATA")):
                zf.extract(name, dest)


def _unpack_sdist(archive: Path, version: str, dest: Path) -> None:
    with tarfile.open(archive) as tf:
        for member in tf.getmembers():
            parts = member.name.split("/", 1)
            if len(parts) != 2 or not member.isfile():
                continue
            rel = parts[1]
            if rel.startswith("flashinfer/") and rel.endswith(".py"):
                target = dest / rel
            elif rel == "PKG-INFO":  # same format as an installed wheel's METADATA
                target = dest / f"flashinfer_python-{version}.dist-info" / "METADATA"
            else:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with tf.extractfile(member) as src:
                target.write_bytes(src.read())


@contextlib.contextmanager
def _cache_lock():
    # Two pytest processes (or xdist workers) must not unpack the same release at once.
    with open(cache_dir() / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def release_tree(version: str) -> Path:
    """Site-packages-like folder holding `flashinfer/` of this release (read-only reference)."""
    tree = cache_dir() / "trees" / version
    if (tree / ".complete").exists():
        return tree
    with _cache_lock():
        if (tree / ".complete").exists():
            return tree
        archive = download(version)
        tmp = tree.with_name(version + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if archive.suffix == ".whl":
            _unpack_wheel(archive, tmp)
        else:
            _unpack_sdist(archive, version, tmp)
        assert (tmp / "flashinfer" / "decode.py").is_file(), f"{archive}: no flashinfer/decode.py"
        (tmp / ".complete").write_text(version)
        shutil.rmtree(tree, ignore_errors=True)
        os.replace(tmp, tree)
    return tree


@functools.cache
def _copied(version: str) -> frozenset:
    """Files a test looks at, copied for real; everything else is hard-linked (0.7.4 holds 130 MB
    of Python files). The patcher only ever replaces files by rename, never writes in place."""
    src = release_tree(version)
    return frozenset(
        str(p.relative_to(src))
        for p in src.rglob("*.py")
        if p.name in TARGETS or b"pin_memory" in p.read_bytes()
    )


def make_tree(version: str, dest: Path) -> Path:
    """A private, writable copy of the release under `dest`; returns its `flashinfer` folder."""
    src = release_tree(version)
    for path in src.rglob("*"):
        if path.name == ".complete" or path.is_dir():
            continue
        target = dest / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        if str(path.relative_to(src)) in _copied(version):
            shutil.copyfile(path, target)
            continue
        try:
            os.link(path, target)
        except OSError:
            os.symlink(path, target)
    return dest / "flashinfer"


def pinned_files(lib_root: Path) -> dict[str, bytes]:
    """Every file in the package whose text holds `pin_memory=True`, with its bytes."""
    out = {}
    for path in lib_root.rglob("*.py"):
        data = path.read_bytes()
        if b"pin_memory=True" in data:
            out[str(path.relative_to(lib_root))] = data
    return out


# ------------------------------------------------------------------------------------------------
# Running the patcher under test

REPO = Path(__file__).resolve().parent.parent
PATCHER = REPO / "files" / "patcher.py"


def load_patcher():
    """files/patcher.py as a module (it is a standalone script, not part of a package)."""
    spec = importlib.util.spec_from_file_location("fi_pinq_patcher", PATCHER)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while building classes
    spec.loader.exec_module(module)
    return module


def run_patcher(*args: str, env: dict | None = None, timeout: float = 60):
    """Run the CLI with --json; returns (exit code, parsed JSON or None, completed process)."""
    proc = subprocess.run(
        [sys.executable, str(PATCHER), *args, "--json"],
        capture_output=True,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = None
    return proc.returncode, result, proc


def snapshot(path: Path) -> tuple:
    """What "unchanged" means for a file: its bytes, mtime, inode and mode."""
    st = path.stat()
    return (path.read_bytes(), st.st_mtime_ns, st.st_ino, st.st_mode)


def fetch_all() -> None:
    """Downloads every release the tests use, one line of progress each (make pytest runs this
    first, so the first run does not sit silent inside pytest for minutes)."""
    import time

    for n, version in enumerate(RELEASES, 1):
        cached = _archive(version)
        started = time.monotonic()
        if not cached:
            print(f"flashinfer releases: {n}/{len(RELEASES)} downloading {version} ...", flush=True)
        archive = download(version)
        size_mb = archive.stat().st_size / 1e6
        how = "cached" if cached else f"downloaded in {time.monotonic() - started:.0f} s"
        print(f"flashinfer releases: {n}/{len(RELEASES)} {version}: {size_mb:.0f} MB, {how}",
              flush=True)


if __name__ == "__main__":
    fetch_all()
