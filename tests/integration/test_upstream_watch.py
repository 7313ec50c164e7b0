"""scripts/upstream_watch.py on the FlashInfer releases the suite already fetches, plus synthetic
variants made from them here, with a local index (a folder of PEP 691 JSON pages) and a cache
the test fills: nothing is downloaded.

The vLLM archives are synthetic (test doubles for a vLLM wheel: the suite fetches no vLLM): a few
small modules laid out where the watch reads vLLM 0.27.1 and 0.33.0 (the real run in
bench/results/upstream-watch.md reads the real wheels).
"""

from __future__ import annotations

import base64
import hashlib
import html
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from flashinfer_releases import (
    RELEASES,
    REPO,
    TARGETS,
    download,
    load_patcher,
    make_tree,
    release_tree,
    run_patcher,
)
from test_patcher_releases import KNOWN

SCRIPT = REPO / "scripts" / "upstream_watch.py"
REGISTRY = REPO / "files" / "patches.yml"


def load_watch():
    spec = importlib.util.spec_from_file_location("vdf_upstream_watch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


watch = load_watch()
patcher = load_patcher()


# ------------------------------------------------------------------------------------------------
# Building blocks: index, cache, registry, synthetic archives


def write_index(root: Path, package: str, filenames: list, yanked: tuple = ()) -> None:
    folder = root / package
    folder.mkdir(parents=True, exist_ok=True)
    files = [{"filename": f, "url": f"../../files/{f}", "hashes": {}, "yanked": f in yanked}
             for f in filenames]
    (folder / "index.json").write_text(json.dumps(
        {"meta": {"api-version": "1.1"}, "name": package, "files": files}))


def fi_name(version: str, real: bool = True) -> str:
    if real:
        return download(version).name
    return f"flashinfer_python-{version}-py3-none-any.whl"


def vllm_name(version: str) -> str:
    return f"vllm-{version}-cp38-abi3-manylinux_2_28_x86_64.whl"


class Setup:
    """A registry copy, a local index and a cache for one test."""

    def __init__(self, tmp_path: Path, fi_tested=RELEASES, vllm_tested=("0.27.1", "0.33.0")):
        self.root = tmp_path
        self.index = tmp_path / "index"
        self.cache = tmp_path / "cache"
        (self.cache / "flashinfer").mkdir(parents=True)
        (self.cache / "vllm").mkdir(parents=True)
        self.registry = tmp_path / "patches.yml"
        text = REGISTRY.read_text()
        text = re.sub(r"versions_tested: \[[^\]]*\]",
                      f"versions_tested: [{', '.join(fi_tested)}]", text, count=1)
        text = re.sub(r"vllm_versions_tested: \[[^\]]*\]",
                      f"vllm_versions_tested: [{', '.join(vllm_tested)}]", text, count=1)
        text = re.sub(r"(\n      records:)(\n        - .*)*( \[\])?", r"\1 []", text)
        self.registry.write_text(text)
        self.fi_files: list = []
        self.vllm_files: list = []

    def real_flashinfer(self, *versions: str) -> None:
        for version in versions:
            archive = download(version)
            os.symlink(archive, self.cache / "flashinfer" / archive.name)
            self.fi_files.append(archive.name)

    def synthetic_flashinfer(self, version: str, sources: dict) -> None:
        name = fi_name(version, real=False)
        with zipfile.ZipFile(self.cache / "flashinfer" / name, "w") as zf:
            for rel, data in sources.items():
                zf.writestr(f"flashinfer/{rel}", data)
            zf.writestr(f"flashinfer_python-{version}.dist-info/METADATA",
                        f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n")
        self.fi_files.append(name)

    def synthetic_vllm(self, version: str, tree: dict) -> None:
        name = vllm_name(version)
        with zipfile.ZipFile(self.cache / "vllm" / name, "w") as zf:
            for rel, data in tree.items():
                zf.writestr(rel, data)
        self.vllm_files.append(name)

    def run(self, *args: str, as_json: bool = True) -> tuple:
        write_index(self.index, "flashinfer-python", self.fi_files)
        write_index(self.index, "vllm", self.vllm_files)
        argv = ["--registry", str(self.registry), "--index", str(self.index),
                "--cache", str(self.cache), "--offline", *(["--json"] if as_json else []), *args]
        proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True,
                              text=True, timeout=300)
        assert proc.stderr == "", proc.stderr
        return proc.returncode, json.loads(proc.stdout) if as_json else proc.stdout

    def entry(self) -> dict:
        data = yaml.safe_load(self.registry.read_text())
        return next(p for p in data["patches"] if p["id"] == watch.PATCH_ID)


def row(result: dict, package: str, release: str) -> dict:
    return next(r for r in result["releases"]
                if (r["package"], r["release"]) == (package, release))


def target_sources(version: str) -> dict:
    lib = release_tree(version) / "flashinfer"
    return {name: (lib / name).read_bytes() for name in TARGETS}


def unpinned_decode(source: bytes) -> bytes:
    """decode.py as an upstream fix would ship it: every target allocation pin_memory=False, no
    fi-pinq marker."""
    allocations = [a for a in patcher.find_allocations(source, "decode.py") if a.pinned]
    assert allocations
    out = source
    for a in sorted(allocations, key=lambda a: a.value_start, reverse=True):
        out = out[:a.value_start] + b"False" + out[a.value_end:]
    return out


def helper_decode(source: bytes) -> bytes:
    """decode.py whose allocation moved into a new helper function (pin_memory still True)."""
    pattern = re.compile(rb"(self\._pin_memory_int_workspace_buffer\s*=\s*)torch\.empty\(")
    out, count = pattern.subn(rb"\1_host_workspace(", source)
    assert count >= 2
    helper = b"\n\ndef _host_workspace(*args, **kwargs):\n    return torch.empty(*args, **kwargs)\n"
    return out + helper


# A synthetic vLLM tree (test double): the modules the watch reads, laid out as in vLLM 0.33.0.
BACKEND = b'''from flashinfer import BatchDecodeWithPagedKVCacheWrapper
from flashinfer.decode import fast_decode_plan


class FlashInferMetadataBuilder:
    def _decode_wrapper(self):
        wrapper = BatchDecodeWithPagedKVCacheWrapper(self.workspace, "NHD")
        wrapper.plan = fast_plan_decode.__get__(wrapper)
        return wrapper


def fast_plan_decode(self, *args):
    if getattr(self, "vllm_first_call", True):
        self.plan(*args)
        self.vllm_first_call = False
        return
    fast_decode_plan(self, *args)
'''
DRAFTER_REPLANS = b'''class SpecDecodeBaseProposer:
    def propose(self, metadata):
        for token_index in range(self.num_speculative_tokens - 1):
            if not self.constant_draft_positions or token_index == 0:
                groups = self.build_per_group(metadata, token_index + 1)
            self.model(groups)

    def build_per_group(self, metadata, index):
        return [g.build_metadata_for_drafting(metadata, index) for g in self.groups]
'''
DRAFTER_ONCE = b'''class SpecDecodeBaseProposer:
    def propose(self, metadata):
        groups = self.build_per_group(metadata, 1)
        for token_index in range(self.num_speculative_tokens - 1):
            self.model(groups, token_index)

    def build_per_group(self, metadata, index):
        return [g.build_metadata_for_drafting(metadata, index) for g in self.groups]
'''
WORKER_UTILS = b'''class AttentionGroup:
    def build_metadata_for_drafting(self, metadata, index):
        return self.builder.build_for_drafting(metadata, index)
'''
# Model runner V2: the MTP speculator and the base class holding its draft loop (as in 0.27.1).
V2_MTP = b'''from vllm.v1.worker.gpu.spec_decode.autoregressive.speculator import (
    AutoRegressiveSpeculator,
)


class MTPSpeculator(AutoRegressiveSpeculator):
    pass
'''
V2_BASE = b'''class AutoRegressiveSpeculator:
    def _multi_step_decode(self, num_reqs):
        for step in range(1, self.num_speculative_steps):
            if self.advance_draft_positions or step == 1:
                metadata = self._build_draft_attn_metadata(num_reqs=num_reqs, step=step)
            self._generate_draft(num_reqs, metadata)
'''
CLI_ARGS = b"def make_arg_parser(parser):\n    return parser\n"
ARGPARSE = b"class FlexibleArgumentParser:\n    pass\n"


def vllm_tree(version: str, pin: str = "0.7.4", **replace) -> dict:
    tree = {
        f"vllm-{version}.dist-info/METADATA":
            f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
            f"Requires-Dist: flashinfer-python=={pin}\n".encode(),
        "vllm/v1/attention/backends/flashinfer.py": BACKEND,
        "vllm/v1/spec_decode/llm_base_proposer.py": DRAFTER_REPLANS,
        "vllm/v1/worker/utils.py": WORKER_UTILS,
        "vllm/entrypoints/common/cli_args.py": CLI_ARGS,
        "vllm/utils/argparse_utils.py": ARGPARSE,
    }
    for path, data in replace.items():
        path = path.replace("__", "/")
        if data is None:
            tree.pop(path)
        else:
            tree[path] = data
    return tree


# ------------------------------------------------------------------------------------------------
# The index


def test_releases_are_final_unyanked_files_of_the_project(tmp_path):
    write_index(tmp_path, "flashinfer-python", [
        "flashinfer_python-0.7.4-py3-none-any.whl", "flashinfer_python-0.7.4.tar.gz",
        "flashinfer_python-0.7.5rc1-py3-none-any.whl", "flashinfer_python-0.7.6.tar.gz",
        "flashinfer_python-0.8.0-py3-none-any.whl", "flashinfer_cubin-0.9.0-py3-none-any.whl",
        "flashinfer_python-0.6.10-py3-none-any.whl"],
        yanked=("flashinfer_python-0.8.0-py3-none-any.whl",))
    found = watch.releases(watch.fetch_project(str(tmp_path), "flashinfer-python"),
                           "flashinfer-python")
    assert list(found) == ["0.6.10", "0.7.4", "0.7.6"]
    assert found["0.7.4"] == {"wheel": True, "sdist": True}
    assert found["0.7.6"] == {"wheel": False, "sdist": True}
    assert watch.select(list(found), after="0.6.10") == ["0.7.4", "0.7.6"]
    assert watch.select(list(found), after="0.6.10", start="0.6.10") == list(found)


def test_unreachable_index_could_not_run(tmp_path):
    setup = Setup(tmp_path)
    setup.index = tmp_path / "no-such-index"
    argv = ["--registry", str(setup.registry), "--index", str(setup.index), "--offline", "--json"]
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True)
    assert proc.returncode == watch.EXIT_ERROR == 1
    assert "no-such-index" in json.loads(proc.stdout)["message"]


# ------------------------------------------------------------------------------------------------
# Real releases


def test_nothing_new_when_the_registry_has_the_newest(tmp_path):
    setup = Setup(tmp_path)
    setup.real_flashinfer(*RELEASES)
    setup.synthetic_vllm("0.33.0", vllm_tree("0.33.0"))
    code, result = setup.run()
    assert (code, result["overall"], result["releases"]) == (0, "nothing-new", [])
    assert result["selection"]["flashinfer-python"]["after"] == RELEASES[-1]


def test_new_real_releases_need_the_patch(tmp_path):
    setup = Setup(tmp_path, fi_tested=RELEASES[:4])
    setup.real_flashinfer(*RELEASES)
    code, result = setup.run()
    assert [r["release"] for r in result["releases"]] == list(RELEASES[4:])
    for r in result["releases"]:
        assert r["verdict"] == "patch-needed", r
        files = {f["name"]: f for f in r["flashinfer"]["files"]}
        for name, count in KNOWN[r["release"]].items():
            assert files[name]["status"] == "needs-patch"
            assert sum(a["pinned"] for a in files[name]["allocations"]) == count, (r, name)
    assert (code, result["overall"]) == (watch.EXIT_PATCH_NEEDED, "patch-needed")
    assert code == 3


@pytest.mark.parametrize("version", ["0.2.14.post1", "0.7.4"])
def test_watch_says_what_the_patcher_check_says(tmp_path, version):
    """Same statuses and allocations as `patcher.py --check --all --json` on the installed tree
    (a source archive for 0.2.14.post1, a wheel for 0.7.4)."""
    lib = make_tree(version, tmp_path / "site")
    rc, check, _ = run_patcher("--lib-root", str(lib), "--all", "--check")
    assert rc == patcher.EXIT_UNPATCHED
    setup = Setup(tmp_path / "w")
    setup.real_flashinfer(version)
    code, result = setup.run("--from", f"flashinfer-python={version}")
    got = row(result, "flashinfer-python", version)["flashinfer"]["files"]
    assert [(f["name"], f["allocations"]) for f in got] == [
        (f["name"], f["allocations"]) for f in check["files"]]
    assert {f["status"] for f in got} == {"needs-patch"} and check["status"] == "unpatched"
    assert code == 3


# ------------------------------------------------------------------------------------------------
# Synthetic FlashInfer variants


def test_unpinned_decode_meets_drop_when(tmp_path):
    sources = target_sources("0.7.4")
    sources["decode.py"] = unpinned_decode(sources["decode.py"])
    setup = Setup(tmp_path)
    setup.synthetic_flashinfer("0.7.5", sources)
    code, result = setup.run()
    r = row(result, "flashinfer-python", "0.7.5")
    assert r["flashinfer"]["files"][0]["status"] == "upstream-fixed"
    assert r["verdict"] == "drop-when-met" and "upstream-fixed" in r["drop_when"]
    assert any("prefill.py" in reason for reason in r["reasons"]), "still pinned elsewhere"
    assert (code, result["overall"]) == (4, "drop-when-met")


def test_allocation_moved_into_a_helper_must_be_learned(tmp_path):
    sources = target_sources("0.7.4")
    sources["decode.py"] = helper_decode(sources["decode.py"])
    setup = Setup(tmp_path)
    setup.synthetic_flashinfer("0.7.5", sources)
    code, result = setup.run()
    r = row(result, "flashinfer-python", "0.7.5")
    decode = r["flashinfer"]["files"][0]
    assert decode["status"] == "unknown-layout" and "_host_workspace" in decode["message"]
    assert decode["buffer_mentioned_on_lines"], "where the buffer now is"
    assert r["verdict"] == "must-learn" and "files/patcher.py" in r["reasons"][0]
    assert (code, result["overall"]) == (2, "must-learn")


def test_must_learn_wins_over_drop_and_patch_needed(tmp_path):
    base = target_sources("0.7.4")
    setup = Setup(tmp_path)
    setup.real_flashinfer("0.7.4")
    setup.synthetic_flashinfer("0.7.5", {**base, "decode.py": unpinned_decode(base["decode.py"])})
    setup.synthetic_flashinfer("0.7.6", {**base, "decode.py": helper_decode(base["decode.py"])})
    code, result = setup.run("--from", "flashinfer-python=0.7.4")
    assert [r["verdict"] for r in result["releases"]] == [
        "patch-needed", "drop-when-met", "must-learn"]
    assert code == 2


# ------------------------------------------------------------------------------------------------
# Synthetic vLLM trees


def vllm_setup(tmp_path, *trees) -> Setup:
    setup = Setup(tmp_path)
    setup.real_flashinfer("0.7.4")
    for version, tree in trees:
        setup.synthetic_vllm(version, tree)
    return setup


def test_vllm_that_still_replans_needs_the_patch(tmp_path):
    code, result = vllm_setup(tmp_path, ("0.34.0", vllm_tree("0.34.0"))).run()
    r = row(result, "vllm", "0.34.0")
    v = r["vllm"]
    assert (v["flashinfer_release"], v["flashinfer_status"]) == ("0.7.4", "needs-patch")
    assert v["backend_plans_through_pinned_buffer"]["answer"] == "yes"
    assert "fast_decode_plan" in v["backend_plans_through_pinned_buffer"]["detail"]
    drafter = v["drafter_replans_per_draft_step"]
    assert drafter["answer"] == "yes" and "build_metadata_for_drafting" in drafter["detail"]
    assert "token_index == 0" in drafter["detail"], "the condition it re-plans under"
    assert v["argument_parser"]["module"] == "vllm.entrypoints.common.cli_args"
    assert (r["verdict"], code) == ("patch-needed", 3)


def test_vllm_whose_parser_moved_must_be_learned(tmp_path):
    tree = vllm_tree("0.34.0", **{"vllm__entrypoints__common__cli_args.py": None,
                                  "vllm__entrypoints__serve__cli_args.py": CLI_ARGS})
    code, result = vllm_setup(tmp_path, ("0.34.0", tree)).run()
    r = row(result, "vllm", "0.34.0")
    parser = r["vllm"]["argument_parser"]
    assert parser["found"] is False and parser["module"] is None
    assert parser["make_arg_parser_defined_in"] == ["vllm.entrypoints.serve.cli_args"]
    assert r["verdict"] == "must-learn" and "vllm_flags_check.py" in r["reasons"][0]
    assert code == 2


def test_vllm_whose_drafter_plans_once_meets_drop_when(tmp_path):
    tree = vllm_tree("0.34.0", **{"vllm__v1__spec_decode__llm_base_proposer.py": DRAFTER_ONCE})
    code, result = vllm_setup(tmp_path, ("0.34.0", tree)).run()
    r = row(result, "vllm", "0.34.0")
    assert r["vllm"]["drafter_replans_per_draft_step"]["answer"] == "no"
    assert r["verdict"] == "drop-when-met"
    assert "no longer races" in r["drop_when"] and "per draft step" in r["drop_when"]
    assert code == 4


V2_FILES = {"vllm__v1__worker__gpu__spec_decode__mtp__speculator.py": V2_MTP,
            "vllm__v1__worker__gpu__spec_decode__autoregressive__speculator.py": V2_BASE}


def test_vllm_whose_v2_runner_replans_needs_the_patch(tmp_path):
    """V1's drafter plans once, model runner V2's MTP speculator still rebuilds per step: the
    runner is chosen at start, so the patch stays load-bearing."""
    tree = vllm_tree("0.34.0", **{"vllm__v1__spec_decode__llm_base_proposer.py": DRAFTER_ONCE},
                     **V2_FILES)
    code, result = vllm_setup(tmp_path, ("0.34.0", tree)).run()
    drafter = row(result, "vllm", "0.34.0")["vllm"]["drafter_replans_per_draft_step"]
    assert (drafter["v1"]["answer"], drafter["v2"]["answer"]) == ("no", "yes")
    assert "autoregressive/speculator.py" in drafter["v2"]["detail"]
    assert "_build_draft_attn_metadata" in drafter["v2"]["detail"]
    assert drafter["answer"] == "yes"
    assert (row(result, "vllm", "0.34.0")["verdict"], code) == ("patch-needed", 3)


def test_vllm_whose_backend_updates_draft_metadata_in_place_could_not_tell(tmp_path):
    backend = BACKEND.replace(
        b"    def _decode_wrapper(self):",
        b"    def __init__(self):\n        self.supports_draft_decode_metadata_update = True\n\n"
        b"    def _decode_wrapper(self):")
    tree = vllm_tree("0.34.0", **{"vllm__v1__spec_decode__llm_base_proposer.py": DRAFTER_ONCE,
                                  "vllm__v1__attention__backends__flashinfer.py": backend},
                     **V2_FILES)
    code, result = vllm_setup(tmp_path, ("0.34.0", tree)).run()
    drafter = row(result, "vllm", "0.34.0")["vllm"]["drafter_replans_per_draft_step"]
    assert drafter["v2"]["answer"] == "could not tell"
    assert "supports_draft_decode_metadata_update = True" in drafter["v2"]["detail"]
    assert drafter["answer"] == "could not tell", "no runner says yes, one cannot say no"
    assert (row(result, "vllm", "0.34.0")["verdict"], code) == ("patch-needed", 3)


def test_vllm_whose_drafter_moved_could_not_tell(tmp_path):
    tree = vllm_tree("0.34.0", **{"vllm__v1__spec_decode__llm_base_proposer.py": None,
                                  "vllm__v1__spec_decode__proposer.py": DRAFTER_ONCE})
    setup = vllm_setup(tmp_path, ("0.34.0", tree))
    code, result = setup.run()
    r = row(result, "vllm", "0.34.0")
    assert r["vllm"]["drafter_replans_per_draft_step"]["answer"] == "could not tell"
    assert r["verdict"] == "patch-needed", "the patch stays on: no guess either way"
    assert any("could not tell" in reason for reason in r["reasons"])
    assert code == 3
    code, text = setup.run(as_json=False)
    assert re.search(r"^\s+- drafter: could not tell \(model runner V1: none of", text, re.M), text


def test_vllm_pinning_an_unknown_flashinfer_must_be_learned(tmp_path):
    base = target_sources("0.7.4")
    setup = vllm_setup(tmp_path, ("0.34.0", vllm_tree("0.34.0", pin="0.7.5")))
    setup.synthetic_flashinfer("0.7.5", {**base, "decode.py": helper_decode(base["decode.py"])})
    code, result = setup.run()
    r = row(result, "vllm", "0.34.0")
    assert r["vllm"]["flashinfer_status"] == "unknown-layout"
    assert r["verdict"] == "must-learn" and "0.7.5" in r["reasons"][0]
    assert code == 2


def test_offline_release_not_in_the_cache_could_not_run(tmp_path):
    setup = Setup(tmp_path)
    setup.vllm_files.append(vllm_name("0.34.0"))  # on the index, never fetched
    code, result = setup.run()
    assert row(result, "vllm", "0.34.0")["verdict"] == "error"
    assert code == 1


# ------------------------------------------------------------------------------------------------
# Fetching from an index over HTTP: the files themselves, checked against the index's sha256,
# never a build (the controller holds the fleet's SSH keys and vault password)


class IndexHandler(BaseHTTPRequestHandler):
    """A PEP 691 (JSON) or PEP 503 (HTML) simple index and its files, recording each request."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass

    def send(self, status, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):  # noqa: N802 (http.server's naming)
        index = self.server.index
        index.requests.append((self.path, self.headers.get("Accept", "")))
        parts = self.path.strip("/").split("/")
        if parts[:1] == ["simple"] and len(parts) == 2 and parts[1] in index.pages:
            entries = index.pages[parts[1]]
            if parts[1] in index.html:
                links = "".join(
                    f'<a href="../../files/{html.escape(e["filename"])}'
                    f'{"#sha256=" + e["sha256"] if e["sha256"] else ""}"'
                    f'{" data-yanked" if e["yanked"] else ""}>{html.escape(e["filename"])}</a><br>'
                    for e in entries)
                body = f"<!DOCTYPE html><html><body>{links}</body></html>".encode()
                self.send(200, body, "text/html; charset=utf-8")
            else:
                files = [{"filename": e["filename"], "url": f"../../files/{e['filename']}",
                          "hashes": {"sha256": e["sha256"]} if e["sha256"] else {},
                          "yanked": e["yanked"]} for e in entries]
                body = json.dumps({"meta": {"api-version": "1.1"}, "name": parts[1],
                                   "files": files}).encode()
                self.send(200, body, watch.SIMPLE_JSON)
        elif parts[:1] == ["files"] and len(parts) == 2 and parts[1] in index.files:
            self.send(200, index.files[parts[1]], "application/octet-stream")
        else:
            self.send(404, b"not found", "text/plain")


class HttpIndex:
    """A simple index served on loopback for one test."""

    def __init__(self):
        self.pages: dict = {"flashinfer-python": [], "vllm": []}
        self.files: dict = {}
        self.html: set = set()
        self.requests: list = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), IndexHandler)
        self.server.index = self
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple/"

    def add(self, package: str, filename: str, data: bytes, sha256: str | None = "",
            yanked: bool = False) -> None:
        digest = hashlib.sha256(data).hexdigest() if sha256 == "" else sha256
        self.pages[package].append({"filename": filename, "sha256": digest, "yanked": yanked})
        self.files[filename] = data

    def fetched(self) -> list:
        return [path.rsplit("/", 1)[1] for path, _ in self.requests if path.startswith("/files/")]


@pytest.fixture
def http_index():
    index = HttpIndex()
    index.thread.start()
    yield index
    index.server.shutdown()
    index.server.server_close()


def zipped(tree: dict) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for rel, data in tree.items():
            zf.writestr(rel, data)
    return buffer.getvalue()


def fi_wheel(version: str, sources: dict) -> bytes:
    tree = {f"flashinfer/{rel}": data for rel, data in sources.items()}
    tree[f"flashinfer_python-{version}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n")
    return zipped(tree)


def trapped_sdist(version: str, sources: dict, marker: Path) -> bytes:
    """A FlashInfer sdist whose in-tree build backend (and setup.py) writes `marker` when run:
    what pip does to prepare an sdist's metadata, with or without build isolation."""
    trap = (f"import pathlib\npathlib.Path({str(marker)!r}).write_text('the release ran')\n"
            "def get_requires_for_build_wheel(config_settings=None):\n    return []\n"
            "def prepare_metadata_for_build_wheel(directory, config_settings=None):\n"
            "    raise SystemExit('built')\n"
            "def build_wheel(directory, config_settings=None, metadata_directory=None):\n"
            "    raise SystemExit('built')\n"
            "build_sdist = build_wheel\n"
            "get_requires_for_build_sdist = get_requires_for_build_wheel\n")
    top = f"flashinfer_python-{version}"
    tree = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: flashinfer-python\nVersion: {version}\n",
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "vdf_trap_backend"\n'
                          'backend-path = ["."]\n',
        "vdf_trap_backend.py": trap,
        "setup.py": trap,
        **{f"flashinfer/{rel}": data for rel, data in sources.items()},
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tf:
        for rel, data in tree.items():
            data = data.encode() if isinstance(data, str) else data
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def run_online(setup: Setup, index: HttpIndex, *args: str) -> tuple:
    """The watch against the served index as pip is configured with it ($PIP_INDEX_URL, no
    --index), fetching what is not in the cache."""
    env = dict(os.environ, PIP_INDEX_URL=index.url)
    argv = ["--registry", str(setup.registry), "--cache", str(setup.cache), "--json", *args]
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True,
                          timeout=300, env=env, cwd=setup.root)
    assert proc.stderr == "", proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_an_sdist_is_read_from_the_index_never_built(tmp_path, http_index):
    """Sources only on the index: its tar.gz is fetched and read; its build backend never runs."""
    marker = tmp_path / "the-release-ran"
    sdist = trapped_sdist("0.7.5", target_sources("0.7.4"), marker)
    http_index.add("flashinfer-python", "flashinfer_python-0.7.5.tar.gz", sdist)
    setup = Setup(tmp_path)
    code, result = run_online(setup, http_index)
    assert not marker.exists(), "the sdist's build backend ran on the controller"
    r = row(result, "flashinfer-python", "0.7.5")
    assert r["archive"] == "flashinfer_python-0.7.5.tar.gz"
    files = {f["name"]: f for f in r["flashinfer"]["files"]}
    assert files["decode.py"]["status"] == "needs-patch"
    pinned = sum(a["pinned"] for a in files["decode.py"]["allocations"])
    assert pinned == KNOWN["0.7.4"]["decode.py"]
    assert (r["verdict"], code, result["index"]) == ("patch-needed", 3, http_index.url)
    assert http_index.fetched() == ["flashinfer_python-0.7.5.tar.gz"]
    pages = [accept for path, accept in http_index.requests if path.startswith("/simple/")]
    assert pages and all(accept.startswith(watch.SIMPLE_JSON) for accept in pages)
    # The archive as the index served it, and nothing else: no build tools, nothing unpacked.
    assert [p.name for p in (setup.cache / "flashinfer").iterdir()] == [r["archive"]]
    assert (setup.cache / "flashinfer" / r["archive"]).read_bytes() == sdist


def test_a_wheel_is_fetched_from_an_html_index_and_read_once(tmp_path, http_index):
    """A PEP 503 (HTML) index: the wheels are fetched, checked against the link's sha256, read
    as before, and fetched once (the next run reads the cache)."""
    http_index.html.update({"flashinfer-python", "vllm"})
    http_index.add("flashinfer-python", "flashinfer_python-0.7.5-py3-none-any.whl",
                   fi_wheel("0.7.5", target_sources("0.7.4")))
    http_index.add("flashinfer-python", "flashinfer_python-0.7.5.tar.gz", b"not read")
    http_index.add("vllm", vllm_name("0.34.0"), zipped(vllm_tree("0.34.0", pin="0.7.5")))
    http_index.add("vllm", "vllm-0.34.0.tar.gz", b"not read")
    setup = Setup(tmp_path)
    code, result = run_online(setup, http_index)
    fi, v = row(result, "flashinfer-python", "0.7.5"), row(result, "vllm", "0.34.0")
    assert fi["archive"] == "flashinfer_python-0.7.5-py3-none-any.whl"
    assert fi["flashinfer"]["files"][0]["status"] == "needs-patch"
    assert v["vllm"]["flashinfer_release"] == "0.7.5"
    assert v["vllm"]["backend_plans_through_pinned_buffer"]["answer"] == "yes"
    assert v["vllm"]["argument_parser"]["module"] == "vllm.entrypoints.common.cli_args"
    assert ([fi["verdict"], v["verdict"]], code) == (["patch-needed", "patch-needed"], 3)
    assert sorted(http_index.fetched()) == sorted(
        ["flashinfer_python-0.7.5-py3-none-any.whl", vllm_name("0.34.0")])
    again, result = run_online(setup, http_index)
    assert again == 3 and len(http_index.fetched()) == 2, "fetched once"


@pytest.mark.parametrize("sha256", ["0" * 64, None])
def test_a_file_the_index_gives_no_matching_sha256_for_is_refused(tmp_path, http_index, sha256):
    wheel = fi_wheel("0.7.5", target_sources("0.7.4"))
    http_index.add("flashinfer-python", "flashinfer_python-0.7.5-py3-none-any.whl", wheel,
                   sha256=sha256)
    setup = Setup(tmp_path)
    code, result = run_online(setup, http_index)
    r = row(result, "flashinfer-python", "0.7.5")
    assert r["verdict"] == "error" and "sha256" in r["reasons"][0], r
    assert code == 1
    assert list((setup.cache / "flashinfer").iterdir()) == [], "nothing unchecked is kept"


def test_a_release_with_no_archive_the_watch_reads_could_not_be_checked(tmp_path, http_index):
    """A .zip sdist (FlashInfer), an sdist alone (vLLM: only its wheel carries the pins)."""
    http_index.add("flashinfer-python", "flashinfer_python-0.7.5.zip", b"PK")
    http_index.add("vllm", "vllm-0.34.0.tar.gz", b"sources")
    setup = Setup(tmp_path)
    code, result = run_online(setup, http_index)
    for package, version in (("flashinfer-python", "0.7.5"), ("vllm", "0.34.0")):
        r = row(result, package, version)
        assert r["verdict"] == "error" and "could not check" in r["reasons"][0], r
        assert "no wheel" in r["reasons"][0], r
    assert code == 1 and http_index.fetched() == []


def test_index_credentials_go_to_the_index_only_and_never_into_the_output():
    bare, host, header = watch._without_credentials("https://u%40x:p%3As@Pypi.example:8443/simple/")
    assert (bare, host) == ("https://pypi.example:8443/simple/", "pypi.example")
    assert base64.b64decode(header.removeprefix("Basic ")) == b"u@x:p:s"
    assert watch._without_credentials("/a/folder") == ("/a/folder", None, None)


# ------------------------------------------------------------------------------------------------
# --record


def test_record_writes_versions_and_watch_records(tmp_path):
    base = target_sources("0.7.4")
    setup = Setup(tmp_path)
    setup.real_flashinfer("0.7.4")
    setup.synthetic_flashinfer("0.7.5", {**base, "decode.py": unpinned_decode(base["decode.py"])})
    setup.synthetic_flashinfer("0.7.6", {**base, "decode.py": helper_decode(base["decode.py"])})
    setup.synthetic_vllm("0.34.0", vllm_tree("0.34.0"))
    before = setup.registry.read_text()
    code, result = setup.run("--record")
    assert code == 2 and result["recorded"] == str(setup.registry)
    entry = setup.entry()
    assert entry["versions_tested"] == [*RELEASES, "0.7.5"], "must-learn 0.7.6 is not tested"
    assert entry["watch"]["vllm_versions_tested"] == ["0.27.1", "0.33.0", "0.34.0"]
    records = {r["release"]: r for r in entry["watch"]["records"]}
    assert {k: r["verdict"] for k, r in records.items()} == {
        "flashinfer-python 0.7.5": "drop-when-met", "flashinfer-python 0.7.6": "must-learn",
        "vllm 0.34.0": "patch-needed"}
    assert {r["checked_at"] for r in records.values()} == {result["checked_at"]}
    text = setup.registry.read_text()
    for comment in re.findall(r"^\s*#.*$", before, re.M):
        assert comment in text, f"comment lost: {comment}"
    lint = subprocess.run([sys.executable, "-m", "yamllint", "-s", str(setup.registry)],
                          capture_output=True, text=True, cwd=REPO)
    assert lint.returncode == 0, lint.stdout

    # The next run starts after 0.7.5: the release that must be learned is reported again, and
    # its record is replaced, not repeated.
    code, again = setup.run("--record")
    assert [r["release"] for r in again["releases"]] == ["0.7.6"] and code == 2
    records = [r["release"] for r in setup.entry()["watch"]["records"]]
    assert records == sorted(set(records), key=records.index) and len(records) == 3


def test_table_names_each_release_and_the_exit(tmp_path):
    sources = target_sources("0.7.4")
    sources["decode.py"] = unpinned_decode(sources["decode.py"])
    setup = Setup(tmp_path)
    setup.synthetic_flashinfer("0.7.5", sources)
    write_index(setup.index, "flashinfer-python", setup.fi_files)
    write_index(setup.index, "vllm", [])
    proc = subprocess.run([sys.executable, str(SCRIPT), "--registry", str(setup.registry),
                           "--index", str(setup.index), "--cache", str(setup.cache),
                           "--offline"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4
    assert re.search(r"^flashinfer-python 0\.7\.5\s+drop-when-met\s+decode\.py upstream-fixed",
                     proc.stdout, re.M), proc.stdout
    assert "drop_when holds: upstream-fixed" in proc.stdout
    assert "overall: drop-when-met (exit 4)" in proc.stdout
