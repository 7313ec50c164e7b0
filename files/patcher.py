#!/usr/bin/env python3
"""Unpin FlashInfer's plan() host buffer (vllm#40756), safely and idempotently.

FlashInfer's attention wrappers allocate ``self._pin_memory_int_workspace_buffer`` (and the
``_p``/``_d`` variants in pod.py) with ``torch.empty(..., pin_memory=True)``. ``plan()`` writes its
schedule there before an unguarded asynchronous copy to the GPU; when the MTP drafter re-plans with
4+ requests in flight, a later plan overwrites the bytes before the earlier copy ran (Xid 31).
Allocating it unpinned makes the copy synchronous. This tool flips exactly those keyword values
``True`` -> ``False`` and appends one marker comment, nothing else.

Usage::

    python3 patcher.py [--lib-root DIR] [--all] [--check | --revert] [--json]

``--lib-root`` is the ``flashinfer`` package folder (default: env ``FI_PINQ_LIB_ROOT``, else located
with ``importlib.util.find_spec`` without importing flashinfer or torch). Targets: decode.py; with
``--all`` (or env ``FI_PINQ_LIB_ALL=1``) also prefill.py, sparse.py, pod.py.

Exit codes:
    0  ok: patched, already-patched, upstream-fixed, reverted, or FlashInfer absent
    1  unexpected error
    2  drift or refused: a file is not in a shape this tool recognises, or it cannot be written
       (read-only tree or file); nothing was written
    3  ``--check`` only: a target allocation is still pinned

Standard library only; runs on Python 3.9+.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import errno
import fcntl
import glob
import importlib.util
import io
import json
import os
import re
import signal
import stat
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

PATCHER_VERSION = "1"
DEFAULT_TARGETS = ("decode.py",)
ALL_TARGETS = ("decode.py", "prefill.py", "sparse.py", "pod.py")
TARGET_ATTR = re.compile(r"^_pin_memory_int_workspace_buffer(_[A-Za-z0-9]+)?$")
MARKER_PREFIX = "# fi-pinq:"
MARKER_RE = re.compile(
    r"^# fi-pinq: patcher v(?P<version>[0-9A-Za-z.]+) set pin_memory=False on lines "
    r"(?P<lines>[0-9]+(?:,[0-9]+)*)(?P<noeol> \[no-eol\])?"
    r" \(vllm#40756; undo: patcher\.py --revert\)$"
)
# Text guard: every pinned target must show up as this literal text inside its call.
PIN_TRUE_TEXT = re.compile(rb"\bpin_memory\s*=\s*True\b")
LOCK_NAME = ".fi-pinq.lock"
TMP_PREFIX = ".fi-pinq-"

EXIT_OK, EXIT_ERROR, EXIT_DRIFT, EXIT_UNPATCHED = 0, 1, 2, 3


class Drift(Exception):
    """A file is not in a shape the patcher recognises; nothing may be written."""


class Refused(Exception):
    """A needed write is impossible (read-only tree or file); nothing was written."""


@dataclass
class Allocation:
    line: int  # line of the assignment statement
    attribute: str
    pinned: bool | None  # True/False literal, None when the keyword is absent
    value_start: int = -1  # byte offsets of the True/False literal in the file
    value_end: int = -1
    value_line: int = 0

    def as_json(self) -> dict:
        return {"line": self.line, "attribute": self.attribute, "pinned": bool(self.pinned)}


@dataclass
class Marker:
    version: str
    lines: Tuple[int, ...]
    noeol: bool  # the original file had no trailing newline
    start: int  # byte offset where the marker (and its preceding newline, if added) begins


@dataclass
class FileReport:
    name: str
    status: str
    allocations: List[Allocation] = field(default_factory=list)
    flipped: int = 0  # keyword values this patch flips (or flipped, per the marker)
    message: str = ""

    def as_json(self) -> dict:
        out = {
            "name": self.name,
            "status": self.status,
            "flipped": self.flipped,
            "allocations": [a.as_json() for a in self.allocations],
        }
        if self.message:
            out["message"] = self.message
        return out


# ----------------------------------------------------------------------------------------------
# Pure functions on source bytes


def line_offsets(source: bytes) -> List[int]:
    """Byte offset of the start of every line (1-based index: offsets[line - 1])."""
    offsets = [0]
    pos = source.find(b"\n")
    while pos != -1:
        offsets.append(pos + 1)
        pos = source.find(b"\n", pos + 1)
    return offsets


def newline_of(source: bytes) -> bytes:
    """The file's line ending, so the marker line matches it (CRLF files stay CRLF)."""
    return b"\r\n" if b"\r\n" in source[: source.find(b"\n") + 1 or len(source)] else b"\n"


def _check_utf8(source: bytes, name: str) -> str:
    # ast columns are UTF-8 byte offsets; any other source encoding would break exact positions.
    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    if encoding.lower().replace("_", "-") not in ("utf-8", "utf-8-sig"):
        raise Drift(f"{name}: source encoding {encoding}, expected utf-8")
    try:
        return source.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Drift(f"{name}: not valid utf-8 ({exc})") from None


def find_marker(source: bytes, name: str) -> Marker | None:
    """The patcher's marker comment: at most one, a COMMENT token, and the file's last line."""
    if MARKER_PREFIX.encode() not in source:  # cheap: skip tokenizing files with no marker
        return None
    text = _check_utf8(source, name)
    comments = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT and tok.string.startswith(MARKER_PREFIX):
                comments.append(tok)
    except (tokenize.TokenError, SyntaxError) as exc:
        raise Drift(f"{name}: cannot tokenize ({exc})") from None
    if not comments:
        return None
    if len(comments) > 1:
        raise Drift(
            f"{name} line {comments[1].start[0]}: second fi-pinq marker, expected exactly one"
        )
    tok = comments[0]
    match = MARKER_RE.match(tok.string)
    if not match:
        raise Drift(f"{name} line {tok.start[0]}: unreadable fi-pinq marker {tok.string!r}")
    offsets = line_offsets(source)
    line = tok.start[0]
    start = offsets[line - 1]
    rest = source[start:]
    if tok.start[1] != 0 or rest.rstrip(b"\r\n") != tok.string.encode():
        raise Drift(f"{name} line {line}: fi-pinq marker must be the whole last line")
    noeol = bool(match.group("noeol"))
    if noeol:  # the patcher added the newline before the marker: it belongs to the marker
        start -= len(newline_of(source))
    lines = tuple(int(x) for x in match.group("lines").split(","))
    return Marker(match.group("version"), lines, noeol, start)


def _is_torch_empty(call: ast.Call) -> bool:
    func = call.func
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "empty"
        and isinstance(func.value, ast.Name)
        and func.value.id == "torch"
    )


def _target_attrs(node: ast.AST) -> List[str]:
    """Names of self._pin_memory_int_workspace_buffer* attributes assigned by this statement."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return []
    return [
        t.attr
        for t in targets
        if isinstance(t, ast.Attribute)
        and isinstance(t.value, ast.Name)
        and t.value.id == "self"
        and TARGET_ATTR.match(t.attr)
    ]


def find_allocations(source: bytes, name: str) -> List[Allocation]:
    """Every torch.empty(...) assigned to a target attribute, with its pin_memory literal.

    Raises Drift when a target's pin_memory is not a literal True/False (a name, an expression,
    or hidden in **kwargs), or when the literal's text is not where the parser says it is.
    """
    text = _check_utf8(source, name)
    try:
        tree = ast.parse(text, filename=name)
    except SyntaxError as exc:
        raise Drift(f"{name} line {exc.lineno}: does not parse ({exc.msg})") from None
    offsets = line_offsets(source)
    found: List[Allocation] = []
    for node in ast.walk(tree):
        attrs = _target_attrs(node)
        if not attrs or not isinstance(node.value, ast.Call):
            continue
        call = node.value
        has_pin_kw = any(k.arg == "pin_memory" for k in call.keywords)
        if not _is_torch_empty(call):
            if has_pin_kw:  # a new allocation form we do not know how to flip
                raise Drift(
                    f"{name} line {node.lineno}: self.{attrs[0]} allocated by "
                    f"{ast.dump(call.func)}, expected torch.empty(...)"
                )
            continue
        if any(k.arg is None for k in call.keywords):
            raise Drift(
                f"{name} line {node.lineno}: self.{attrs[0]} = torch.empty(**...), "
                "expected pin_memory as a literal keyword"
            )
        pin = [k for k in call.keywords if k.arg == "pin_memory"]
        for attr in attrs:
            if not pin:  # absent: unpinned already (0.7.x sparse.py has such a branch)
                found.append(Allocation(node.lineno, attr, None))
                continue
            value = pin[0].value
            if not (isinstance(value, ast.Constant) and isinstance(value.value, bool)):
                raise Drift(
                    f"{name} line {value.lineno}: self.{attr} has pin_memory="
                    f"{ast.get_source_segment(text, value)}, expected the literal True or False"
                )
            start = offsets[value.lineno - 1] + value.col_offset
            end = offsets[value.end_lineno - 1] + value.end_col_offset
            literal = source[start:end]
            if literal != repr(value.value).encode():
                raise Drift(
                    f"{name} line {value.lineno}: expected {value.value!r}, saw {literal!r}"
                )
            found.append(Allocation(node.lineno, attr, value.value, start, end, value.lineno))
        _check_call_text(source, offsets, call, pin, name, node.lineno, attrs[0])
    found.sort(key=lambda a: (a.line, a.attribute))
    return found


def _check_call_text(source, offsets, call, pin, name, lineno, attr) -> None:
    """The text of the call must hold `pin_memory=True` exactly as often as the parse says."""
    start = offsets[call.lineno - 1] + call.col_offset
    end = offsets[call.end_lineno - 1] + call.end_col_offset
    seen = len(PIN_TRUE_TEXT.findall(source[start:end]))
    parsed = 1 if pin and pin[0].value.value is True else 0
    if seen != parsed:
        raise Drift(
            f"{name} line {lineno}: self.{attr} call text has {seen} pin_memory=True, "
            f"the parse found {parsed} pinned keyword(s)"
        )


def classify(source: bytes, name: str) -> Tuple[str, List[Allocation], Marker | None]:
    """Status of one file: unpatched, already-patched or upstream-fixed; Drift otherwise."""
    allocations = find_allocations(source, name)
    marker = find_marker(source, name)
    literal = [a for a in allocations if a.pinned is not None]
    pinned = [a for a in literal if a.pinned]
    unpinned_lines = tuple(sorted(a.value_line for a in literal if not a.pinned))
    if not allocations:
        raise Drift(f"{name}: no torch.empty(...) for self._pin_memory_int_workspace_buffer found")
    if marker is None:
        if pinned and unpinned_lines:
            raise Drift(
                f"{name} line {unpinned_lines[0]}: pin_memory=False on a target with no fi-pinq "
                f"marker while line {pinned[0].value_line} is still True: half-patched, expected "
                "all True (original) or a marker"
            )
        return ("unpatched" if pinned else "upstream-fixed"), allocations, None
    if pinned:
        raise Drift(
            f"{name} line {pinned[0].value_line}: pin_memory=True left on "
            f"self.{pinned[0].attribute} although the fi-pinq marker is present: half-patched"
        )
    if tuple(sorted(marker.lines)) != unpinned_lines:
        raise Drift(
            f"{name}: fi-pinq marker records lines {list(marker.lines)}, the unpinned target "
            f"allocations are on lines {list(unpinned_lines)}: expected them to match"
        )
    return "already-patched", allocations, marker


def build_marker(lines: Sequence[int], noeol: bool) -> bytes:
    joined = ",".join(str(n) for n in sorted(lines))
    suffix = " [no-eol]" if noeol else ""
    text = (
        f"{MARKER_PREFIX} patcher v{PATCHER_VERSION} set pin_memory=False on lines {joined}"
        f"{suffix} (vllm#40756; undo: patcher.py --revert)"
    )
    return text.encode()


def _replace_spans(source: bytes, spans: Sequence[Tuple[int, int, bytes]]) -> bytes:
    out = source
    for start, end, new in sorted(spans, reverse=True):  # from the end: offsets stay valid
        out = out[:start] + new + out[end:]
    return out


def flip(source: bytes, allocations: Sequence[Allocation]) -> bytes:
    """Every pinned target to False, plus the marker line (the file's own line ending)."""
    pinned = [a for a in allocations if a.pinned]
    out = _replace_spans(source, [(a.value_start, a.value_end, b"False") for a in pinned])
    nl = newline_of(source)
    noeol = not out.endswith(b"\n")
    marker = build_marker([a.value_line for a in pinned], noeol)
    return out + (nl if noeol else b"") + marker + nl


def unflip(source: bytes, allocations: Sequence[Allocation], marker: Marker) -> bytes:
    """The recorded lines back to True, the marker (and any newline it added) dropped."""
    by_line = {a.value_line: a for a in allocations if a.pinned is False}
    spans = [(by_line[n].value_start, by_line[n].value_end, b"True") for n in marker.lines]
    return _replace_spans(source[: marker.start], spans)


def patch_source(source: bytes, name: str = "<source>") -> bytes:
    """Flip every pinned target to False and append the marker; the input must be unpatched."""
    status, allocations, _ = classify(source, name)
    if status != "unpatched":
        raise ValueError(f"{name} is {status}, not unpatched")
    return flip(source, allocations)


def revert_source(source: bytes, name: str = "<source>") -> bytes:
    """Exactly the original bytes of a file patch_source produced."""
    status, allocations, marker = classify(source, name)
    if status != "already-patched" or marker is None:
        raise ValueError(f"{name} is {status}, not patched")
    return unflip(source, allocations, marker)


def verify_patched(original: bytes, patched: bytes, name: str) -> List[Allocation]:
    """Belt and braces before a write: the result classifies as patched and reverts to the
    original. Returns its allocations. (Compiling happens on the temp file, see atomic_replace.)"""
    status, allocations, marker = classify(patched, name)
    if status != "already-patched" or marker is None:
        raise Drift(f"{name}: patched text classifies as {status}")
    if unflip(patched, allocations, marker) != original:
        raise Drift(f"{name}: patched text does not round-trip to the original")
    return allocations


# ----------------------------------------------------------------------------------------------
# The installed package


def locate_lib_root(explicit: str | None) -> Tuple[str | None, bool]:
    """(folder, given explicitly). find_spec on a top-level name does not import the package."""
    explicit = explicit or os.environ.get("FI_PINQ_LIB_ROOT") or None
    if explicit:
        return os.path.abspath(explicit), True
    spec = importlib.util.find_spec("flashinfer")
    if spec is None or not spec.submodule_search_locations or spec.origin in (None, "namespace"):
        return None, False
    return os.path.abspath(list(spec.submodule_search_locations)[0]), False


def read_version(lib_root: str) -> str | None:
    """Version from the dist-info METADATA (or egg-info PKG-INFO) next to the package."""
    parent = os.path.dirname(lib_root.rstrip(os.sep))
    patterns = ("flashinfer_python-*.dist-info/METADATA", "flashinfer-*.dist-info/METADATA",
                "flashinfer_python*.egg-info/PKG-INFO", "flashinfer*.egg-info/PKG-INFO")
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(parent, pattern))):
            version = _metadata_version(path)
            if version:
                return version
    return None


def _metadata_version(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            head = fh.read(8192)
    except OSError:
        return None
    name = re.search(r"^Name:\s*(\S+)", head, re.M)
    version = re.search(r"^Version:\s*(\S+)", head, re.M)
    if name and name.group(1).lower().replace("_", "-") in ("flashinfer-python", "flashinfer"):
        return version.group(1) if version else None
    return None


def _writable(path: str) -> str | None:
    """Why a path cannot be replaced, or None. A file without write bits is refused on purpose,
    even for root: someone marked it read-only."""
    try:
        st = os.stat(path)
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return f"{path} is on a read-only file system"
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if not os.access(path, os.W_OK) or not st.st_mode & 0o222:
        return f"{path} is not writable"
    return None


@contextlib.contextmanager
def tree_lock(lib_root: str):
    """Serialise writers on one tree: flock on a lock file, or on the folder itself when the
    lock file cannot be created (the folder then is not writable either, and no write follows)."""
    fd = None
    try:
        fd = os.open(os.path.join(lib_root, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        with contextlib.suppress(OSError):
            fd = os.open(os.path.join(lib_root, LOCK_NAME), os.O_RDONLY)
    if fd is None:
        fd = os.open(lib_root, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def _pause(step: str) -> None:
    """Test hooks, unset in production. FI_PINQ_TEST_STOP_AT=<step> stops the process (SIGSTOP)
    at that step (start, parsed, locked, write: the temp file half written, rename: just before
    the rename, renamed: just after it), for a crash test to kill it at that very point.
    FI_PINQ_TEST_PAUSE=seconds sleeps between write steps (a window concurrent runs overlap in)."""
    if os.environ.get("FI_PINQ_TEST_STOP_AT") == step:
        os.kill(os.getpid(), signal.SIGSTOP)
    delay = os.environ.get("FI_PINQ_TEST_PAUSE")
    if delay:
        time.sleep(float(delay))


def atomic_replace(path: str, data: bytes) -> None:
    """Temp file in the same folder, compiled, fsynced, renamed over; mode and owner kept.
    A kill at any moment leaves either the old or the new file at `path`."""
    st = os.stat(path)
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=TMP_PREFIX + os.path.basename(path) + ".", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            half = len(data) // 2
            fh.write(data[:half])
            fh.flush()
            _pause("write")
            fh.write(data[half:])
            fh.flush()
            os.fchmod(fh.fileno(), stat.S_IMODE(st.st_mode))
            if (st.st_uid, st.st_gid) != (os.getuid(), os.getgid()):
                with contextlib.suppress(PermissionError):
                    os.fchown(fh.fileno(), st.st_uid, st.st_gid)
            os.fsync(fh.fileno())
        with open(tmp, "rb") as fh:  # compile what is on disk, not what we meant to write
            compile(fh.read(), path, "exec", dont_inherit=True)
        _pause("rename")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _pause("renamed")
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)  # make the rename itself durable
    finally:
        os.close(dfd)


def _clean_stale_temps(lib_root: str) -> None:
    """Temp files a killed run left behind; only called while holding the lock."""
    for tmp in glob.glob(os.path.join(lib_root, TMP_PREFIX + "*")):
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _inspect_one(lib_root: str, name: str):
    """(report, bytes, allocations, marker) for one target file; Drift if out of shape."""
    path = os.path.join(lib_root, name)
    if not os.path.exists(path):
        if name == "decode.py":
            raise Drift(f"{path} not found, expected FlashInfer's decode.py in {lib_root}")
        return FileReport(name, "absent", message="not in this release"), b"", [], None
    source = _read(path)
    status, allocations, marker = classify(source, name)
    flipped = len(marker.lines) if marker else sum(1 for a in allocations if a.pinned)
    return FileReport(name, status, allocations, flipped), source, allocations, marker


def inspect_tree(lib_root: str, names: Sequence[str]) -> List[FileReport]:
    """Classify every target file; Drift for any file out of shape."""
    return [_inspect_one(lib_root, name)[0] for name in names]


def apply(lib_root: str, names: Sequence[str], mode: str) -> List[FileReport]:
    """mode: 'check', 'patch' or 'revert'. Writes only under the tree lock, after re-reading."""
    reports = inspect_tree(lib_root, names)
    _pause("parsed")
    wanted = "unpatched" if mode == "patch" else "already-patched"
    if mode == "check" or not any(r.status == wanted for r in reports):
        return reports
    for r in reports:  # refuse before writing anything, so no file is left half-done
        if r.status == wanted:
            reason = _writable(os.path.join(lib_root, r.name)) or _writable(lib_root)
            if reason:
                raise Refused(f"{r.name}: write needed but {reason}; nothing written")
    with tree_lock(lib_root):
        _pause("locked")
        _clean_stale_temps(lib_root)
        reports, writes = [], []
        for name in names:  # classify again: another run may have written while we waited
            report, original, allocations, marker = _inspect_one(lib_root, name)
            reports.append(report)
            if report.status == wanted and mode == "patch":
                new = flip(original, allocations)
                writes.append((report, new, verify_patched(original, new, name), "patched"))
            elif report.status == wanted:
                new = unflip(original, allocations, marker)
                writes.append((report, new, find_allocations(new, name), "reverted"))
        for report, new, allocations, status in writes:  # every file checked before any write
            atomic_replace(os.path.join(lib_root, report.name), new)
            report.allocations, report.status = allocations, status
    return reports


# ----------------------------------------------------------------------------------------------
# CLI

STATUS_ORDER = ("drift", "unpatched", "patched", "reverted", "already-patched", "upstream-fixed",
                "absent")


def overall_status(reports: Sequence[FileReport]) -> str:
    statuses = {r.status for r in reports} or {"absent"}
    return next(s for s in STATUS_ORDER if s in statuses)


def summary_line(result: dict) -> str:
    """One readable line, the one install.sh prints."""
    status = result["status"]
    version = result.get("flashinfer_version") or "version unknown"
    if status == "absent" and not result["files"]:
        return "fi-pinq: absent: flashinfer is not installed for this python; nothing to patch"
    if status == "drift":
        return f"fi-pinq: drift: {result.get('message', '')} flashinfer {version}"
    parts = []
    for f in result["files"]:
        if f["status"] == "absent":
            continue
        n = f["flipped"]
        extra = "" if f["status"] == status else f", {f['status']}"
        parts.append(f"{f['name']} ({n} allocation{'s' if n != 1 else ''}{extra})")
    return f"fi-pinq: {status} {', '.join(parts)} flashinfer {version}"


def run(argv: Sequence[str] | None = None) -> Tuple[int, dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lib-root", help="the flashinfer package folder (holds decode.py)")
    parser.add_argument("--all", action="store_true", help="also prefill.py, sparse.py, pod.py")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--check", action="store_true", help="write nothing; exit 3 if pinned")
    group.add_argument("--revert", action="store_true", help="restore the original bytes")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    _pause("start")
    use_all = args.all or os.environ.get("FI_PINQ_LIB_ALL", "") in ("1", "true", "yes")
    names = ALL_TARGETS if use_all else DEFAULT_TARGETS
    mode = "check" if args.check else "revert" if args.revert else "patch"

    lib_root, _ = locate_lib_root(args.lib_root)
    result: Dict = {"status": "absent", "flashinfer_version": None, "lib_root": lib_root,
                    "files": []}
    if lib_root is None:
        return EXIT_OK, result
    result["flashinfer_version"] = read_version(lib_root)
    if not os.path.isdir(lib_root):
        result.update(status="drift", message=f"{lib_root} is not a folder")
        return EXIT_DRIFT, result
    try:
        reports = apply(lib_root, names, mode)
    except (Drift, Refused) as exc:
        result.update(status="drift", message=str(exc))
        return EXIT_DRIFT, result
    except OSError as exc:
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            result.update(status="drift", message=f"refused: {exc}; nothing written")
            return EXIT_DRIFT, result
        raise
    result["files"] = [r.as_json() for r in reports]
    result["status"] = overall_status(reports)
    if mode == "check" and result["status"] == "unpatched":
        return EXIT_UNPATCHED, result
    return EXIT_OK, result


def main(argv: Sequence[str] | None = None) -> int:
    as_json = "--json" in (sys.argv[1:] if argv is None else argv)
    try:
        code, result = run(argv)
    except Exception as exc:  # unexpected: say so, exit 1
        result = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
        code = EXIT_ERROR
    if as_json:
        print(json.dumps(result, sort_keys=True))
    else:
        for f in result.get("files", []):
            lines = ",".join(str(a["line"]) for a in f["allocations"])
            print(f"fi-pinq: {f['name']}: {f['status']} (allocations at lines {lines or '-'})")
        if code == EXIT_ERROR:
            print(f"fi-pinq: error: {result['message']}")
        else:
            print(summary_line(result))
    return code


if __name__ == "__main__":
    sys.exit(main())
