"""files/patches.yml checked against the repository: files, delivery, compose mount, entrypoint."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml
from flashinfer_releases import RELEASES, REPO, load_patcher
from packaging.version import Version

ROLE = REPO / "roles" / "vllm_dual_fast"
PATCH_ID = "flashinfer-decode-plan-unpin"


@pytest.fixture(scope="module")
def entry():
    registry = yaml.safe_load((REPO / "files" / "patches.yml").read_text())
    ids = [p["id"] for p in registry["patches"]]
    assert len(ids) == len(set(ids)), f"duplicate ids: {ids}"
    return next(p for p in registry["patches"] if p["id"] == PATCH_ID)


def test_named_files_exist(entry):
    for rel in entry["files"]["tool"]:
        assert (REPO / rel).is_file(), rel
    assert (REPO / "files" / "install.sh").stat().st_mode & 0o111, "install.sh is executable"


def test_touched_files_match_the_patcher(entry):
    patcher = load_patcher()
    files = entry["files"]
    assert tuple(files["touched"]) == patcher.DEFAULT_TARGETS
    assert tuple(files["touched"] + files["touched_with_all"]) == patcher.ALL_TARGETS
    assert not any(name.startswith(tuple(files["never_touched"])) for name in patcher.ALL_TARGETS)


def _upstream_watch():
    spec = importlib.util.spec_from_file_location("vdf_registry_watch",
                                                  REPO / "scripts" / "upstream_watch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_versions_are_the_tested_releases_and_known_checked_ones(entry):
    """versions_tested: the releases tests/unit/test_patcher_releases.py runs on, plus those that
    `make upstream-watch WATCH_ARGS=--record` read and found in a layout the patcher knows."""
    watch = _upstream_watch()
    tested = [str(v) for v in entry["versions_tested"]]
    assert set(RELEASES) <= set(tested), "every release the tests run on"
    assert tested == sorted(set(tested), key=Version), "sorted, once each"
    records = {r["release"]: r for r in entry["watch"]["records"] or []}
    for version in sorted(set(tested) - set(RELEASES), key=Version):
        record = records.get(f"flashinfer-python {version}")
        assert record and record["verdict"] in watch.KNOWN_VERDICTS, version


def test_watch_record_is_well_formed(entry):
    watch = _upstream_watch()
    vllm = [str(v) for v in entry["watch"]["vllm_versions_tested"]]
    parsers = json.loads((REPO / "bench" / "results" / "vllm-parsers.json").read_text())
    measured = {t for t in parsers["targets"] if not t.startswith("double-")}
    assert measured <= set(vllm), "the vLLM releases whose parsers were measured"
    assert vllm == sorted(set(vllm), key=Version)
    records = entry["watch"]["records"] or []
    for record in records:
        assert set(record) == {"release", "verdict", "checked_at"}, record
        package, version = record["release"].split(" ")
        assert package in watch.PACKAGES and Version(version)
        assert record["verdict"] in watch.EXIT_CODES, record
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["checked_at"]), record
    by_release = {r["release"]: r["verdict"] for r in records}
    assert len(by_release) == len(records), "one record per release"
    for version in sorted(set(vllm) - measured, key=Version):
        assert by_release.get(f"vllm {version}") in watch.KNOWN_VERDICTS, version


def test_facts_are_complete(entry):
    assert "40756" in entry["upstream"]["reference"]
    bearing = entry["load_bearing_when"]
    assert bearing["mtp"] is True and bearing["min_max_num_seqs"] == 4
    assert "MTP" in bearing["condition"] and ">= 4" in bearing["condition"]
    assert bearing["evidence"] and all(len(e) > 40 for e in bearing["evidence"])
    assert entry["drift_exit_code"] == load_patcher().EXIT_DRIFT
    assert entry["drop_when"].strip()
    assert entry["delivery"]["invoked_by"] == "install.sh"
    assert entry["delivery"]["read_only"] is True


def test_status_check_is_a_patcher_command(entry):
    cmd = entry["status_check"].split()
    assert cmd[1] == f"{entry['delivery']['path']}/patcher.py"
    assert "--check" in cmd


def test_defaults_that_need_the_patch_enable_it(entry):
    """When the role's defaults make the patch load-bearing, they must also turn it on."""
    defaults_file = ROLE / "defaults" / "main.yml"
    if not defaults_file.exists():
        pytest.skip("role defaults not written yet")
    defaults = yaml.safe_load(defaults_file.read_text())
    bearing = entry["load_bearing_when"]
    needed = defaults.get("vllm_dual_fast_mtp") == bearing["mtp"] and int(
        defaults.get("vllm_dual_fast_max_num_seqs", 0)
    ) >= int(bearing["min_max_num_seqs"])
    assert not needed or defaults.get("vllm_dual_fast_patch_enabled") is True


def compose_templates() -> list[Path]:
    return sorted((ROLE / "templates").glob("**/compose.yml.j2"))


def test_compose_mounts_delivery_path_read_only(entry):
    templates = compose_templates()
    if not templates:
        pytest.skip("no compose template under roles/vllm_dual_fast/templates/ yet")
    path = re.escape(entry["delivery"]["path"])
    for template in templates:
        text = template.read_text()
        assert re.search(rf"^\s*-\s*\S*:{path}:ro\b", text, re.M), f"{template}: no :ro mount"


def _entrypoint_function():
    plugin = ROLE / "filter_plugins" / "vllm_dual_fast.py"
    if not plugin.exists():
        return None
    spec = importlib.util.spec_from_file_location("vdf_filters", plugin)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, "entrypoint_script", None)


def test_compose_entrypoint_runs_install_sh_before_serving(entry):
    templates = compose_templates()
    if not templates:
        pytest.skip("no compose template under roles/vllm_dual_fast/templates/ yet")
    hook = f"{entry['delivery']['path']}/install.sh"
    builder = _entrypoint_function()
    for template in templates:
        text = template.read_text()
        assert re.search(r"^\s*entrypoint:", text, re.M), f"{template}: no entrypoint"
        if hook in text:  # written out in the template itself
            script = text
        else:  # built by the role's filter plugin
            assert builder, f"{template}: entrypoint neither runs {hook} nor comes from a filter"
            script = builder(["--model", "m"], True, False)
            assert hook not in builder(["--model", "m"], False, False), "patch off: no hook"
        lines = [ln.strip() for ln in script.splitlines()]
        hook_at = next(i for i, ln in enumerate(lines) if hook in ln)
        serve_at = next(i for i, ln in enumerate(lines) if "vllm serve" in ln)
        assert "set -e" in script and hook_at < serve_at, script
