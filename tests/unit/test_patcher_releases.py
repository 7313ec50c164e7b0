"""files/patcher.py against real FlashInfer releases from the package index."""

from __future__ import annotations

import py_compile
import re

import pytest
from flashinfer_releases import RELEASES, TARGETS, make_tree, pinned_files, run_patcher, snapshot

# Pinned target allocations per file, counted by reading each release's sources
# (torch.empty(..., pin_memory=True) assigned to self._pin_memory_int_workspace_buffer[_p|_d]).
# 0.7.x sparse.py has a fifth, already unpinned allocation (no pin_memory keyword): not counted.
KNOWN = {
    "0.2.14.post1": {"decode.py": 4, "prefill.py": 4, "sparse.py": 4, "pod.py": 2},
    "0.4.1": {"decode.py": 4, "prefill.py": 4, "sparse.py": 4, "pod.py": 2},
    "0.5.3": {"decode.py": 4, "prefill.py": 4, "sparse.py": 4, "pod.py": 4},
    "0.6.16.post3": {"decode.py": 4, "prefill.py": 4, "sparse.py": 4, "pod.py": 4},
    "0.6.18.post1": {"decode.py": 4, "prefill.py": 4, "sparse.py": 4, "pod.py": 4},
    "0.7.2.post1": {"decode.py": 2, "prefill.py": 4, "sparse.py": 4, "pod.py": 4},
    "0.7.4": {"decode.py": 2, "prefill.py": 4, "sparse.py": 4, "pod.py": 4},
}
ALLOC_START = re.compile(rb"self\._pin_memory_int_workspace_buffer\w*\s*=\s*torch\.empty\(")


def flipped_lines(original: bytes, patched: bytes) -> list[int]:
    """Line numbers whose only change is pin_memory=True -> False; fails on any other change.

    Written independently of the patcher: a plain line diff, plus one trailing marker line."""
    old, new = original.split(b"\n"), patched.split(b"\n")
    assert old[-1] == b"" and new[-1] == b"", "both end with a newline"
    assert len(new) == len(old) + 1, "exactly one line added"
    assert new[-2].startswith(b"# fi-pinq:"), f"last line is the marker, got {new[-2]!r}"
    changed = []
    for number, (before, after) in enumerate(zip(old[:-1], new[:-2]), start=1):
        if before == after:
            continue
        assert before.count(b"pin_memory=True") == 1, f"line {number}: {before!r}"
        assert after == before.replace(b"pin_memory=True", b"pin_memory=False"), number
        changed.append(number)
    return changed


def inside_target_allocation(source: bytes, line: int) -> bool:
    """Is this line within a few lines after a target torch.empty( opening?"""
    lines = source.split(b"\n")
    window = b"\n".join(lines[max(0, line - 8) : line])
    return bool(ALLOC_START.search(window))


@pytest.mark.parametrize("use_all", [False, True], ids=["decode", "all"])
@pytest.mark.parametrize("version", RELEASES)
def test_release_patch_roundtrip(tmp_path, version, use_all):
    lib = make_tree(version, tmp_path / "site")
    names = TARGETS if use_all else ("decode.py",)
    flags = ["--lib-root", str(lib)] + (["--all"] if use_all else [])
    originals = {n: (lib / n).read_bytes() for n in TARGETS}
    others = {k: v for k, v in pinned_files(lib).items() if k not in TARGETS}
    assert any(k.startswith("mla") for k in others), "MLA's pinned buffer is in the package"

    rc, res, proc = run_patcher(*flags)
    assert rc == 0, proc.stdout + proc.stderr
    assert res["status"] == "patched"
    assert res["flashinfer_version"] == version
    assert [f["name"] for f in res["files"]] == list(names)
    for name in names:
        entry = next(f for f in res["files"] if f["name"] == name)
        patched = (lib / name).read_bytes()
        lines = flipped_lines(originals[name], patched)
        assert len(lines) == KNOWN[version][name] == entry["flipped"]
        assert all(inside_target_allocation(originals[name], n) for n in lines), lines
        py_compile.compile(str(lib / name), cfile=str(tmp_path / "c.pyc"), doraise=True)
    for name in set(TARGETS) - set(names):
        assert (lib / name).read_bytes() == originals[name], f"{name} not a target here"
    after = {k: v for k, v in pinned_files(lib).items() if k not in TARGETS}
    assert after == others, "every other pin_memory=True (MLA among them) left as it was"

    before = {n: snapshot(lib / n) for n in names}
    rc, res, _ = run_patcher(*flags)
    assert (rc, res["status"]) == (0, "already-patched")
    assert {n: snapshot(lib / n) for n in names} == before, "second run writes nothing"
    assert run_patcher(*flags, "--check")[0] == 0

    rc, res, _ = run_patcher(*flags, "--revert")
    assert (rc, res["status"]) == (0, "reverted")
    assert {n: (lib / n).read_bytes() for n in TARGETS} == originals
    rc, res, _ = run_patcher(*flags, "--check")
    assert (rc, res["status"]) == (3, "unpatched")
