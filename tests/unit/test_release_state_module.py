"""The module that reads the rig's release state in one run
(library/vllm_dual_fast_release_state.py), on real folders and links: what it returns is what
release_switch and release_baseline decide from, so each case is read by the module and then
judged by the domain library's release module, as deploy.yml does through its filters."""

import importlib.util
import json
import os

from ansible.module_utils.vllm_dual_fast_domain import release
from ansible_runner import ROLE


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


state_module = _load("vllm_dual_fast_release_state",
                     ROLE / "library/vllm_dual_fast_release_state.py")


def rig(root, releases=("aaaa", "bbbb")):
    """A data root with release folders, each with its manifest and a verdict naming it."""
    for name in releases:
        folder = root / "releases" / name
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps({"release": name, "image": "img"}))
        (folder / "verdict.json").write_text(json.dumps({"report": {"release": name, "x": 1}}))
    (root / "state").mkdir()
    return root


def read(root):
    return state_module.read_state(str(root / "current"), str(root / "last-good"),
                                   str(root / "state/report.json"),
                                   str(root / "state/speed-reference.json"))


def decide(root, to):
    """deploy.yml's decision from the module's state: (switch, baseline report)."""
    state = read(root)
    switch = release.release_switch({"release": str(root / "releases" / to),
                                     "current": state["current"], "last_good": state["last_good"],
                                     "legacy_report": state["report"]})
    verdict = (state["releases"].get(switch["last_good"]) or {}).get("verdict") or {}
    return switch, release.release_baseline(verdict, state["report"], switch["last_good"])


def test_a_new_release_goes_back_to_last_good_and_is_compared_with_its_verdict(tmp_path):
    root = rig(tmp_path)
    os.symlink(root / "releases/aaaa", root / "current")
    os.symlink("releases/aaaa", root / "last-good")    # a relative link, as `ln -s` may write
    switch, baseline = decide(root, "bbbb")
    assert (switch["is_new"], switch["fallback"]) == (True, "restore")
    assert switch["rollback_to"] == str(root / "releases/aaaa")
    assert baseline == {"release": "aaaa", "x": 1}


def test_a_rig_with_nothing_deployed_reads_empty_and_has_nothing_to_fall_back_to(tmp_path):
    root = rig(tmp_path, releases=())
    state = read(root)
    assert state["current"] == {"path": str(root / "current"), "exists": False, "islnk": False}
    assert (state["current_release"], state["releases"], state["report"]) == ("", {}, {})
    switch, baseline = decide(root, "aaaa")
    assert (switch["fallback"], baseline) == ("stop", {})


def test_a_rig_from_before_last_good_adopts_current_when_its_report_was_healthy(tmp_path):
    root = rig(tmp_path)
    os.symlink(root / "releases/aaaa", root / "current")
    (root / "state/report.json").write_text(json.dumps({"release": "aaaa", "healthy": True}))
    switch, _ = decide(root, "bbbb")
    assert switch["last_good"] == str(root / "releases/aaaa") and switch["fallback"] == "restore"


def test_files_that_are_not_json_objects_read_as_empty(tmp_path):
    root = rig(tmp_path)
    os.symlink(root / "releases/aaaa", root / "current")
    (root / "releases/aaaa/manifest.json").write_text("[1, 2]")
    (root / "releases/aaaa/verdict.json").write_text("{half")
    (root / "state/speed-reference.json").write_text('{"c1": 50.0}')
    state = read(root)
    assert state["releases"][str(root / "releases/aaaa")] == {"verdict": {}, "manifest": {}}
    assert state["speed_reference"] == {"c1": 50.0}


def test_a_data_root_under_a_symbolic_link_keeps_the_link_s_own_path(tmp_path):
    # As the filters' own reading of `stat`: the release named by the link's text under the
    # configured root, not the resolved path (else every run would look new: docs/design.md).
    real = rig(tmp_path / "disk")
    os.symlink(real, tmp_path / "data")
    root = tmp_path / "data"
    os.symlink(root / "releases/aaaa", real / "current")
    os.symlink(root / "releases/aaaa", real / "last-good")
    switch, _ = decide(root, "aaaa")
    assert switch["is_new"] is False and switch["current"] == str(root / "releases/aaaa")
    assert read(root)["current"]["lnk_source"] == str(real / "releases/aaaa")
