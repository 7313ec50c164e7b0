"""files/install.sh, the container hook: one line, non-zero on anything but success."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from flashinfer_releases import REPO, make_tree, snapshot

VERSION = "0.7.2.post1"


@pytest.fixture()
def patch_dir(tmp_path):
    """patcher.py + install.sh in a folder with no write bits, like the read-only mount."""
    folder = tmp_path / "vdf-patches"
    folder.mkdir()
    for name in ("patcher.py", "install.sh"):
        shutil.copy2(REPO / "files" / name, folder / name)
    folder.chmod(0o555)
    yield folder
    folder.chmod(0o755)


def bin_dir(tmp_path, python_name):
    """PATH holding only what the hook needs, the interpreter under the given name."""
    path = tmp_path / f"bin-{python_name}"
    path.mkdir()
    os.symlink(sys.executable, path / python_name)
    for tool in ("dirname", "tail"):
        os.symlink(shutil.which(tool), path / tool)
    return path


def hook(patch_dir, lib, path, script="/bin/sh {}"):
    env = {"PATH": str(path), "FI_PINQ_LIB_ROOT": str(lib), "HOME": "/nonexistent"}
    cmd = script.format(patch_dir / "install.sh")
    return subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, env=env)


@pytest.mark.parametrize("python_name", ["python3", "python"])
def test_hook_patches_and_prints_one_line(tmp_path, patch_dir, python_name):
    lib = make_tree(VERSION, tmp_path / "site")
    listing = sorted(os.listdir(patch_dir))
    path = bin_dir(tmp_path, python_name)
    proc = hook(patch_dir, lib, path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"fi-pinq: patched decode.py (2 allocations) flashinfer {VERSION}\n"
    assert b"# fi-pinq:" in (lib / "decode.py").read_bytes()
    assert sorted(os.listdir(patch_dir)) == listing, "nothing written next to the hook"

    proc = hook(patch_dir, lib, path)
    assert proc.returncode == 0
    assert proc.stdout.startswith("fi-pinq: already-patched decode.py")


def test_hook_passes_lib_all(tmp_path, patch_dir):
    lib = make_tree(VERSION, tmp_path / "site")
    proc = hook(patch_dir, lib, bin_dir(tmp_path, "python3"), "FI_PINQ_LIB_ALL=1 /bin/sh {}")
    assert proc.returncode == 0, proc.stderr
    assert "pod.py (4 allocations)" in proc.stdout
    assert b"# fi-pinq:" in (lib / "prefill.py").read_bytes()


def test_hook_fails_on_drift_and_stops_a_set_e_entrypoint(tmp_path, patch_dir):
    lib = make_tree(VERSION, tmp_path / "site")
    decode = lib / "decode.py"
    decode.write_bytes(decode.read_bytes().replace(b"pin_memory=True", b"pin_memory=PIN", 1))
    before = snapshot(decode)
    proc = hook(patch_dir, lib, bin_dir(tmp_path, "python3"), "set -e; /bin/sh {}; echo SERVING")
    assert proc.returncode == 2
    assert "SERVING" not in proc.stdout
    assert proc.stderr.count("\n") == 1
    assert proc.stderr.startswith("fi-pinq: FAILED (exit 2): drift: decode.py line ")
    assert snapshot(decode) == before


def test_hook_without_python_fails(tmp_path, patch_dir):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    os.symlink(shutil.which("dirname"), empty / "dirname")
    proc = hook(patch_dir, tmp_path, empty)
    assert proc.returncode == 127
    assert "no python3 or python" in proc.stderr


def test_hook_from_a_read_only_mount(tmp_path, patch_dir):
    """The patch folder really mounted read-only (a private mount namespace), site-packages not."""
    if not shutil.which("unshare") or subprocess.run(["unshare", "--mount", "true"]).returncode:
        pytest.skip("no private mount namespaces here (needs root): mode-bit test covers it")
    lib = make_tree(VERSION, tmp_path / "site")
    path = bin_dir(tmp_path, "python3")
    folder = str(patch_dir)
    mount = f"mount --bind -o ro {folder} {folder} && /bin/sh {folder}/install.sh"
    env = {"PATH": f"{path}:/usr/sbin:/usr/bin:/sbin:/bin", "FI_PINQ_LIB_ROOT": str(lib)}
    proc = subprocess.run(
        ["unshare", "--mount", "/bin/sh", "-c", mount], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("fi-pinq: patched decode.py (2 allocations)")
