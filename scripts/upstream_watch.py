#!/usr/bin/env python3
"""Upstream watch: what new flashinfer-python and vllm releases on the package index mean for the
patch (files/patches.yml), before any image with them is rolled out.

    python scripts/upstream_watch.py [--json] [--record] [--from PACKAGE=VERSION ...]
                                     [--index URL] [--cache DIR] [--registry FILE] [--offline]

Releases: every final release on the index newer than the newest the registry has checked
(flashinfer-python: the entry's ``versions_tested``; vllm: ``watch.vllm_versions_tested``), or,
with ``--from PACKAGE=VERSION``, every final release from VERSION on (inclusive). Each is fetched
once into the cache (``--cache``, else ``$VDF_CACHE``, else ~/.cache/vllm-dual-fast; FlashInfer
archives under flashinfer/, the same folder the tests use, vLLM wheels under vllm/) straight from
the index's simple API (PEP 691 JSON, or PEP 503 HTML; the index pip is configured with:
$PIP_INDEX_URL, else pip's index-url, else PyPI), kept only when its sha256 is the one the index
lists, and read as an archive (a wheel as a zip, a FlashInfer sdist as a tar.gz): nothing is
built, installed, imported or run. pip is never asked to download: it would prepare an sdist's
metadata by running the release's own build backend, on the controller that holds the fleet's
SSH keys and vault password. A release with no such archive on the index (no wheel; for
FlashInfer no wheel and no .tar.gz sdist) could not be checked: verdict error.

FlashInfer: files/patcher.py's own parser (classify) on decode.py, prefill.py, sparse.py and
pod.py, as ``patcher.py --check --json`` would see them in an installed tree: ``needs-patch``
(pinned, layout known), ``upstream-fixed`` (no pinned plan buffer left) or ``unknown-layout`` (the
patcher would exit 2).

vLLM: the flashinfer-python release it pins (and that release's FlashInfer status); whether its
FlashInfer attention backend still plans the decode wrapper through FlashInfer's plan() or
fast_decode_plan(), which stage the schedule in ``_pin_memory_int_workspace_buffer``; whether the
drafter still rebuilds the attention metadata (a re-plan) per draft step; whether
files/vllm_flags_check.py would find vLLM's argument parser (module paths in the wheel, no
import). "could not tell" is said when the code is not where this tool looks.

Verdicts (per release; the overall one is the worst):
    nothing-new    no release newer than the registry's
    patch-needed   the patch is still needed and the patcher and flags check know the release
    drop-when-met  a condition of the registry's drop_when holds for this release (named)
    must-learn     files/patcher.py or files/vllm_flags_check.py must learn this release before
                   any image with it is rolled out

Exit codes: 0 nothing new; 3 new releases, patch still needed and known; 4 drop-when met for at
least one release (none must be learned); 2 the patcher or the flags check must learn something
first; 1 could not run (index unreachable, a release could not be fetched or read, no archive
this tool reads, a file whose sha256 is not the index's, bad registry).

``--record`` writes the registry: releases whose layout the patcher knows join
``versions_tested`` (FlashInfer) or ``watch.vllm_versions_tested`` (vLLM), and every checked
release gets a ``watch.records`` row (release, verdict, checked_at). A must-learn release joins
no list, so the next run reports it again. Nothing is written when a release could not be
checked (exit 1).
"""

from __future__ import annotations

import argparse
import ast
import base64
import contextlib
import datetime
import hashlib
import html.parser
import importlib.util
import json
import os
import re
import ssl
import subprocess
import sys
import tarfile
import time
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path

import yaml

try:
    from packaging.version import InvalidVersion, Version
except ImportError:  # pip always carries it
    from pip._vendor.packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parent.parent
REGISTRY = REPO / "files" / "patches.yml"
PATCH_ID = "flashinfer-decode-plan-unpin"
FLASHINFER, VLLM = "flashinfer-python", "vllm"
PACKAGES = (FLASHINFER, VLLM)
CACHE_FOLDER = {FLASHINFER: "flashinfer", VLLM: "vllm"}
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
# PEP 691: JSON preferred, the HTML forms accepted (PEP 503 indexes, mirrors, proxies).
SIMPLE_ACCEPT = (f"{SIMPLE_JSON}, application/vnd.pypi.simple.v1+html;q=0.2, "
                 "text/html;q=0.01")

EXIT_NOTHING_NEW, EXIT_ERROR, EXIT_MUST_LEARN, EXIT_PATCH_NEEDED, EXIT_DROP = 0, 1, 2, 3, 4
NOTHING_NEW, PATCH_NEEDED, DROP_WHEN_MET, MUST_LEARN, ERROR = (
    "nothing-new", "patch-needed", "drop-when-met", "must-learn", "error")
# Worst first: the overall verdict is the first of these any release has.
VERDICT_ORDER = (MUST_LEARN, ERROR, DROP_WHEN_MET, PATCH_NEEDED, NOTHING_NEW)
EXIT_CODES = {NOTHING_NEW: EXIT_NOTHING_NEW, PATCH_NEEDED: EXIT_PATCH_NEEDED,
              DROP_WHEN_MET: EXIT_DROP, MUST_LEARN: EXIT_MUST_LEARN, ERROR: EXIT_ERROR}
KNOWN_VERDICTS = (PATCH_NEEDED, DROP_WHEN_MET)  # the release joins the tested lists

# The two conditions of drop_when this tool can see in a release.
DROP_UPSTREAM_FIXED = ("upstream-fixed: its FlashInfer no longer pins the plan buffer (unpinned "
                       "upstream), so the patcher reports upstream-fixed")
DROP_NO_RACE = "plan() no longer races: {why}"
YES, NO, UNSURE = "yes", "no", "could not tell"

BACKEND = "vllm/v1/attention/backends/flashinfer.py"
DRAFTERS = ("vllm/v1/spec_decode/llm_base_proposer.py", "vllm/v1/spec_decode/eagle.py")
# Where the drafter's calls may lead (0.33.0: AttentionGroup.build_metadata_for_drafting).
DRAFTER_HELPERS = ("vllm/v1/worker/utils.py",)
# Model runner V2 (the default for most configurations in 0.33.0): the speculator `--speculative-
# config method=mtp` builds, whose base classes hold the draft loop.
V2_MTP = "vllm/v1/worker/gpu/spec_decode/mtp/speculator.py"
V2_PACKAGE = "vllm.v1.worker.gpu.spec_decode"
V2_REBUILD = re.compile(r"^_?build\w*attn_metadata$")
V2_IN_PLACE = "supports_draft_decode_metadata_update"
ABSENT = "absent"
DECODE_WRAPPER = "BatchDecodeWithPagedKVCacheWrapper"
PIN_ATTR = "_pin_memory_int_workspace_buffer"


class WatchError(Exception):
    """The watch could not run (index, download, archive, registry)."""


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look the module up while building classes
    spec.loader.exec_module(module)
    return module


patcher = _load(REPO / "files" / "patcher.py", "vdf_watch_patcher")
flags_check = _load(REPO / "files" / "vllm_flags_check.py", "vdf_watch_flags_check")


# ------------------------------------------------------------------------------------------------
# The package index (PEP 691 JSON simple API; a local folder for tests)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def index_url() -> str:
    """The index pip uses here: $PIP_INDEX_URL, else pip's configured index-url, else pip's
    default."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"]
    for key in ("global.index-url", "download.index-url", "install.index-url"):
        proc = subprocess.run([sys.executable, "-m", "pip", "config", "get", key],
                              capture_output=True, text=True, check=False)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout.strip()
    from pip._internal.models.index import PyPI  # pip's own default index

    return PyPI.simple_url


def _without_credentials(url: str) -> tuple:
    """(the URL without user:password@, its host, a Basic Authorization header or None): pip
    accepts credentials in the index URL; they go to that host only, never into the output."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, parts.hostname, None
    netloc = parts.hostname if ":" not in (parts.hostname or "") else f"[{parts.hostname}]"
    netloc += f":{parts.port}" if parts.port else ""
    user, password = (urllib.parse.unquote(x or "") for x in (parts.username, parts.password))
    pair = f"{user}:{password}"
    header = "Basic " + base64.b64encode(pair.encode()).decode()
    return parts._replace(netloc=netloc).geturl(), parts.hostname, header


def _open(url: str, accept: str, auth: tuple | None = None):
    """urlopen for the index and its files: pip's CA bundle ($PIP_CERT) for https, the index's
    credentials only to the index's host. file:// URLs are read as they are."""
    headers = {"Accept": accept, "User-Agent": "vllm-dual-fast-upstream-watch"}
    request = urllib.request.Request(url, headers=headers)  # noqa: S310 (index URLs)
    if auth and urllib.parse.urlsplit(url).hostname == auth[0]:
        request.add_unredirected_header("Authorization", auth[1])  # not sent on to a redirect
    cafile = os.environ.get("PIP_CERT") or None
    context = ssl.create_default_context(cafile=cafile) if url.startswith("https:") else None
    return urllib.request.urlopen(request, timeout=60, context=context)  # noqa: S310


class _SimpleHTML(html.parser.HTMLParser):
    """The anchors of a PEP 503 project page: file name, URL, sha256 (fragment), yanked."""

    def __init__(self):
        super().__init__()
        self.files: list = []
        self._href: dict | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._href = dict(attrs)
            self._href["_text"] = ""

    def handle_data(self, data):
        if self._href is not None:
            self._href["_text"] += data

    def handle_endtag(self, tag):
        if tag != "a" or self._href is None:
            return
        attrs, self._href = self._href, None
        url, _, fragment = (attrs.get("href") or "").partition("#")
        algo, _, digest = fragment.partition("=")
        name = attrs["_text"].strip() or urllib.parse.unquote(url.rsplit("/", 1)[-1])
        self.files.append({"filename": name, "url": url,
                           "hashes": {algo: digest} if algo and digest else {},
                           "yanked": "data-yanked" in attrs})


def parse_simple_html(text: str) -> dict:
    """A PEP 503 project page as the PEP 691 JSON form."""
    parser = _SimpleHTML()
    parser.feed(text)
    parser.close()
    return {"files": parser.files}


def absolute_urls(project: dict, page_url: str) -> dict:
    """The project page with each file's URL resolved against the page's own URL."""
    files = [dict(f, url=urllib.parse.urljoin(page_url, f.get("url", ""))) for f in
             project.get("files", [])]
    return dict(project, files=files)


def fetch_project(index: str, package: str) -> dict:
    """The index's project page (PEP 691 JSON, or PEP 503 HTML read into the same form), file
    URLs made absolute. A file:// URL or a folder is read as <folder>/<project>/index.json (the
    JSON form), so tests need no network."""
    name = normalize(package)
    parsed = urllib.parse.urlparse(index)
    if parsed.scheme in ("", "file"):
        path = Path(urllib.parse.unquote(parsed.path) if parsed.scheme else index) / name
        try:
            project = json.loads((path / "index.json").read_text())
        except (OSError, ValueError) as exc:
            raise WatchError(f"index {index}: {package}: {exc}") from None
        return absolute_urls(project, path.resolve().as_uri() + "/")
    bare, host, header = _without_credentials(index)
    url = bare.rstrip("/") + f"/{name}/"
    try:
        with _open(url, SIMPLE_ACCEPT, (host, header) if header else None) as resp:
            kind = resp.headers.get("Content-Type", "")
            body, page_url = resp.read(), resp.geturl()
    except OSError as exc:
        raise WatchError(f"index {url}: {exc}") from None
    try:
        if "json" in kind:
            project = json.loads(body)
        elif "html" in kind:
            project = parse_simple_html(body.decode("utf-8", errors="replace"))
        else:
            raise ValueError(f"answered {kind or 'no content type'}, not {SIMPLE_JSON} or HTML")
    except ValueError as exc:
        raise WatchError(f"index {url}: {exc}") from None
    return absolute_urls(project, page_url)


def file_version(filename: str, package: str) -> str | None:
    """Version in a wheel or sdist file name of this project, else None."""
    dist = normalize(package).replace("-", "_")
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        name, version = parts[0], parts[1] if len(parts) >= 5 else None
    else:
        stem = re.sub(r"\.(tar\.gz|zip|tar\.bz2)$", "", filename)
        if stem == filename or "-" not in stem:
            return None
        name, version = stem.rsplit("-", 1)
    if version is None or normalize(name).replace("-", "_") != dist:
        return None
    return version


def releases(project: dict, package: str) -> dict:
    """{version: {"wheel": bool, "sdist": bool}} of final, not yanked releases, oldest first."""
    found: dict = {}
    for f in project.get("files", []):
        if f.get("yanked"):
            continue
        version = file_version(f.get("filename", ""), package)
        if version is None:
            continue
        try:
            parsed = Version(version)
        except InvalidVersion:
            continue
        if parsed.is_prerelease or parsed.is_devrelease:
            continue
        kinds = found.setdefault(str(parsed), {"wheel": False, "sdist": False})
        kinds["wheel" if f["filename"].endswith(".whl") else "sdist"] = True
    return dict(sorted(found.items(), key=lambda kv: Version(kv[0])))


def release_files(project: dict, package: str, version: str) -> list:
    """The project page's files of one release (not yanked), as the index lists them."""
    out = []
    for f in project.get("files", []):
        found = file_version(f.get("filename", ""), package)
        if f.get("yanked") or found is None:
            continue
        with contextlib.suppress(InvalidVersion):
            if Version(found) == Version(version):
                out.append(f)
    return out


def select(available: list, after: str | None = None, start: str | None = None) -> list:
    """Releases newer than `after`, or from `start` on (inclusive)."""
    if start is not None:
        return [v for v in available if Version(v) >= Version(start)]
    if after is None:
        return list(available)
    return [v for v in available if Version(v) > Version(after)]


# ------------------------------------------------------------------------------------------------
# The cache and the archives


def cache_root(explicit: str | None = None) -> Path:
    root = explicit or os.environ.get("VDF_CACHE") or os.path.expanduser("~/.cache/vllm-dual-fast")
    return Path(root)


def readable(filename: str, package: str) -> bool:
    """An archive this tool reads without running anything: a wheel (zip), or for FlashInfer
    (published as sources only from 0.2.x to 0.4.x) a .tar.gz sdist. A vLLM sdist is not
    read: the FlashInfer it pins is in its wheel's metadata only."""
    return filename.endswith(".whl") or (package == FLASHINFER and filename.endswith(".tar.gz"))


def _rank(filename: str) -> tuple:
    """Which of a release's archives to read: a pure-Python wheel, then an x86_64 Linux one,
    then any other wheel, then the sdist (source reading only: the Python files are the same)."""
    if not filename.endswith(".whl"):
        return (3, filename)
    platform = filename[:-4].rsplit("-", 1)[-1]
    return (0 if platform == "any" else 1 if "linux" in platform and "x86_64" in platform
            else 2, filename)


def pick_archive(files: list, package: str) -> dict | None:
    """The index file of a release this tool reads, or None when there is none."""
    usable = [f for f in files if readable(f.get("filename", ""), package)]
    return min(usable, key=lambda f: _rank(f["filename"])) if usable else None


def cached_archive(folder: Path, package: str, version: str) -> Path | None:
    if not folder.is_dir():
        return None
    hits = []
    for path in folder.iterdir():
        found = file_version(path.name, package)
        if path.name.startswith(".") or not path.is_file() or found is None:
            continue
        with contextlib.suppress(InvalidVersion):
            if Version(found) == Version(version) and readable(path.name, package):
                hits.append(path)
    return min(hits, key=lambda p: _rank(p.name)) if hits else None


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_file(entry: dict, folder: Path, auth: tuple | None = None) -> Path:
    """One index file into `folder`, kept only when its sha256 is the index's."""
    name, expected = entry["filename"], (entry.get("hashes") or {}).get("sha256", "").lower()
    if not re.fullmatch(r"[0-9a-f]{64}", expected):
        raise WatchError(f"could not check: the index gives no sha256 for {name}; not fetched")
    if Path(name).name != name or name.startswith("."):
        raise WatchError(f"could not check: the index names a file {name!r}")
    part = folder / f".{name}.part"
    digest = hashlib.sha256()
    try:
        with _open(entry["url"], "*/*", auth) as resp, open(part, "wb") as out:
            for chunk in iter(lambda: resp.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise WatchError(f"fetching {entry['url']}: {exc}") from None
    if digest.hexdigest() != expected:
        part.unlink(missing_ok=True)
        raise WatchError(f"{name}: sha256 {digest.hexdigest()} is not the index's {expected}; "
                         "not kept")
    os.replace(part, folder / name)
    return folder / name


def download(cache: Path, package: str, version: str, project: dict | None,
             offline: bool = False, auth: tuple | None = None) -> Path:
    """The release's archive in the cache; fetched once from the index page `project` (the file
    itself, over HTTP, checked against the index's sha256): nothing is built, installed or run.
    A cached file the index lists with a sha256 is checked against it too."""
    folder = cache / CACHE_FOLDER[package]
    found = cached_archive(folder, package, version)
    listed = {f["filename"]: f for f in release_files(project or {}, package, version)}
    if found:
        expected = (listed.get(found.name, {}).get("hashes") or {}).get("sha256", "").lower()
        if expected and sha256_of(found) != expected:
            raise WatchError(f"{found}: sha256 is not the index's {expected} (delete it to "
                             "fetch it again)")
        return found
    if offline:
        raise WatchError(f"{package} {version}: not in the cache {folder} (--offline)")
    entry = pick_archive(list(listed.values()), package)
    if entry is None:
        kinds = "wheel or .tar.gz sdist" if package == FLASHINFER else "wheel"
        raise WatchError(f"could not check {package} {version}: the index offers no {kinds} of "
                         f"it ({', '.join(sorted(listed)) or 'no files'})")
    folder.mkdir(parents=True, exist_ok=True)
    return fetch_file(entry, folder, auth)


class Archive:
    """A wheel or sdist read in place: paths relative to the installed tree (flashinfer/...,
    vllm/...; an sdist's top folder is dropped), and the package metadata."""

    def __init__(self, path: Path):
        self.path = path
        self._zip = self._tar = None
        self._members: dict = {}
        try:
            if path.suffix == ".whl":
                self._zip = zipfile.ZipFile(path)
                self._members = {n: n for n in self._zip.namelist() if not n.endswith("/")}
            else:
                self._tar = tarfile.open(path)  # noqa: SIM115 (closed by close())
                for m in self._tar.getmembers():
                    parts = m.name.split("/", 1)
                    if m.isfile() and len(parts) == 2:
                        self._members[parts[1]] = m
        except (OSError, zipfile.BadZipFile, tarfile.TarError) as exc:
            raise WatchError(f"{path.name}: cannot read the archive ({exc})") from None

    def names(self) -> list:
        return list(self._members)

    def read(self, name: str) -> bytes | None:
        member = self._members.get(name)
        if member is None:
            return None
        if self._zip is not None:
            return self._zip.read(member)
        with self._tar.extractfile(member) as fh:
            return fh.read()

    def metadata(self) -> str:
        for name in self._members:
            if name.endswith(".dist-info/METADATA") and name.count("/") == 1:
                return (self.read(name) or b"").decode(errors="replace")
        return (self.read("PKG-INFO") or b"").decode(errors="replace")

    def close(self) -> None:
        for handle in (self._zip, self._tar):
            if handle is not None:
                handle.close()


# ------------------------------------------------------------------------------------------------
# FlashInfer: what the patcher says


PATCHER_TO_WATCH = {"unpatched": "needs-patch", "upstream-fixed": "upstream-fixed"}


def check_flashinfer_file(name: str, source: bytes | None) -> dict:
    """One target file as `patcher.py --check` would judge it, with the allocations found."""
    if source is None:
        if name == "decode.py":  # the patcher exits 2 without it
            return {"name": name, "status": "unknown-layout", "allocations": [],
                    "message": "no flashinfer/decode.py in this release"}
        return {"name": name, "status": "absent", "allocations": []}
    mentions = [n for n, line in enumerate(source.split(b"\n"), 1) if PIN_ATTR.encode() in line]
    try:
        status, allocations, marker = patcher.classify(source, name)
    except patcher.Drift as exc:
        return {"name": name, "status": "unknown-layout", "allocations": [],
                "message": str(exc), "buffer_mentioned_on_lines": mentions}
    out = {"name": name, "status": PATCHER_TO_WATCH.get(status, "unknown-layout"),
           "allocations": [a.as_json() for a in allocations]}
    if status not in PATCHER_TO_WATCH:  # a fi-pinq marker in a published file
        out["message"] = f"patcher classifies it {status}: not an upstream file"
    return out


def flashinfer_status(files: list) -> str:
    """unknown-layout if any target is; else decode.py's (the file the patch always targets)."""
    if any(f["status"] == "unknown-layout" for f in files):
        return "unknown-layout"
    return next(f["status"] for f in files if f["name"] == "decode.py")


def check_flashinfer(archive: Archive) -> dict:
    files = [check_flashinfer_file(name, archive.read(f"flashinfer/{name}"))
             for name in patcher.ALL_TARGETS]
    return {"status": flashinfer_status(files), "files": files,
            "metadata_version": _metadata_field(archive.metadata(), "Version")}


def _metadata_field(text: str, field: str) -> str | None:
    match = re.search(rf"^{field}:\s*(\S+)", text, re.M)
    return match.group(1) if match else None


def flashinfer_verdict(info: dict) -> tuple:
    """(verdict, reasons, drop condition or None)."""
    status = info["status"]
    if status == "unknown-layout":
        bad = [f for f in info["files"] if f["status"] == "unknown-layout"]
        return MUST_LEARN, [f"files/patcher.py must learn this release: {f['name']}: "
                            f"{f.get('message', '')}" + (
                                "" if f["name"] == "decode.py" else
                                " (patched only with vllm_dual_fast_patch_all_files)")
                            for f in bad], None
    still = [f["name"] for f in info["files"] if f["status"] == "needs-patch"]
    if status == "upstream-fixed":
        note = [f"decode.py upstream-fixed; still pinned (patched only with "
                f"vllm_dual_fast_patch_all_files): {', '.join(still)}"] if still else []
        return DROP_WHEN_MET, note, DROP_UPSTREAM_FIXED
    return PATCH_NEEDED, [f"pinned, layout known: {', '.join(still)}"], None


def plan_paths_using_buffer(decode_source: bytes | None) -> dict:
    """Which of FlashInfer's decode plan paths stage the schedule in the pinned buffer:
    {"plan": bool, "fast_decode_plan": bool}: the function, or a method of the decode wrapper it
    calls (self._plan_impl in 0.7.x), names it. False when the function is not there."""
    out = {"plan": False, "fast_decode_plan": False}
    tree = _parse(decode_source)
    if tree is None:
        return out
    methods: dict = {}
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == DECODE_WRAPPER):
        methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    module = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    for key, fn in (("plan", methods.get("plan")),
                    ("fast_decode_plan", module.get("fast_decode_plan"))):
        seen, todo = set(), [fn] if fn else []
        while todo and not out[key]:
            node = todo.pop()
            seen.add(node.name)
            out[key] = _mentions_attr(node, patcher.TARGET_ATTR)
            todo += [methods[c.func.attr] for c in ast.walk(node) if isinstance(c, ast.Call)
                     and isinstance(c.func, ast.Attribute) and c.func.attr in methods
                     and c.func.attr not in seen]
    return out


def _mentions_attr(node: ast.AST, pattern) -> bool:
    return any(isinstance(n, ast.Attribute) and pattern.match(n.attr) for n in ast.walk(node))


# ------------------------------------------------------------------------------------------------
# vLLM: what its sources say


def flashinfer_pin(archive: Archive) -> str | None:
    """The flashinfer-python requirement (wheel METADATA, else requirements/cuda.txt)."""
    pattern = re.compile(r"flashinfer[-_]python\s*([=<>!~][^;,\s]*(?:\s*,\s*[=<>!~][^;,\s]*)*)",
                         re.I)
    texts = [line for line in archive.metadata().splitlines() if line.startswith("Requires-Dist:")]
    texts.append((archive.read("requirements/cuda.txt") or b"").decode(errors="replace"))
    for text in texts:
        match = pattern.search(text)
        if match:
            return f"flashinfer-python{match.group(1).replace(' ', '')}"
    return None


def pinned_release(pin: str | None) -> str | None:
    match = re.fullmatch(r"flashinfer-python==([0-9][0-9A-Za-z.]*)", pin or "")
    return match.group(1) if match else None


def _parse(source: bytes | None):
    if source is None:
        return None
    try:
        return ast.parse(source)
    except SyntaxError:
        return None


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def check_backend(source: bytes | None, fi_paths: dict | None) -> dict:
    """Does vLLM's FlashInfer backend still plan the decode wrapper through a FlashInfer plan
    path that stages the schedule in `_pin_memory_int_workspace_buffer`?"""
    tree = _parse(source)
    if tree is None:
        why = "not in the wheel" if source is None else "does not parse"
        return {"answer": UNSURE, "detail": f"{BACKEND} {why}"}
    for node in ast.walk(tree):  # vLLM allocating the buffer itself
        targets = node.targets if isinstance(node, ast.Assign) else []
        for t in targets:
            if isinstance(t, ast.Attribute) and patcher.TARGET_ATTR.match(t.attr):
                pin = [k.value for k in getattr(node.value, "keywords", [])
                       if k.arg == "pin_memory"]
                if pin and isinstance(pin[0], ast.Constant) and pin[0].value is False:
                    return {"answer": NO, "detail": f"{BACKEND}:{node.lineno} allocates "
                            f"{t.attr} itself with pin_memory=False"}
                return {"answer": UNSURE, "detail": f"{BACKEND}:{node.lineno} assigns {t.attr} "
                        "itself: read it"}
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    built = sorted(c.lineno for c in calls if _call_name(c) == DECODE_WRAPPER)
    if not built:
        return {"answer": UNSURE, "detail": f"{BACKEND} builds no {DECODE_WRAPPER}"}
    used = {"plan": sorted(c.lineno for fn in _functions(tree).get("fast_plan_decode", [])
                           for c in ast.walk(fn) if isinstance(c, ast.Call)
                           and isinstance(c.func, ast.Attribute) and c.func.attr == "plan")
            + sorted(c.lineno for c in calls if isinstance(c.func, ast.Attribute)
                     and c.func.attr == "plan" and "decode" in ast.unparse(c.func.value)),
            "fast_decode_plan": sorted(c.lineno for c in calls
                                       if _call_name(c) == "fast_decode_plan")}
    used = {k: v for k, v in used.items() if v}
    if not used:
        return {"answer": UNSURE, "detail": f"{BACKEND} builds {DECODE_WRAPPER} (line "
                f"{built[0]}) but calls neither plan() nor fast_decode_plan()"}
    paths = ", ".join(f"{k}() line {v[0]}" for k, v in used.items())
    if fi_paths is None:
        return {"answer": YES, "detail": f"builds {DECODE_WRAPPER} (line {built[0]}), plans it "
                f"with {paths}; its FlashInfer's decode.py was not read"}
    staging = [k for k in used if fi_paths.get(k)]
    if staging:
        return {"answer": YES, "detail": f"builds {DECODE_WRAPPER} (line {built[0]}) and plans "
                f"it with {paths}; in its FlashInfer {', '.join(staging)} stage the schedule "
                f"in {PIN_ATTR}"}
    return {"answer": NO, "detail": f"plans with {paths}, and none of them mentions {PIN_ATTR} "
            "in its FlashInfer's decode.py"}


def _functions(tree: ast.Module) -> dict:
    """{name: [FunctionDef]} for module functions and methods of every class."""
    out: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.setdefault(node.name, []).append(node)
    return out


def _builds_metadata(node: ast.AST, functions: dict, depth: int = 2) -> str | None:
    """How a piece of code rebuilds attention metadata (a call to build_for_drafting, directly
    or through a function of the same module, `depth` levels deep), else None."""
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        name = _call_name(call)
        if name == "build_for_drafting":
            return "build_for_drafting()"
        if depth and name in functions:
            for fn in functions[name]:
                if fn is node:
                    continue
                inner = _builds_metadata(fn, functions, depth - 1)
                if inner:
                    return f"{name}() -> {inner}"
    return None


def _conditions(loop: ast.For, target: ast.AST) -> list:
    """Tests of the `if` statements inside `loop` that enclose `target`."""
    found: list = []

    def walk(node, stack):
        if node is target:
            found.extend(stack)
            return True
        extra = [node.test] if isinstance(node, ast.If) else []
        for child in ast.iter_child_nodes(node):
            in_body = isinstance(node, ast.If) and child in node.body
            if walk(child, stack + (extra if in_body else [])):
                return True
        return False

    walk(loop, [])
    return [ast.unparse(t) for t in found]


def check_v1_drafter(sources: dict) -> dict:
    """Model runner V1: does the drafter rebuild the attention metadata (so the FlashInfer
    backend re-plans the decode wrapper) on every draft step? Read in the first drafter module
    that has a loop over the speculative tokens; the calls it makes are followed into that
    module and DRAFTER_HELPERS."""
    helpers: dict = {}
    for path in DRAFTER_HELPERS:
        tree = _parse(sources.get(path))
        for name, fns in (_functions(tree) if tree else {}).items():
            helpers.setdefault(name, []).extend(fns)
    for path in DRAFTERS:
        tree = _parse(sources.get(path))
        if tree is None:
            continue
        functions = _functions(tree)
        for name, fns in helpers.items():
            functions.setdefault(name, []).extend(fns)
        for fn_list in functions.values():
            for fn in fn_list:
                for loop in (n for n in ast.walk(fn) if isinstance(n, ast.For)):
                    if "num_speculative_tokens" not in ast.unparse(loop.iter):
                        continue
                    for stmt in (s for s in ast.walk(loop) if isinstance(s, ast.stmt)
                                 and s is not loop and not isinstance(s, (ast.If, ast.For))):
                        how = _builds_metadata(stmt, functions)
                        if how:
                            when = _conditions(loop, stmt)
                            cond = f", when {' and '.join(when)}" if when else ""
                            return {"answer": YES, "detail": f"{path}:{loop.lineno} "
                                    f"{fn.name}(): the draft loop calls {how} every step{cond}"}
                    before = _builds_metadata(fn, functions)
                    if before:
                        return {"answer": NO, "detail": f"{path}:{loop.lineno} {fn.name}(): "
                                "the draft loop builds no attention metadata (it calls "
                                f"{before} outside the loop, once per step)"}
    if not any(sources.get(path) is not None for path in DRAFTERS):
        return {"answer": ABSENT, "detail": f"none of {', '.join(DRAFTERS)} in the wheel"}
    looked = ", ".join(DRAFTERS)
    return {"answer": UNSURE, "detail": f"no draft loop over num_speculative_tokens in {looked}"}


def _v2_chain(read) -> list:
    """(path, tree) of the V2 MTP speculator and the base classes it imports from the V2
    speculator package, nearest first (at most 4 modules)."""
    chain, path = [], V2_MTP
    while path and len(chain) < 4:
        tree = _parse(read(path))
        if tree is None:
            break
        chain.append((path, tree))
        bases = {ast.unparse(b) for n in tree.body if isinstance(n, ast.ClassDef) for b in n.bases}
        path = next((f"{node.module.replace('.', '/')}.py" for node in tree.body
                     if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                         V2_PACKAGE) and any(a.name in bases for a in node.names)), None)
    return chain


def _in_place_update(backend_source: bytes | None) -> tuple:
    """(line, condition) where the FlashInfer backend turns on in-place draft metadata
    updates; (None, None) when it never does (the base class default is False)."""
    tree = _parse(backend_source)
    for node in ast.walk(tree) if tree else ():
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [getattr(t, "attr", getattr(t, "id", "")) for t in targets]
            value = node.value
            if V2_IN_PLACE in names and not (isinstance(value, ast.Constant)
                                             and value.value is False):
                return node.lineno, " ".join(ast.unparse(value).split())
    return None, None


def check_v2_drafter(read, backend_source: bytes | None) -> dict:
    """Model runner V2: does the MTP speculator's draft loop rebuild the attention metadata
    each step? Its in-place update path is taken only when every backend supports it, so it is
    judged by whether vLLM's FlashInfer backend turns that support on."""
    chain = _v2_chain(read)
    if not chain:
        return {"answer": ABSENT, "detail": f"no {V2_MTP} in the wheel"}
    rebuilds = []
    for path, tree in chain:
        for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
            for loop in (n for n in ast.walk(fn) if isinstance(n, ast.For)):
                if "num_speculative" not in ast.unparse(loop.iter):
                    continue
                for call in (c for c in ast.walk(loop) if isinstance(c, ast.Call)):
                    if V2_REBUILD.match(_call_name(call)):
                        stmt = next(st for st in ast.walk(loop) if isinstance(st, ast.stmt)
                                    and not isinstance(st, (ast.If, ast.For))
                                    and call in list(ast.walk(st)))
                        when = _conditions(loop, stmt)
                        cond = f", when {' and '.join(when)}" if when else ""
                        rebuilds.append(f"{path}:{loop.lineno} {fn.name}(): the draft loop "
                                        f"calls {_call_name(call)}() every step{cond}")
    line, condition = _in_place_update(backend_source)
    if rebuilds and line is None:
        return {"answer": YES, "detail": f"{rebuilds[0]}; the FlashInfer backend does not set "
                f"{V2_IN_PLACE}, so that eager path runs"}
    if rebuilds and "TRTLLM" in condition.upper():
        # In place only for the trtllm-gen decode kernel, which does not plan through the
        # decode wrapper; the wrapper path (what SM86 cards run) takes the eager rebuild.
        return {"answer": YES, "detail": f"{rebuilds[0]}; the FlashInfer backend updates in "
                f"place only when {condition} ({BACKEND}:{line}), the trtllm-gen kernel, not "
                "the decode wrapper"}
    if rebuilds:
        return {"answer": UNSURE, "detail": f"{rebuilds[0]}, but the FlashInfer backend sets "
                f"{V2_IN_PLACE} = {condition} ({BACKEND}:{line}): read its "
                "update_draft_decode_metadata"}
    looked = ", ".join(path for path, _ in chain)
    return {"answer": UNSURE, "detail": f"no draft loop rebuilding attention metadata in {looked}"}


def check_drafter(read) -> dict:
    """Both model runners (which one serves is decided at start): yes when either re-plans per
    draft step, no only when every runner in the wheel does not, else could not tell."""
    v1 = check_v1_drafter({path: read(path) for path in DRAFTERS + DRAFTER_HELPERS})
    v2 = check_v2_drafter(read, read(BACKEND))
    present = [r["answer"] for r in (v1, v2) if r["answer"] != ABSENT]
    if YES in present:
        answer = YES
    elif present and all(a == NO for a in present):
        answer = NO
    else:
        answer = UNSURE
    return {"answer": answer, "detail": f"model runner V1: {v1['detail']}; model runner V2: "
            f"{v2['detail']}", "v1": v1, "v2": v2}


def _parser_import() -> str:
    """The module files/vllm_flags_check.py imports FlexibleArgumentParser from (its source)."""
    tree = ast.parse(Path(flags_check.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(
                a.name == "FlexibleArgumentParser" for a in node.names):
            return node.module
    raise WatchError("files/vllm_flags_check.py imports no FlexibleArgumentParser")


def _module_source(archive: Archive, module: str) -> tuple:
    base = module.replace(".", "/")
    for path in (f"{base}.py", f"{base}/__init__.py"):
        source = archive.read(path)
        if source is not None:
            return path, source
    return None, None


def _defines(source: bytes, name: str) -> bool:
    tree = _parse(source)
    if tree is None:
        return False
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, ast.ImportFrom) and any(
                (a.asname or a.name) == name for a in node.names):
            return True
    return False


def check_parser(archive: Archive) -> dict:
    """Would files/vllm_flags_check.py find vLLM's parser? Its PARSER_MODULES, first that exists
    (as it imports them), must define make_arg_parser; FlexibleArgumentParser where it imports
    it from. Module paths in the archive only: nothing is imported."""
    out = {"found": False, "module": None, "flexible_argument_parser": None}
    problems = []
    for module in flags_check.PARSER_MODULES:
        path, source = _module_source(archive, module)
        if source is None:
            continue
        if _defines(source, "make_arg_parser"):
            out["module"] = module
            break
        problems.append(f"{path} has no make_arg_parser")
        break  # the flags check stops at the first module that exists
    argparse_module = _parser_import()
    path, source = _module_source(archive, argparse_module)
    if source is not None and _defines(source, "FlexibleArgumentParser"):
        out["flexible_argument_parser"] = argparse_module
    else:
        problems.append(f"{argparse_module} has no FlexibleArgumentParser")
    out["found"] = bool(out["module"] and out["flexible_argument_parser"])
    if not out["found"]:
        if not out["module"] and not problems:
            problems.append(f"none of {', '.join(flags_check.PARSER_MODULES)} is in the wheel")
        elsewhere = sorted(
            n[:-3].replace("/", ".").removesuffix(".__init__") for n in archive.names()
            if n.startswith("vllm/") and n.endswith(".py")
            and b"def make_arg_parser" in (archive.read(n) or b""))
        out["make_arg_parser_defined_in"] = elsewhere
        out["message"] = "; ".join(problems)
    return out


def check_vllm(archive: Archive, flashinfer_of) -> dict:
    """`flashinfer_of(version)` -> (FlashInfer check dict, decode.py bytes) or raises."""
    pin = flashinfer_pin(archive)
    release = pinned_release(pin)
    info: dict = {"flashinfer_pin": pin, "flashinfer_release": release,
                  "flashinfer_status": None}
    fi_paths = None
    if release:
        try:
            fi_check, decode_source = flashinfer_of(release)
            info["flashinfer_status"] = fi_check["status"]
            fi_paths = plan_paths_using_buffer(decode_source)
        except WatchError as exc:
            info["flashinfer_status"] = f"not read: {exc}"
    info["backend_plans_through_pinned_buffer"] = check_backend(archive.read(BACKEND), fi_paths)
    info["drafter_replans_per_draft_step"] = check_drafter(archive.read)
    info["argument_parser"] = check_parser(archive)
    return info


def vllm_verdict(info: dict) -> tuple:
    learn, drop, notes = [], [], []
    parser = info["argument_parser"]
    if not parser["found"]:
        where = ", ".join(parser.get("make_arg_parser_defined_in") or []) or "nowhere"
        learn.append(f"files/vllm_flags_check.py must learn the parser: {parser['message']} "
                     f"(make_arg_parser is defined in: {where})")
    status = info["flashinfer_status"]
    if status == "unknown-layout":
        learn.append(f"files/patcher.py must learn flashinfer-python {info['flashinfer_release']}"
                     " (pinned by this vLLM)")
    elif status == "upstream-fixed":
        drop.append(DROP_UPSTREAM_FIXED.replace("its FlashInfer",
                                                f"its FlashInfer {info['flashinfer_release']}"))
    elif status is None or status.startswith("not read"):
        notes.append(f"pinned FlashInfer not checked ({info['flashinfer_pin'] or 'no pin'})")
    backend = info["backend_plans_through_pinned_buffer"]
    drafter = info["drafter_replans_per_draft_step"]
    if backend["answer"] == NO:
        drop.append(DROP_NO_RACE.format(why="the decode plan no longer stages in the pinned "
                                        f"buffer ({backend['detail']})"))
    if drafter["answer"] == NO:
        drop.append(DROP_NO_RACE.format(why="the drafter no longer re-plans the decode wrapper "
                                        f"per draft step ({drafter['detail']})"))
    for what, result in (("backend", backend), ("drafter", drafter)):
        if result["answer"] == UNSURE:
            notes.append(f"{what}: could not tell ({result['detail']}); the patch stays on")
    if learn:
        return MUST_LEARN, learn + notes, None
    if drop:
        return DROP_WHEN_MET, notes, "; ".join(drop)
    return PATCH_NEEDED, notes or ["pinned FlashInfer needs the patch; drafter re-plans per "
                                   "draft step; parser found"], None


# ------------------------------------------------------------------------------------------------
# The registry


def load_registry(path: Path) -> dict:
    try:
        registry = yaml.safe_load(path.read_text())
        return next(p for p in registry["patches"] if p["id"] == PATCH_ID)
    except (OSError, yaml.YAMLError, KeyError, TypeError, StopIteration) as exc:
        raise WatchError(f"{path}: no readable entry {PATCH_ID} ({exc})") from None


def tested(entry: dict) -> dict:
    """{package: [versions checked]} from the registry entry."""
    watch = entry.get("watch") or {}
    return {FLASHINFER: [str(v) for v in entry.get("versions_tested") or []],
            VLLM: [str(v) for v in watch.get("vllm_versions_tested") or []]}


def newest(versions: list) -> str | None:
    return max(versions, key=Version) if versions else None


def _scalar(value: str) -> str:
    """A YAML scalar that reads back as this string."""
    return value if yaml.safe_load(value) == value else json.dumps(value)


def _flow_list(key: str, values: list, indent: int, width: int = 100) -> str:
    head = " " * indent + f"{key}: ["
    lines, line = [], head
    for n, value in enumerate(values):
        item = _scalar(value) + (", " if n < len(values) - 1 else "]")
        if len(line) + len(item.rstrip()) > width and line != head:
            lines.append(line.rstrip())
            line = " " * len(head)
        line += item
    lines.append(line if values else head + "]")
    return "\n".join(lines)


def record(path: Path, results: list, checked_at: str) -> dict:
    """Write versions_tested, watch.vllm_versions_tested and watch.records; returns the entry as
    read back. Refuses (WatchError, nothing written) when the edit would not read back."""
    text = path.read_text()
    entry = load_registry(path)
    lists = tested(entry)
    for r in results:
        if r["verdict"] in KNOWN_VERDICTS and r["release"] not in lists[r["package"]]:
            lists[r["package"]].append(r["release"])
    lists = {k: sorted(set(v), key=Version) for k, v in lists.items()}
    old = {(rec["release"]): rec for rec in (entry.get("watch") or {}).get("records") or []}
    for r in results:
        old[f"{r['package']} {r['release']}"] = {
            "release": f"{r['package']} {r['release']}", "verdict": r["verdict"],
            "checked_at": checked_at}
    records = sorted(old.values(), key=lambda rec: (rec["release"].split()[0],
                                                    Version(rec["release"].split()[1])))

    pattern = re.compile(r"^( *)versions_tested: \[[^\]]*\]", re.M)
    match = pattern.search(text)
    if not match or len(pattern.findall(text)) != 1:
        raise WatchError(f"{path}: expected one flow list `versions_tested: [...]`")
    indent = len(match.group(1))
    text = text[:match.start()] + _flow_list("versions_tested", lists[FLASHINFER], indent) + \
        text[match.end():]
    pad = " " * indent
    block = [f"{pad}watch:",
             f"{pad}  # make upstream-watch WATCH_ARGS=--record (scripts/upstream_watch.py) "
             "writes this:",
             f"{pad}  # the vLLM releases checked and each checked release's last verdict.",
             _flow_list("vllm_versions_tested", lists[VLLM], indent + 2),
             f"{pad}  records:" + ("" if records else " []")]
    block += [f"{pad}    - {{release: {_scalar(rec['release'])}, verdict: {rec['verdict']}, "
              f"checked_at: {json.dumps(str(rec['checked_at']))}}}" for rec in records]
    lines = text.split("\n")
    start = next((n for n, ln in enumerate(lines) if ln == f"{pad}watch:"), None)
    if start is None:  # appended: the entry must be the file's last one
        while lines and not lines[-1].strip():
            lines.pop()
        lines += [*block, ""]
    else:
        end = start + 1
        while end < len(lines) and (not lines[end].strip() or lines[end].startswith(pad + " ")
                                    or lines[end].startswith(pad + "#")):
            end += 1
        while end > start + 1 and not lines[end - 1].strip():  # keep blank lines after it
            end -= 1
        lines[start:end] = block
    new_text = "\n".join(lines).rstrip("\n") + "\n"
    try:
        data = yaml.safe_load(new_text)
        back = next(p for p in data["patches"] if p["id"] == PATCH_ID)
    except (yaml.YAMLError, KeyError, TypeError, StopIteration) as exc:
        raise WatchError(f"{path}: the recorded registry would not read back ({exc})") from None
    if tested(back) != lists or len(back["watch"]["records"] or []) != len(records):
        raise WatchError(f"{path}: the recorded registry reads back differently; nothing written")
    tmp = path.with_name(path.name + ".watch-tmp")
    tmp.write_text(new_text)
    os.replace(tmp, path)
    return back


# ------------------------------------------------------------------------------------------------
# The run


class Watch:
    def __init__(self, cache: Path, offline: bool = False, index: str | None = None):
        self.cache, self.offline, self.index = cache, offline, index
        self.projects: dict = {}
        self._fi: dict = {}

    def project(self, package: str) -> dict:
        """The index's page of a package, read once per run."""
        if package not in self.projects:
            self.projects[package] = fetch_project(self.index, package)
        return self.projects[package]

    def archive(self, package: str, version: str) -> Archive:
        _, host, header = _without_credentials(self.index)
        return Archive(download(self.cache, package, version, self.project(package),
                                self.offline, (host, header) if header else None))

    def flashinfer(self, version: str) -> tuple:
        """(check, decode.py bytes) of one FlashInfer release, read once per run."""
        if version not in self._fi:
            archive = self.archive(FLASHINFER, version)
            try:
                decode = archive.read("flashinfer/decode.py")
                self._fi[version] = (check_flashinfer(archive), decode, archive.path.name)
            finally:
                archive.close()
        check, decode, _ = self._fi[version]
        return check, decode

    def one(self, package: str, version: str) -> dict:
        row = {"package": package, "release": version}
        try:
            if package == FLASHINFER:
                check, _ = self.flashinfer(version)
                row["archive"] = self._fi[version][2]
                row["flashinfer"] = check
                verdict, reasons, drop = flashinfer_verdict(check)
            else:
                archive = self.archive(VLLM, version)
                try:
                    row["archive"] = archive.path.name
                    row["vllm"] = check_vllm(archive, self.flashinfer)
                finally:
                    archive.close()
                verdict, reasons, drop = vllm_verdict(row["vllm"])
        except WatchError as exc:
            verdict, reasons, drop = ERROR, [str(exc)], None
        row.update(verdict=verdict, reasons=reasons, drop_when=drop)
        return row


def overall(rows: list) -> str:
    verdicts = {r["verdict"] for r in rows} or {NOTHING_NEW}
    return next(v for v in VERDICT_ORDER if v in verdicts)


def parse_from(values: list) -> dict:
    out = {}
    for value in values or []:
        package, sep, version = value.partition("=")
        package = normalize(package)
        if not sep or package not in PACKAGES:
            raise WatchError(f"--from {value!r}: expected {FLASHINFER}=VERSION or {VLLM}=VERSION")
        Version(version)
        out[package] = version
    return out


def watch(args) -> tuple:
    started = time.monotonic()
    registry = Path(args.registry)
    entry = load_registry(registry)
    checked = tested(entry)
    starts = parse_from(args.start)
    index = args.index or index_url()
    runner = Watch(cache_root(args.cache), args.offline, index)
    rows, plan = [], {}
    for package in PACKAGES:
        available = list(releases(runner.project(package), package))
        after = newest(checked[package])
        if package not in starts and after is None:
            raise WatchError(f"{registry}: no checked {package} release to start after: "
                             f"give --from {package}=VERSION")
        chosen = select(available, after=after, start=starts.get(package))
        plan[package] = {"after": None if package in starts else after,
                         "from": starts.get(package), "newest_on_index": newest(available),
                         "releases": chosen}
        rows += [runner.one(package, version) for version in chosen]
    verdict = overall(rows)
    result = {"overall": verdict, "exit_code": EXIT_CODES[verdict],
              "checked_at": datetime.datetime.now(datetime.timezone.utc)
              .strftime("%Y-%m-%dT%H:%M:%SZ"),
              "index": _without_credentials(index)[0], "cache": str(runner.cache),
              "selection": plan, "releases": rows,
              "drop_when": " ".join(str(entry.get("drop_when", "")).split())}
    if args.record and verdict != ERROR:
        record(registry, rows, result["checked_at"])
        result["recorded"] = str(registry)
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    return result["exit_code"], result


def _short(row: dict) -> str:
    if "flashinfer" in row:
        parts = []
        for f in row["flashinfer"]["files"]:
            if f["status"] == "absent":
                continue
            n = sum(1 for a in f["allocations"] if a["pinned"])
            parts.append(f"{f['name']} {f['status']}" + (f" ({n} pinned)" if n else ""))
        return "; ".join(parts)
    if "vllm" in row:
        v = row["vllm"]
        return (f"pins {v['flashinfer_pin'] or '-'} ({v['flashinfer_status'] or '-'}); "
                f"backend plans through pinned buffer: "
                f"{v['backend_plans_through_pinned_buffer']['answer']}; "
                f"drafter re-plans per step: {v['drafter_replans_per_draft_step']['answer']}; "
                f"parser: {v['argument_parser']['module'] or 'NOT FOUND'}")
    return ""


# Reasons a patch-needed row needs no second line for (the row says it already).
ROUTINE = ("pinned, layout known", "pinned FlashInfer needs the patch")


def table(result: dict) -> str:
    rows = result["releases"]
    out = []
    for package, sel in result["selection"].items():
        since = f"from {sel['from']}" if sel["from"] else f"after {sel['after']}"
        out.append(f"{package}: {len(sel['releases'])} release(s) {since} "
                   f"(newest on the index: {sel['newest_on_index']})")
    if rows:
        width = max(len(f"{r['package']} {r['release']}") for r in rows)
        out.append("")
        out.append(f"{'release'.ljust(width)}  {'verdict'.ljust(13)}  what was found")
        for r in rows:
            out.append(f"{(r['package'] + ' ' + r['release']).ljust(width)}  "
                       f"{r['verdict'].ljust(13)}  {_short(r)}")
            for line in (x for x in r["reasons"] if not x.startswith(ROUTINE)):
                out.append(f"{''.ljust(width)}  {''.ljust(13)}  - {line}")
            if r["drop_when"]:
                out.append(f"{''.ljust(width)}  {''.ljust(13)}  - drop_when holds: "
                           f"{r['drop_when']}")
    out.append("")
    out.append(f"overall: {result['overall']} (exit {result['exit_code']}), "
               f"{result.get('elapsed_s', 0)} s" +
               (f"; recorded in {result['recorded']}" if result.get("recorded") else ""))
    if result["overall"] == DROP_WHEN_MET:
        out.append("drop the patch only when every image the fleet runs meets drop_when "
                   "(the fleet report's footer says so)")
    return "\n".join(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--record", action="store_true",
                        help="write versions_tested and the watch record into the registry")
    parser.add_argument("--from", dest="start", action="append", metavar="PACKAGE=VERSION",
                        help="check every release from VERSION on (inclusive); repeatable")
    parser.add_argument("--index", help="simple-API index URL or a local folder "
                        "(default: pip's index-url)")
    parser.add_argument("--cache", help="cache folder (default: $VDF_CACHE or "
                        "~/.cache/vllm-dual-fast)")
    parser.add_argument("--registry", default=str(REGISTRY), help="the patch registry")
    parser.add_argument("--offline", action="store_true",
                        help="download nothing: a release not in the cache is an error")
    args = parser.parse_args(argv)
    try:
        code, result = watch(args)
    except (WatchError, InvalidVersion) as exc:
        code, result = EXIT_ERROR, {"overall": ERROR, "exit_code": EXIT_ERROR,
                                    "message": str(exc), "releases": []}
    if args.json:
        print(json.dumps(result, indent=1, sort_keys=True))
    elif "message" in result:
        print(f"upstream-watch: could not run: {result['message']}", file=sys.stderr)
    else:
        print(table(result))
    return code


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
