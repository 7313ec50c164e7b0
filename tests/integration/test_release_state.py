"""The serving release as one object (the domain library's release module,
module_utils/vllm_dual_fast_domain/release.py): which release a run judges as new, what a
failure falls back to, and what a release folder keeps (manifest, verdict). The cases are the
rig states an interrupted or failed switch leaves behind."""

import pytest
from ansible.module_utils.vllm_dual_fast_domain import release

A = "/opt/vllm-dual-fast/releases/aaaaaaaaaaaaaaaa"
B = "/opt/vllm-dual-fast/releases/bbbbbbbbbbbbbbbb"


def link(target):
    """ansible.builtin.stat's result for a link to `target` (None: no link there)."""
    if target is None:
        return {"stat": {"exists": False}}
    return {"stat": {"exists": True, "islnk": True, "lnk_source": target}}


def switch(to, current, last_good, legacy_report=None):
    return release.release_switch({"release": to, "current": link(current),
                                   "last_good": link(last_good), "legacy_report": legacy_report})


def test_a_release_already_proven_here_is_unchanged_and_rechecked_on_failure():
    judged = switch(A, current=A, last_good=A)
    assert judged["is_new"] is False
    assert judged["fallback"] == "recheck"
    assert judged["rollback_to"] == ""


def test_a_new_release_falls_back_to_last_good():
    judged = switch(B, current=A, last_good=A)
    assert judged["is_new"] is True
    assert (judged["fallback"], judged["rollback_to"]) == ("restore", A)


def test_an_interrupted_switch_is_judged_again_not_taken_as_proven():
    # `current` moved to B (or B even started) but no health check passed: B is still new and a
    # failure goes back to A, although `current` already says B.
    judged = switch(B, current=B, last_good=A)
    assert judged["is_new"] is True
    assert (judged["fallback"], judged["rollback_to"]) == ("restore", A)


def test_going_back_to_last_good_after_an_interrupted_switch_is_not_new():
    judged = switch(A, current=B, last_good=A)
    assert judged["is_new"] is False
    assert judged["fallback"] == "recheck"


def test_a_rig_where_nothing_ever_passed_stops_a_failing_release():
    assert switch(B, current=None, last_good=None)["fallback"] == "stop"
    # The first release, interrupted after its switch: still nothing proven.
    assert switch(B, current=B, last_good=None)["fallback"] == "stop"


@pytest.mark.parametrize(("report", "adopted"), [
    ({"release": "aaaaaaaaaaaaaaaa", "healthy": True}, A),
    ({"release": "aaaaaaaaaaaaaaaa", "healthy": "True"}, A),
    ({"release": "aaaaaaaaaaaaaaaa", "healthy": False}, ""),
    ({"release": "bbbbbbbbbbbbbbbb", "healthy": True}, ""),
    ({}, ""),
])
def test_a_rig_from_before_last_good_adopts_current_only_if_its_report_says_healthy(report,
                                                                                  adopted):
    judged = switch(B, current=A, last_good=None, legacy_report=report)
    assert judged["last_good"] == adopted
    assert judged["last_good_link"] == ""
    assert judged["fallback"] == ("restore" if adopted else "stop")


def test_the_speed_baseline_is_the_last_good_release_s_own_verdict():
    verdict = {"report": {"release": "aaaaaaaaaaaaaaaa", "healthy": True,
                          "smoke": {"speed": {"c1": 1}}}}
    rig_report = {"release": "bbbbbbbbbbbbbbbb", "healthy": False}
    assert release.release_baseline(verdict, rig_report, A) == verdict["report"]
    # A verdict of another release (a folder copied by hand) is no baseline for A.
    assert release.release_baseline(verdict, rig_report, B) == rig_report
    assert release.release_baseline({}, rig_report, A) == rig_report


def test_the_manifest_says_what_the_release_is_with_typed_values():
    manifest = release.release_manifest({
        "release": A, "image": "vllm/vllm-openai:v0.27.1", "model": "m", "revision": "r2",
        "served_model_name": "q", "patch_enabled": "True", "serve_args": ["--x"],
        "bind_address": "127.0.0.1", "port": "8000", "api_key_set": "False",
        "max_num_seqs": "4", "race_exposed": "True", "created_at": "2026-12-01T00:00:00+00:00"})
    assert manifest["release"] == "aaaaaaaaaaaaaaaa"
    assert manifest["patch_enabled"] is True and manifest["api_key_set"] is False
    assert manifest["race_exposed"] is True
    assert (manifest["port"], manifest["max_num_seqs"]) == (8000, 4)


def test_the_manifest_says_where_the_engine_itself_listens():
    base = {"release": A, "bind_address": "0.0.0.0", "port": "8000", "max_num_seqs": "4"}  # noqa: S104
    behind_proxy = release.release_manifest(
        {**base, "engine_address": "127.0.0.1", "engine_port": "8001"})
    assert (behind_proxy["engine_address"], behind_proxy["engine_port"]) == ("127.0.0.1", 8001)
    assert behind_proxy["port"] == 8000
    # A release written before the LAN proxy published the engine itself on bind_address:port.
    before = release.release_manifest(base)
    assert (before["engine_address"], before["engine_port"]) == ("0.0.0.0", 8000)  # noqa: S104


def test_the_verdict_keeps_when_the_gates_and_the_report():
    report = {"release": "aaaaaaaaaaaaaaaa", "healthy": True, "canary": True,
              "gates": {"race_check": ["pass", "race check: no bad trial"]}}
    verdict = release.release_verdict(report, "2026-12-01T10:00:00+00:00")
    assert verdict["healthy_at"] == "2026-12-01T10:00:00+00:00"
    assert verdict["canary"] is True and verdict["gates"]["race_check"][0] == "pass"
    assert verdict["report"] is report


def test_a_data_root_under_a_symbolic_link_keeps_the_release_unchanged(tmp_path):
    """The real ansible.builtin.stat of the links the role writes, with the data root a symbolic
    link to another disk (an owner moving /opt/vllm-dual-fast to a bigger one): the release that
    serves and passed is unchanged, and `current` and `last-good` name the configured folders
    prune compares with."""
    import json
    import os

    from ansible_runner import run_playbook

    disk = tmp_path / "bigdisk/vllm-dual-fast"
    (disk / "releases/aaaaaaaaaaaaaaaa").mkdir(parents=True)
    root = tmp_path / "opt-vllm-dual-fast"
    root.symlink_to(disk)
    served = f"{root}/releases/aaaaaaaaaaaaaaaa"
    for name in ("current", "last-good"):          # as the role's file task writes them
        os.symlink(served, root / name)
    os.symlink("releases/aaaaaaaaaaaaaaaa", disk / "relative")    # one made by hand
    out = tmp_path / "stats.json"
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        *({"ansible.builtin.stat": {"path": str(root / name)}, "register": f"_{i}"}
          for i, name in enumerate(("current", "last-good", "relative"))),
        {"ansible.builtin.copy": {"content": "{{ [_0, _1, _2] | to_json }}", "dest": str(out),
                                  "mode": "0644"}},
    ]}]
    result, text = run_playbook(tmp_path, play)
    assert result.returncode == 0, text
    current, last_good, relative = json.loads(out.read_text())
    assert current["stat"]["lnk_source"].startswith(str(disk))    # what made every run new
    judged = release.release_switch({"release": served, "current": current,
                                     "last_good": last_good, "legacy_report": None})
    assert judged["is_new"] is False
    assert judged["current"] == judged["last_good"] == served
    assert release.link_target(relative) == f"{root}/releases/aaaaaaaaaaaaaaaa"


# A release is what runs: its name covers the image's id or digest and the model's commit.
IMAGE_ID = "sha256:" + "1" * 64
DIGEST = "sha256:" + "2" * 64
COMMIT = "3" * 40


@pytest.mark.parametrize("read, image, revision, expected", [
    # Pulled: the repo digest of this image's repository (not another tag's repository).
    (f'{IMAGE_ID} ["other/repo@sha256:{"9" * 64}","vllm/vllm-openai@{DIGEST}"]\n{COMMIT}\n',
     "vllm/vllm-openai:v0.27.1", "main",
     {"image_id": IMAGE_ID, "image_digest": DIGEST, "model_commit": COMMIT}),
    # Loaded from an archive or built here: no repo digest, the id names it.
    (f"{IMAGE_ID} []\n", "vdf-vllm-double:latest", "main",
     {"image_id": IMAGE_ID, "image_digest": "", "model_commit": ""}),
    # A registry with a port; the revision given as a commit names itself (no ref file).
    (f'{IMAGE_ID} ["reg:5000/x@{DIGEST}"]\n', "reg:5000/x:tag", COMMIT,
     {"image_id": IMAGE_ID, "image_digest": DIGEST, "model_commit": COMMIT}),
    # Nothing there yet (first run before the pull and download): nothing made up.
    ("\n", "x:1", "main", {"image_id": "", "image_digest": "", "model_commit": ""}),
    ("garbage\nnot-a-commit\n", "x:1", "main",
     {"image_id": "", "image_digest": "", "model_commit": ""}),
])
def test_release_identity_reads_what_runs(read, image, revision, expected):
    assert release.release_identity(read, image, revision) == expected


def test_the_same_files_over_another_image_or_model_commit_are_another_release():
    files = {"compose.yml": {"content": "image: x:1", "mode": "0644"}}
    same = {"image_id": IMAGE_ID, "image_digest": "", "model_commit": COMMIT}
    name = release.release_name(files, same)
    assert len(name) == 16 and name == release.release_name(dict(files), dict(same))
    rebuilt = {**same, "image_id": "sha256:" + "4" * 64}      # a re-pulled or rebuilt tag
    moved = {**same, "model_commit": "5" * 40}                # a model branch that moved
    assert len({name, release.release_name(files, rebuilt),
                release.release_name(files, moved)}) == 3
