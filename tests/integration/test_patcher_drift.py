"""Drift guard and edge cases, by mutating real FlashInfer files (0.7.2.post1, what vLLM pins)."""

from __future__ import annotations

import os
import re
import sys

import pytest
from flashinfer_releases import load_patcher, make_tree, run_patcher, snapshot

VERSION = "0.7.2.post1"
PIN = b"pin_memory=True"


@pytest.fixture()
def lib(tmp_path):
    return make_tree(VERSION, tmp_path / "site")


def nth_pin(data: bytes, n: int = 0) -> int:
    """Offset of the n-th `pin_memory=True` that belongs to a target allocation."""
    starts = [m.start() for m in re.finditer(rb"_pin_memory_int_workspace_buffer\w* = torch", data)]
    return data.index(PIN, starts[n])


def line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def assert_drift(lib, *args, mentions=()):
    """Exit 2, a message naming decode.py, and decode.py untouched."""
    decode = lib / "decode.py"
    before = snapshot(decode)
    rc, res, proc = run_patcher("--lib-root", str(lib), *args)
    assert rc == 2, proc.stdout + proc.stderr
    assert res["status"] == "drift"
    assert "decode.py" in res["message"]
    for word in mentions:
        assert word in res["message"], res["message"]
    assert snapshot(decode) == before, "a drifted file is left byte for byte"
    return res["message"]


def mutate(path, old: bytes, new: bytes, at: int) -> None:
    data = path.read_bytes()
    assert data[at : at + len(old)] == old
    path.write_bytes(data[:at] + new + data[at + len(old) :])


def test_pin_memory_as_a_name_is_drift(lib):
    data = (lib / "decode.py").read_bytes()
    at = nth_pin(data, 1)
    mutate(lib / "decode.py", PIN, b"pin_memory=pin", at)
    message = assert_drift(lib, mentions=("pin_memory=pin", "literal True or False"))
    assert f"line {line_of(data, at)}" in message


def test_kwargs_in_target_is_drift(lib):
    data = (lib / "decode.py").read_bytes()
    mutate(lib / "decode.py", PIN, b"**_kw", nth_pin(data))
    assert_drift(lib, mentions=("**",))


def test_half_patched_without_marker_is_drift(lib):
    data = (lib / "decode.py").read_bytes()
    mutate(lib / "decode.py", PIN, b"pin_memory=False", nth_pin(data))
    assert_drift(lib, mentions=("half-patched",))
    assert_drift(lib, "--check", mentions=("half-patched",))


def test_marker_with_a_pinned_target_left_is_drift(lib):
    assert run_patcher("--lib-root", str(lib))[0] == 0
    data = (lib / "decode.py").read_bytes()
    first = data.index(b"pin_memory=False", nth_pin_start(data))
    mutate(lib / "decode.py", b"pin_memory=False", PIN, first)
    assert_drift(lib, mentions=("half-patched", "pin_memory=True left"))
    assert_drift(lib, "--revert", mentions=("half-patched",))


def nth_pin_start(data: bytes) -> int:
    return data.index(b"_pin_memory_int_workspace_buffer = torch")


def test_marker_that_no_longer_matches_is_drift(lib):
    assert run_patcher("--lib-root", str(lib))[0] == 0
    decode = lib / "decode.py"
    decode.write_bytes(b"# a line someone added\n" + decode.read_bytes())  # lines shift by one
    assert_drift(lib, mentions=("marker records lines", "expected them to match"))
    assert_drift(lib, "--revert", mentions=("marker records lines",))


def test_comment_inside_target_call_fails_the_text_count(lib):
    data = (lib / "decode.py").read_bytes()
    at = nth_pin(data)
    mutate(lib / "decode.py", PIN, PIN + b",  # was pin_memory=True", at)
    assert_drift(lib, mentions=("2 pin_memory=True",))


def test_read_only_file_is_refused(lib):
    decode = lib / "decode.py"
    decode.chmod(0o444)
    assert_drift(lib, mentions=("not writable", "nothing written"))
    assert run_patcher("--lib-root", str(lib), "--check")[0] == 3, "--check needs no write"


def test_read_only_tree_is_refused_but_a_patched_one_is_fine(lib):
    lib.chmod(0o555)
    try:
        assert_drift(lib, mentions=("not writable",))
        assert not (lib / ".fi-pinq.lock").exists(), "refused before taking the lock"
        lib.chmod(0o755)
        assert run_patcher("--lib-root", str(lib))[0] == 0
        lib.chmod(0o555)
        before = snapshot(lib / "decode.py")
        rc, res, _ = run_patcher("--lib-root", str(lib))
        assert (rc, res["status"]) == (0, "already-patched")
        assert snapshot(lib / "decode.py") == before
    finally:
        lib.chmod(0o755)


def test_missing_decode_is_drift(lib):
    (lib / "decode.py").unlink()
    rc, res, _ = run_patcher("--lib-root", str(lib))
    assert rc == 2
    assert "decode.py not found" in res["message"]


def test_other_targets_missing_are_skipped(lib):
    (lib / "pod.py").unlink()
    rc, res, _ = run_patcher("--lib-root", str(lib), "--all")
    assert rc == 0
    assert {f["name"]: f["status"] for f in res["files"]}["pod.py"] == "absent"
    assert b"# fi-pinq:" in (lib / "sparse.py").read_bytes()


def test_crlf_is_patched_and_kept(lib):
    decode = lib / "decode.py"
    original = decode.read_bytes().replace(b"\n", b"\r\n")
    decode.write_bytes(original)
    rc, res, _ = run_patcher("--lib-root", str(lib))
    assert (rc, res["status"]) == (0, "patched")
    patched = decode.read_bytes()
    assert patched.count(b"\n") == patched.count(b"\r\n") == original.count(b"\n") + 1
    body = patched[: patched.rindex(b"# fi-pinq:")]
    assert body.count(b"pin_memory=False") - original.count(b"pin_memory=False") == 2
    assert body.replace(b"pin_memory=False", PIN) == original
    compile(patched, "decode.py", "exec")
    assert run_patcher("--lib-root", str(lib))[1]["status"] == "already-patched"
    assert run_patcher("--lib-root", str(lib), "--revert")[0] == 0
    assert decode.read_bytes() == original


def test_no_trailing_newline_round_trips(lib):
    decode = lib / "decode.py"
    original = decode.read_bytes().rstrip(b"\n")
    decode.write_bytes(original)
    assert run_patcher("--lib-root", str(lib))[0] == 0
    assert decode.read_bytes().endswith(b"\n")
    assert run_patcher("--lib-root", str(lib))[1]["status"] == "already-patched"
    assert run_patcher("--lib-root", str(lib), "--revert")[0] == 0
    assert decode.read_bytes() == original


def test_non_target_pin_memory_beside_targets_is_left(lib):
    decode = lib / "decode.py"
    data = decode.read_bytes()
    stmt_end = data.index(b")\n", nth_pin(data)) + 2
    extra = b"        self._other_buf = torch.empty((8,), dtype=torch.uint8, pin_memory=True)\n"
    decode.write_bytes(data[:stmt_end] + extra + data[stmt_end:])
    rc, res, _ = run_patcher("--lib-root", str(lib))
    assert (rc, res["status"]) == (0, "patched")
    patched = decode.read_bytes()
    assert extra in patched
    assert patched.count(PIN) == data.count(PIN) + 1 - 2


def test_upstream_fixed_writes_nothing(lib):
    decode = lib / "decode.py"
    decode.write_bytes(decode.read_bytes().replace(PIN, b"pin_memory=False"))
    before = snapshot(decode)
    rc, res, _ = run_patcher("--lib-root", str(lib))
    assert (rc, res["status"]) == (0, "upstream-fixed")
    assert run_patcher("--lib-root", str(lib), "--check")[0] == 0
    assert snapshot(decode) == before


def test_check_on_unpatched_exits_3_and_writes_nothing(lib):
    before = snapshot(lib / "decode.py")
    rc, res, _ = run_patcher("--lib-root", str(lib), "--check")
    assert (rc, res["status"]) == (3, "unpatched")
    assert [a["pinned"] for a in res["files"][0]["allocations"]] == [True, True]
    assert snapshot(lib / "decode.py") == before


def test_env_selects_lib_root_and_all(lib):
    env = {"FI_PINQ_LIB_ROOT": str(lib), "FI_PINQ_LIB_ALL": "1"}
    rc, res, _ = run_patcher("--check", env=env)
    assert rc == 3
    assert res["lib_root"] == str(lib)
    assert len(res["files"]) == 4


def test_flashinfer_absent_exits_0(tmp_path):
    # -S: no site-packages, so no flashinfer whatever this venv holds.
    import subprocess

    from flashinfer_releases import PATCHER

    env = {k: v for k, v in os.environ.items() if not k.startswith("FI_PINQ")}
    proc = subprocess.run(
        [sys.executable, "-S", str(PATCHER), "--json"], capture_output=True, env=env, cwd=tmp_path
    )
    assert proc.returncode == 0
    assert b'"status": "absent"' in proc.stdout


def test_locating_does_not_import_flashinfer(lib, monkeypatch):
    patcher = load_patcher()
    monkeypatch.delenv("FI_PINQ_LIB_ROOT", raising=False)
    monkeypatch.syspath_prepend(str(lib.parent))
    root, explicit = patcher.locate_lib_root(None)
    assert (root, explicit) == (str(lib), False)
    assert "flashinfer" not in sys.modules
    assert patcher.read_version(root) == VERSION


def test_text_output_is_one_line_per_file_and_a_summary(lib):
    import subprocess

    from flashinfer_releases import PATCHER

    proc = subprocess.run(
        [sys.executable, str(PATCHER), "--lib-root", str(lib)], capture_output=True, text=True
    )
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0
    assert len(lines) == 2
    assert lines[-1] == f"fi-pinq: patched decode.py (2 allocations) flashinfer {VERSION}"


def test_mode_and_owner_are_kept(lib):
    decode = lib / "decode.py"
    decode.chmod(0o640)
    owner = (1234, 2345) if os.geteuid() == 0 else (os.getuid(), os.getgid())
    os.chown(decode, *owner)
    old_inode = decode.stat().st_ino
    assert run_patcher("--lib-root", str(lib))[0] == 0
    st = decode.stat()
    assert st.st_ino != old_inode, "replaced by rename, not written in place"
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (*owner, 0o640)


def _in_read_only_mount(folder, argv):
    """Run argv in a private mount namespace where `folder` is bind-mounted read-only."""
    import shlex
    import subprocess

    script = f"mount --bind -o ro {shlex.quote(str(folder))} {shlex.quote(str(folder))} && "
    script += " ".join(shlex.quote(str(a)) for a in argv)
    return subprocess.run(["unshare", "--mount", "sh", "-c", script], capture_output=True)


def test_read_only_file_system(lib):
    import shutil
    import subprocess

    from flashinfer_releases import PATCHER

    if not shutil.which("unshare") or subprocess.run(["unshare", "--mount", "true"]).returncode:
        pytest.skip("no private mount namespaces here (needs root): covered by mode-bit tests")
    site = lib.parent
    before = snapshot(lib / "decode.py")
    argv = [sys.executable, PATCHER, "--lib-root", lib, "--json"]
    proc = _in_read_only_mount(site, argv)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert b"read-only file system" in proc.stdout
    assert snapshot(lib / "decode.py") == before
    assert _in_read_only_mount(site, [*argv, "--check"]).returncode == 3

    assert run_patcher("--lib-root", str(lib))[0] == 0
    proc = _in_read_only_mount(site, argv)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert b'"status": "already-patched"' in proc.stdout
