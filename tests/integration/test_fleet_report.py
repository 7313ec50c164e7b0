"""files/fleet_report.py: pure functions and the CLI on report folders in tmp_path."""

import json
import pathlib
import subprocess

import jsonschema
import pytest
from vllm_double_fixtures import load_file_module

fleet = load_file_module("fleet_report")
signed = load_file_module("signed_reports")
SCHEMA = pathlib.Path(__file__).parents[2] / "files/schemas/signed-report.schema.json"

SPEED_NOW = {"c1": {"tokens_per_s": 41.0, "ttft_s": 0.3}, "cN": {"tokens_per_s": 30.0},
             "concurrency": 4, "max_tokens": 256}
NOW = fleet.parse_time("2026-12-01T12:00:00Z")
SPEED_BEFORE = {"c1": {"tokens_per_s": 50.0}, "cN": {"tokens_per_s": 30.0}, "concurrency": 4}


def report(host, checked_at="2026-11-30T00:00:00", healthy=True, patch="patched", **extra):
    """A rig report shaped as roles/vllm_dual_fast/tasks/health.yml writes it."""
    body = {
        "host": host, "release": f"rel-{host}", "image": "vllm/vllm-openai:v0.33.0",
        "checked_at": checked_at, "healthy": healthy, "failures": [],
        "smoke": {"ok": healthy, "aggregate": {"ok": 4}}, "kernel_xid_lines": [],
        "patch_status": patch,
        "patch_report": {"status": patch, "flashinfer_version": "0.7.2.post1"},
    }
    body.update(extra)
    return body


def write_reports(folder, *reports):
    folder.mkdir(parents=True, exist_ok=True)
    for r in reports:
        (folder / f"{r['host']}.json").write_text(json.dumps(r))
    return folder


def write_states(folder, states):
    """A --state-dir as playbooks/tasks/rollout_record.yml writes it: DIR/<host>.json each."""
    folder.mkdir(parents=True, exist_ok=True)
    for host, value in states.items():
        (folder / f"{host}.json").write_text(json.dumps(dict(value, host=host)))
    return folder


# --- pure functions ----------------------------------------------------------------------------

@pytest.mark.parametrize("status, expected", [
    ("patched", "patched"), ("already-patched", "patched"), ("upstream-fixed", "upstream-fixed"),
    ("unpatched", "pinned"), ("drift", "drift"), (None, "unknown"), ("", "unknown"),
    ("unknown", "unknown"),
])
def test_patch_class(status, expected):
    assert fleet.patch_class(status) == expected


def test_speed_figures_reads_smoke_speed_shapes():
    assert fleet.speed_figures(SPEED_NOW) == {"c1": 41.0, "c4": 30.0, "c4_concurrency": 4}
    assert fleet.speed_figures({"speed": SPEED_NOW})["c1"] == 41.0  # a whole smoke report
    assert fleet.speed_figures({"c1": 40, "c4": 120}) == {"c1": 40.0, "c4": 120.0,
                                                          "c4_concurrency": 4}
    eight = dict(SPEED_NOW, concurrency=8)
    assert fleet.speed_figures(eight)["c4_concurrency"] == 8
    assert fleet.speed_figures({"skipped": "the smoke failed"}) == {
        "c1": None, "c4": None, "c4_concurrency": None}
    assert fleet.speed_figures(None)["c1"] is None
    assert fleet.speed_figures({"c1": {"tokens_per_s": True}})["c1"] is None


def test_speed_cell():
    assert fleet.speed_cell(41.0, 50.0) == "41.0 (was 50.0, -18.0%)"
    assert fleet.speed_cell(41.0, None) == "41.0"
    assert fleet.speed_cell(None, 50.0) == "— (was 50.0)"
    assert fleet.speed_cell(None, None) == "—"
    assert fleet.speed_cell(88.0, None, 8, 4) == "88.0 at c=8"
    assert fleet.speed_cell(88.0, None, 4, 4) == "88.0"


def test_parse_time_and_newest_wins():
    assert fleet.parse_time("2026-11-30T00:17:27.887093") == fleet.parse_time(
        "2026-11-30T00:17:27.887093Z")
    assert fleet.parse_time("2026-11-30T02:00:00+02:00") == fleet.parse_time(
        "2026-11-30T00:00:00")
    assert fleet.parse_time("yesterday") is None
    old, new = report("a", "2026-11-30T00:00:00"), report("a", "2026-11-30T00:05:00Z")
    assert fleet.merge_reports({"a": new}, {"a": old})["a"] is new
    assert fleet.merge_reports({"a": old}, {"a": new})["a"] is new
    same = report("a", "2026-11-30T00:00:00+00:00")
    assert fleet.merge_reports({"a": old}, {"a": same})["a"] is old  # a tie keeps the first
    undated = report("a", None)
    assert fleet.merge_reports({"a": undated}, {"a": old})["a"] is old
    assert fleet.merge_reports({"a": old}, {"a": undated})["a"] is old


def test_row_for_a_report_with_state():
    state = {"state": "updated", "previous_release": "rel-old", "previous_speed": SPEED_BEFORE}
    row = fleet.row_for("a", report("a", kernel_xid_lines=["Xid 31", "Xid 31"],
                                    vllm_version="0.33.0",
                                    smoke={"ok": True, "speed": SPEED_NOW}), state)
    assert row["state"] == "updated"
    assert (row["release"], row["previous_release"]) == ("rel-a", "rel-old")
    assert (row["vllm_version"], row["flashinfer_version"]) == ("0.33.0", "0.7.2.post1")
    assert (row["patch"], row["patch_status"]) == ("patched", "patched")
    assert (row["tokens_per_s_c1"], row["previous_tokens_per_s_c1"]) == (41.0, 50.0)
    assert (row["tokens_per_s_c4"], row["previous_tokens_per_s_c4"]) == (30.0, 30.0)
    assert row["xid_count"] == 2
    assert row["reason"] is None


def test_row_for_reads_versions_image_and_speed_from_the_report_only():
    r = report("a", smoke={"ok": True, "speed": SPEED_NOW}, vllm_version="0.33.0")
    # Keys no state writer produces (rollout_record.yml) are not read from the state.
    ignored = {"state": "unchanged", "speed": SPEED_BEFORE, "image": "img-from-state",
               "vllm_version": "0.1.0", "flashinfer_version": "0.0.1"}
    row = fleet.row_for("a", r, ignored)
    assert (row["tokens_per_s_c1"], row["previous_tokens_per_s_c1"]) == (41.0, None)
    assert (row["image"], row["vllm_version"], row["flashinfer_version"]) == (
        "vllm/vllm-openai:v0.33.0", "0.33.0", "0.7.2.post1")
    bare = fleet.row_for("b", None, dict(ignored, release="rel-b"))
    assert (bare["release"], bare["image"], bare["vllm_version"], bare["tokens_per_s_c1"]) == (
        "rel-b", None, None, None)


def test_row_for_a_failure_names_one_line_reason():
    failures = ["smoke: request 3: HTTP 500", "kernel log: 1 new Xid line:\n  NVRM: Xid 31"]
    row = fleet.row_for("a", report("a", healthy=False, failures=failures))
    assert row["state"] == "unhealthy"
    assert row["reason"] == "smoke: request 3: HTTP 500; kernel log: 1 new Xid line: NVRM: Xid 31"
    long = fleet.row_for("b", None, {"state": "staging-failed", "reason": "x " * 200})
    assert len(long["reason"]) == signed.REASON_CHARS and long["reason"].endswith("...")
    assert "\n" not in long["reason"]
    assert (long["release"], long["patch"], long["xid_count"]) == (None, "unknown", None)
    rolled = fleet.row_for("c", report("c", healthy=False, failures=["a"]),
                           {"state": "rolled-back", "reason": "speed -30% at c=1"})
    assert rolled["reason"] == "speed -30% at c=1"  # the rollout's reason first


def test_row_for_reads_a_version_2_report_s_failures_by_field():
    failures = [{"check": "mtp", "result": "cannot-judge", "line": "MTP acceptance unmeasured",
                 "advice": "a"},
                {"check": "smoke", "result": "fail", "line": "smoke c=4 failed:\n HTTP 500",
                 "advice": "b"}]
    row = fleet.row_for("a", report("a", healthy=False, failures=failures, schema_version=2))
    assert row["state"] == "unhealthy"
    assert row["reason"] == "[mtp] MTP acceptance unmeasured; [smoke] smoke c=4 failed: HTTP 500"


@pytest.mark.parametrize("version", [3, "2", None, True])
def test_a_report_of_an_unknown_schema_version_is_a_row_saying_so_never_misread(version):
    row = fleet.row_for("a", report("a", healthy=True, schema_version=version))
    assert (row["state"], row["healthy"], row["release"]) == ("no-report", None, None)
    assert row["reason"] == (f"report of unknown schema version {version} (a newer role wrote "
                             "it?): not read")


def test_row_for_without_state_or_report():
    assert fleet.row_for("a", report("a"))["state"] == "healthy"
    assert fleet.row_for("a", None, None)["state"] == "no-report"
    assert fleet.row_for("a", report("a", patch_status=None))["patch"] == "patched"  # from
    # patch_report.status when the report has no patch_status


def rows(*specs):
    """Rows from (host, state, patch status) triples."""
    return [fleet.row_for(h, report(h, patch=p), {"state": s}) for h, s, p in specs]


def test_footer_patch_droppable_when_every_reachable_rig_is_upstream_fixed():
    result = fleet.footer(rows(("a", "updated", "upstream-fixed"),
                               ("b", "unchanged", "upstream-fixed"),
                               ("c", "unreachable", "patched")))
    assert result["states"] == {"updated": 1, "unchanged": 1, "unreachable": 1}
    assert result["patch_droppable"] is True
    assert result["lines"][0] == "3 rigs: 1 updated, 1 unchanged, 1 unreachable"
    assert result["lines"][1] == ("Every reachable rig reports upstream-fixed: the patch can be "
                                  "dropped fleet-wide (1 unreachable rig not counted).")


def test_footer_names_the_rigs_that_still_need_the_patch():
    result = fleet.footer(rows(("a", "updated", "upstream-fixed"),
                               ("b", "not-reached", "already-patched"),
                               ("c", "failed", "unpatched")))
    assert result["patch_droppable"] is False
    assert result["patch_holding"] == ["b", "c"]
    assert result["lines"][1] == ("The patch stays: 2 of 3 reachable rigs do not report "
                                  "upstream-fixed (b patched, c pinned).")
    assert result["pinned"] == ["c"]
    assert "vllm#40756" in result["lines"][2]


def test_footer_of_no_reachable_rig_drops_nothing():
    result = fleet.footer(rows(("a", "unreachable", "upstream-fixed")))
    assert result["patch_droppable"] is False
    assert fleet.footer([])["lines"] == ["0 rigs: none"]


def test_footer_counts_every_row_whatever_its_state():
    # A rollout state is one of STATES (checked on input), any other row's one of
    # DERIVED_STATES (state_of): the footer counts those, in that order, and misses no row.
    rollout = [fleet.row_for(f"r{i}", report(f"r{i}"), {"state": s})
               for i, s in enumerate(fleet.STATES)]
    derived = [fleet.row_for("h", report("h")), fleet.row_for("u", report("u", healthy=False)),
               fleet.row_for("n", None),
               fleet.row_for("p", report("p", pull={"ref": "x", "commit": "c", "rc": 2})),
               fleet.row_for("r", report("r", pull={"state": "refused", "commit": "c"})),
               fleet.row_for("s", report("s", pull={"state": "applied"}), now=NOW)]
    result = fleet.footer(derived + rollout)
    assert list(result["states"]) == list(fleet.STATES + fleet.DERIVED_STATES)
    assert sum(result["states"].values()) == result["rigs"] == len(derived + rollout)


def test_markdown_has_one_row_per_rig_and_escapes_cells():
    data = fleet.build_fleet({"a": report("a", image="img|odd",
                                          smoke={"ok": True, "speed": SPEED_NOW})},
                             {"a": {"state": "updated", "previous_speed": SPEED_BEFORE},
                              "b": {"state": "unreachable", "reason": "ssh: timed out"}},
                             "2026-11-30T00:00:00Z")
    text = fleet.render_markdown(data)
    lines = text.splitlines()
    table = [ln for ln in lines if ln.startswith("| ")]
    assert len(table) == 3  # header + 2 rigs
    assert "img\\|odd" in table[1]
    assert "41.0 (was 50.0, -18.0%)" in table[1]
    assert table[2].startswith("| b | unreachable |")
    assert table[2].endswith("| ssh: timed out |")
    assert lines[-1] == data["footer"]["lines"][-1]


# --- CLI ---------------------------------------------------------------------------------------

def run(capsys, *argv):
    """fleet_report.py's main on argv; the fixtures' reports are days old, so staleness (its own
    tests give --stale-after) is judged with a threshold they never reach."""
    if "--stale-after" not in argv:
        argv = (*argv, "--stale-after", 10 ** 9)
    code = fleet.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_pulled_rig_whose_last_run_failed_says_so_with_what_it_still_serves():
    commit = "ab12" * 10
    failed = report("a", pull={"ref": "fleet-live", "commit": commit, "rc": 1,
                               "at": "2026-11-30T01:00:00+00:00"})
    row = fleet.row_for("a", failed)
    assert row["state"] == "pull-failed"
    assert row["pull_commit"] == commit
    assert row["reason"] == (f"pull of fleet-live at {commit[:12]} failed (exit 1); "
                             "serving rel-a")
    applied = fleet.row_for("b", report("b", pull={"ref": "fleet-live", "commit": commit,
                                                   "rc": 0}))
    assert (applied["state"], applied["pull_commit"], applied["reason"]) == (
        "healthy", commit, None)
    # A rollout's own state still wins over what a rig pulled.
    assert fleet.row_for("a", failed, {"state": "updated"})["state"] == "updated"
    assert fleet.footer([row, applied])["states"] == {"healthy": 1, "pull-failed": 1}


def test_cli_merges_pulled_reports_and_writes_json_and_md(tmp_path, capsys):
    reports = write_reports(tmp_path / "reports",
                            report("rig1", "2026-11-30T00:00:00", patch="upstream-fixed"),
                            report("rig2", "2026-11-30T00:10:00", patch="upstream-fixed"))
    (reports / "fleet-20261129T000000Z.json").write_text('{"rows": []}')  # an earlier output
    (reports / "notes.json").write_text('{"not": "a report"}')
    pulled = write_reports(tmp_path / "pulled",
                           report("rig1", "2026-11-30T00:20:00Z", patch="upstream-fixed",
                                  release="rel-pulled"),
                           report("rig2", "2026-11-30T00:05:00", release="rel-stale"),
                           report("rig3", "2026-11-30T00:20:00", patch="upstream-fixed"))
    states = write_states(tmp_path / "states",
                          {"rig1": {"state": "updated", "previous_speed": SPEED_BEFORE},
                           "rig2": {"state": "unchanged"},
                           "rig4": {"state": "unreachable", "reason": "no answer"}})
    code, out, err = run(capsys, "--reports", reports, "--pulled", pulled, "--state-dir", states,
                         "--out", tmp_path / "out", "--print")
    assert code == 0
    [json_path] = list((tmp_path / "out").glob("fleet-*.json"))
    [md_path] = list((tmp_path / "out").glob("fleet-*.md"))
    assert json_path.stem == md_path.stem
    data = json.loads(json_path.read_text())
    by_host = {r["host"]: r for r in data["rows"]}
    assert list(by_host) == ["rig1", "rig2", "rig3", "rig4"]
    assert (by_host["rig1"]["release"], by_host["rig1"]["report_from"]) == ("rel-pulled", "pulled")
    assert (by_host["rig2"]["release"], by_host["rig2"]["report_from"]) == ("rel-rig2", "reports")
    assert by_host["rig3"]["state"] == "healthy"  # pulled only, no rollout state
    assert by_host["rig1"]["previous_tokens_per_s_c1"] == 50.0
    assert by_host["rig4"]["reason"] == "no answer"
    assert data["inputs"]["state"] == str(states)
    assert data["footer"]["patch_droppable"] is True
    assert out == md_path.read_text()
    assert "the patch can be dropped fleet-wide" in out
    assert "notes.json skipped (not a rig report: no host)" in err
    assert str(json_path) in err


def test_cli_without_print_prints_nothing_and_an_unreadable_report_is_a_row(tmp_path, capsys):
    reports = write_reports(tmp_path / "reports", report("rig1"))
    (reports / "rig2.json").write_text('{"host": "rig2", "checked')
    code, out, _ = run(capsys, "--reports", reports, "--out", tmp_path / "out")
    assert (code, out) == (0, "")
    data = json.loads(next((tmp_path / "out").glob("fleet-*.json")).read_text())
    rig2 = data["rows"][1]
    assert (rig2["host"], rig2["state"]) == ("rig2", "no-report")
    assert rig2["reason"] == "report rig2.json unreadable: JSONDecodeError"


@pytest.mark.parametrize("state_text, message", [
    ('["rig1"]', "rig1.json: expected an object, got list"),
    ('"updated"', "rig1.json: expected an object, got str"),
    ('{"state": "done"}', "rig1.json: unknown state 'done'"),
    ('{"state": ""}', "rig1.json: unknown state ''"),
    ("{broken", "rig1.json: not JSON"),
])
def test_cli_bad_state_exits_2(tmp_path, capsys, state_text, message):
    reports = write_reports(tmp_path / "reports", report("rig1"))
    states = tmp_path / "states"
    states.mkdir()
    (states / "rig1.json").write_text(state_text)
    code, out, err = run(capsys, "--reports", reports, "--state-dir", states,
                         "--out", tmp_path / "o")
    assert code == 2
    assert message in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv", [
    ["--reports", "{tmp}/missing", "--out", "{tmp}/o"],
    ["--reports", "{tmp}", "--pulled", "{tmp}/file", "--out", "{tmp}/o"],
    ["--reports", "{tmp}", "--state-dir", "{tmp}/missing", "--out", "{tmp}/o"],
    ["--reports", "{tmp}", "--state-dir", "{tmp}/file", "--out", "{tmp}/o"],
    # --state FILE is gone; argparse reads --state as an abbreviation of --state-dir, and a
    # file is not a folder.
    ["--reports", "{tmp}", "--state", "{tmp}/file", "--out", "{tmp}/o"],
    ["--reports", "{tmp}"],
])
def test_cli_bad_input_exits_2(tmp_path, capsys, argv):
    (tmp_path / "file").write_text("{}")
    code, out, _ = run(capsys, *[a.format(tmp=tmp_path) for a in argv])
    assert (code, out) == (2, "")
    assert not (tmp_path / "o").exists()


def test_cli_unwritable_out_exits_1(tmp_path, capsys):
    reports = write_reports(tmp_path / "reports", report("rig1"))
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run(capsys, "--reports", reports, "--out", blocker / "out")
    assert code == 1
    assert "fleet_report: error:" in err


def test_state_folder_inside_the_reports_folder_is_not_read_as_reports(tmp_path, capsys):
    reports = write_reports(tmp_path / "reports", report("rig1"))
    states = write_states(reports / "rollout-state", {"rig9": {"state": "updated",
                                                                "release": "rel-9"}})
    code, _, err = run(capsys, "--reports", reports, "--state-dir", states,
                       "--out", tmp_path / "o")
    assert code == 0
    data = json.loads(next((tmp_path / "o").glob("fleet-*.json")).read_text())
    # rig1 is in no rollout state, so its pushed report is left out: one row, the state's rig,
    # without a report (its state file is not taken for one).
    [row] = data["rows"]
    assert (row["host"], row["release"], row["report_from"]) == ("rig9", "rel-9", None)
    assert "rig9.json" not in err


def test_cli_reads_a_state_folder_and_a_pulled_folder_not_there_yet(tmp_path, capsys):
    """As playbooks/tasks/rollout_report.yml runs it: one state file per rig, pulled/ absent."""
    reports = write_reports(tmp_path / "reports",
                            report("rig1", smoke={"ok": True, "speed": SPEED_NOW}),
                            report("rig2", healthy=False, failures=["health: HTTP 503"]))
    states = tmp_path / "reports" / "rollout-state"
    states.mkdir()
    (states / "rig1.json").write_text(json.dumps(
        {"host": "rig1", "state": "updated", "reason": "", "release": "rel-rig1",
         "previous_release": "rel-0", "previous_speed": SPEED_BEFORE, "history": []}))
    (states / "rig2.json").write_text(json.dumps(
        {"host": "rig2", "state": "rolled-back", "reason": "", "previous_speed": {}}))
    (states / "other-name.json").write_text(json.dumps({"state": "unreachable",
                                                         "reason": "UNREACHABLE"}))
    code, out, err = run(capsys, "--reports", reports, "--pulled", reports / "pulled",
                         "--state-dir", states, "--out", reports, "--print")
    assert code == 0
    assert "pulled: " in err and "does not exist (yet)" in err
    data = json.loads(next(reports.glob("fleet-*.json")).read_text())
    by_host = {r["host"]: r for r in data["rows"]}
    assert list(by_host) == ["other-name", "rig1", "rig2"]
    assert (by_host["rig1"]["tokens_per_s_c1"], by_host["rig1"]["previous_tokens_per_s_c1"]) == (
        41.0, 50.0)
    assert by_host["rig2"]["reason"] == "health: HTTP 503"  # no reason recorded: the report's
    assert by_host["other-name"]["state"] == "unreachable"
    assert data["footer"]["states"] == {"updated": 1, "rolled-back": 1, "unreachable": 1}
    assert "| rig1 | updated | rel-rig1 |" in out
    # a second run reads its own first output in --reports and skips it
    code, _, err = run(capsys, "--reports", reports, "--state-dir", states, "--out", reports)
    assert code == 0
    assert "skipped" not in err and "unreadable" not in err


def test_with_a_rollout_state_pushed_reports_of_other_hosts_are_left_out(tmp_path):
    # reports/ keeps reports of rigs no longer in the inventory (and of simulated rigs); a
    # rollout's fleet report shows the rigs it rolled out to, plus the pulled rigs' uploads.
    reports, pulled, states, out = (tmp_path / d for d in ("reports", "pulled", "state", "out"))
    for folder in (reports, pulled, states, out):
        folder.mkdir()
    for host in ("rig-a", "old-rig"):
        (reports / f"{host}.json").write_text(json.dumps(
            {"host": host, "release": "r1", "healthy": True,
             "checked_at": "2026-11-30T00:00:00Z"}))
    (pulled / "nat-rig.json").write_text(json.dumps(
        {"host": "nat-rig", "release": "r2", "healthy": True,
         "checked_at": "2026-11-30T00:00:00Z"}))
    (states / "rig-a.json").write_text(json.dumps({"host": "rig-a", "state": "updated"}))
    assert fleet.main(["--reports", str(reports), "--pulled", str(pulled),
                              "--state-dir", str(states), "--out", str(out)]) == 0
    [written] = list(out.glob("fleet-*.json"))
    hosts = [row["host"] for row in json.loads(written.read_text())["rows"]]
    assert hosts == ["nat-rig", "rig-a"]


# --- lost rigs and rigs without a state file -----------------------------------------------------

LOST = "lost during the switch: may serve either release"


def test_a_lost_rig_is_a_state_of_its_own_counted_in_the_footer_and_not_as_reachable():
    assert "lost" in fleet.STATES
    result = fleet.footer(rows(("a", "updated", "upstream-fixed"),
                               ("b", "lost", "patched"),
                               ("c", "unreachable", "patched")))
    assert result["states"] == {"updated": 1, "lost": 1, "unreachable": 1}
    assert result["lines"][0] == "3 rigs: 1 updated, 1 lost, 1 unreachable"
    # What a lost rig serves now is not known: like an unreachable one, it holds nothing back.
    assert result["reachable"] == 1 and result["patch_droppable"] is True
    assert result["lines"][1] == ("Every reachable rig reports upstream-fixed: the patch can be "
                                  "dropped fleet-wide (1 unreachable and 1 lost rigs not "
                                  "counted).")


def test_cli_reads_a_lost_state_and_prints_its_reason(tmp_path, capsys):
    reports = write_reports(tmp_path / "reports", report("rig1"))
    states = write_states(tmp_path / "state", {"rig1": {"state": "lost", "reason": LOST}})
    code, out, err = run(capsys, "--reports", reports, "--state-dir", states,
                         "--out", tmp_path / "o", "--print")
    assert code == 0, err
    assert "| rig1 | lost | rel-rig1 |" in out and LOST in out
    assert "1 rig: 1 lost" in out


def test_cli_gives_a_row_to_every_listed_rig_even_without_a_state_file(tmp_path, capsys):
    # rig2 has a report but the rollout recorded nothing for it; rig3 has neither: both keep a
    # row, saying so, instead of vanishing; old-rig (not listed, no state) is no row: it is
    # listed apart.
    reports = write_reports(tmp_path / "reports", report("rig1"), report("rig2"),
                            report("old-rig"))
    states = write_states(tmp_path / "state", {"rig1": {"state": "updated"}})
    code, out, err = run(capsys, "--reports", reports, "--state-dir", states,
                         "--hosts", "rig1,rig2,rig3", "--out", tmp_path / "o")
    assert code == 0, err
    data = json.loads(next((tmp_path / "o").glob("fleet-*.json")).read_text())
    by_host = {r["host"]: r for r in data["rows"]}
    assert list(by_host) == ["rig1", "rig2", "rig3"]
    assert by_host["rig1"]["reason"] is None
    assert (by_host["rig2"]["state"], by_host["rig2"]["reason"]) == ("healthy", fleet.NO_STATE)
    assert (by_host["rig3"]["state"], by_host["rig3"]["reason"]) == ("no-report", fleet.NO_STATE)
    assert data["footer"]["rigs"] == 3
    assert [r["host"] for r in data["not_in_inventory"]] == ["old-rig"]


def test_cli_lists_the_rigs_even_before_any_state_is_recorded(tmp_path, capsys):
    states = tmp_path / "state"
    states.mkdir()
    code, _, err = run(capsys, "--reports", write_reports(tmp_path / "reports"),
                       "--state-dir", states, "--hosts", " rig1, ,rig1,rig2 ",
                       "--out", tmp_path / "o")
    assert code == 0, err
    data = json.loads(next((tmp_path / "o").glob("fleet-*.json")).read_text())
    assert [r["host"] for r in data["rows"]] == ["rig1", "rig2"]
    assert data["inputs"]["hosts"] == ["rig1", "rig2"]


def test_an_empty_host_list_adds_no_row(tmp_path, capsys):
    states = write_states(tmp_path / "state", {"rig1": {"state": "updated"}})
    code, _, err = run(capsys, "--reports", write_reports(tmp_path / "reports"),
                       "--state-dir", states, "--hosts", "", "--out", tmp_path / "o")
    assert code == 0, err
    data = json.loads(next((tmp_path / "o").glob("fleet-*.json")).read_text())
    assert [r["host"] for r in data["rows"]] == ["rig1"]


# --- rigs outside the inventory ------------------------------------------------------------------

def rollout_reports(tmp_path):
    """A reports folder as playbooks/tasks/rollout_report.yml reads it after a rollout of rig1
    and rig2 (both upstream-fixed, so the patch could be dropped)."""
    reports = write_reports(tmp_path / "reports",
                            report("rig1", patch="upstream-fixed"),
                            report("rig2", patch="upstream-fixed"))
    write_states(reports / "rollout-state", {"rig1": {"state": "updated"},
                                            "rig2": {"state": "unchanged"}})
    return reports


def rollout_fleet(capsys, reports, out):
    """fleet_report.py run as rollout_report.yml runs it; (the JSON written, the Markdown)."""
    code, text, err = run(capsys, "--reports", reports, "--pulled", reports / "pulled",
                          "--state-dir", reports / "rollout-state", "--hosts", "rig1,rig2",
                          "--out", out, "--print")
    assert code == 0, err
    [written] = list(out.glob("fleet-*.json"))
    return json.loads(written.read_text()), text


def test_a_stray_report_in_the_reports_folder_changes_no_count_and_no_footer(tmp_path, capsys):
    # A test run (or another inventory's rollout) left reports of rigs this inventory does not
    # have: a pulled one, healthy but patched (it would hold the patch back), and a pushed one.
    reports = rollout_reports(tmp_path)
    clean, clean_md = rollout_fleet(capsys, reports, tmp_path / "clean")
    (reports / "pulled").mkdir()
    (reports / "pulled" / "vdf-fleet-3.json").write_text(json.dumps(
        report("vdf-fleet-3", "2026-12-01T00:00:00Z", patch="patched")))
    (reports / "vdf-molecule-deploy.json").write_text(json.dumps(
        report("vdf-molecule-deploy", healthy=False, failures=["smoke: HTTP 500"])))
    stray, stray_md = rollout_fleet(capsys, reports, tmp_path / "stray")
    assert stray["footer"] == clean["footer"]
    assert clean["footer"]["patch_droppable"] is True
    assert stray["rows"] == clean["rows"]
    assert [r["host"] for r in stray["rows"]] == ["rig1", "rig2"]
    # Listed apart, said to be outside the inventory, with what their reports say.
    apart = {r["host"]: r for r in stray["not_in_inventory"]}
    assert list(apart) == ["vdf-fleet-3", "vdf-molecule-deploy"]
    assert (apart["vdf-fleet-3"]["state"], apart["vdf-fleet-3"]["report_from"]) == (
        "healthy", "pulled")
    assert apart["vdf-molecule-deploy"]["state"] == "unhealthy"
    assert clean["not_in_inventory"] == []
    assert "not in this inventory" not in clean_md
    table, _, aside = stray_md.partition("not in this inventory")
    assert "vdf-fleet-3" not in table and "| vdf-fleet-3 | healthy |" in aside
    assert "the patch can be dropped fleet-wide" in table


def test_a_state_of_a_rig_outside_the_list_is_listed_apart(tmp_path):
    data = fleet.build_fleet({"a": report("a", patch="upstream-fixed"),
                              "gone": report("gone")},
                             {"a": {"state": "updated"}, "gone": {"state": "failed"}},
                             "2026-12-01T00:00:00Z", hosts=["a"], rollout=True)
    assert [r["host"] for r in data["rows"]] == ["a"]
    assert [(r["host"], r["state"]) for r in data["not_in_inventory"]] == [("gone", "failed")]
    assert data["footer"]["states"] == {"updated": 1}
    assert data["footer"]["patch_droppable"] is True


def test_without_a_rig_list_every_rig_found_is_counted(tmp_path, capsys):
    # No --hosts (or an empty one): the folders are the inventory, as before.
    reports = write_reports(tmp_path / "reports", report("rig1", patch="upstream-fixed"))
    pulled = write_reports(tmp_path / "pulled", report("rig9", patch="patched"))
    for hosts in ([], ["--hosts", ""]):
        out = tmp_path / f"out{len(hosts)}"
        code, _, err = run(capsys, "--reports", reports, "--pulled", pulled, *hosts,
                           "--out", out)
        assert code == 0, err
        data = json.loads(next(out.glob("fleet-*.json")).read_text())
        assert [r["host"] for r in data["rows"]] == ["rig1", "rig9"]
        assert data["not_in_inventory"] == []
        assert data["footer"]["patch_holding"] == ["rig9"]


# --- what the rollout was, and how it ended, first --------------------------------------------

ROLLOUT = {"started_at": "2026-12-01T10:00:00+00:00", "controller_commit": "0123456789abcdef0",
           "controller_dirty": False, "canary": ["a"], "batches": [["a"], ["b", "c"]],
           "target": {"image": "vllm/vllm-openai:v0.33.0", "model": "org/m",
                      "model_revision": "main", "patch_enabled": True}}


def rows_of(**states):
    return [fleet.row_for(host, report(host), {"state": s, "reason": f"why {host}"})
            for host, s in states.items()]


def outcome_of(record, rows):
    return fleet.rollout_outcome(record, rows, fleet.footer(rows)["states"])


def test_an_ended_rollout_with_rigs_neither_updated_nor_unchanged_says_so():
    # Rows in no particular order; an unhealthy rig was not updated, whatever the counts say.
    ended = dict(ROLLOUT, ended_at="2026-12-01T10:20:00+00:00")
    said = outcome_of(ended, rows_of(c="unchanged", a="updated", b="staging-failed"))
    assert said == "Ended with rigs not updated (1 updated; 1 unchanged, 1 staging-failed)."


def test_outcome_names_the_canary_that_stopped_the_rollout():
    ended = dict(ROLLOUT, ended_at="2026-12-01T10:20:00+00:00", stop_reason="the canary (a): a")
    said = outcome_of(ended, rows_of(a="rolled-back", b="not-reached", c="not-reached"))
    assert said.startswith("Stopped at the canary a (rolled-back: why a)")


def test_outcome_names_the_batch_and_its_first_failed_rig():
    ended = dict(ROLLOUT, ended_at="2026-12-01T10:20:00+00:00")
    said = outcome_of(ended, rows_of(a="updated", b="updated", c="lost"))
    assert said.startswith("Stopped at batch 1 c (lost: why c)")


def test_outcome_of_a_rollout_that_reached_every_rig():
    ended = dict(ROLLOUT, ended_at="2026-12-01T10:20:00+00:00")
    said = outcome_of(ended, rows_of(a="updated", b="updated", c="unchanged",
                                                d="unreachable"))
    assert said == "Every reachable rig updated (2 updated; 1 unchanged, 1 unreachable)."
    running = outcome_of(ROLLOUT, rows_of(a="updated", b="not-reached"))
    assert running == "Still running: 1 of 2 rigs switched so far."


MAINTENANCE = dict(ROLLOUT, action="maintenance", ended_at="2026-12-01T10:20:00+00:00")


def test_a_maintenance_run_that_reached_every_rig_says_maintained():
    said = outcome_of(MAINTENANCE, rows_of(a="maintained", b="unchanged", c="maintained"))
    assert said == "Every reachable rig maintained (2 maintained; 1 unchanged)."


def test_a_failed_maintenance_stops_the_run_at_its_batch():
    said = outcome_of(MAINTENANCE, rows_of(a="maintained", b="maintenance-failed", c="not-reached"))
    assert said.startswith("Stopped at batch 1 b (maintenance-failed: why b)")


def test_a_maintenance_report_says_what_was_maintained_not_an_image(tmp_path):
    reports = write_reports(tmp_path / "reports", report("a"))
    states = write_states(tmp_path / "state", {"a": {"state": "maintained"}})
    record = tmp_path / "reports/rollout.json"
    record.write_text(json.dumps(dict(MAINTENANCE, batches=[["a"]])))
    out = tmp_path / "out"
    assert fleet.main(["--reports", str(reports), "--state-dir", str(states), "--hosts", "a",
                       "--rollout", str(record), "--out", str(out)]) == 0
    md = next(out.glob("fleet-*.md")).read_text().splitlines()
    assert md[2] == "**Every reachable rig maintained (1 maintained).**"
    assert md[4].startswith("Maintenance: kernel, NVIDIA modules and driver moved together")
    assert "Rolled out" not in "\n".join(md)


def test_the_markdown_starts_with_the_outcome_and_what_was_rolled_out(tmp_path):
    reports = write_reports(tmp_path / "reports", report("a"), report("b"))
    states = write_states(tmp_path / "state", {"a": {"state": "rolled-back", "reason": "speed"},
                                                "b": {"state": "not-reached"}})
    record = tmp_path / "reports/rollout.json"       # beside the rigs' reports: not a rig
    record.write_text(json.dumps(dict(ROLLOUT, batches=[["a"], ["b"]], controller_dirty=True,
                                      ended_at="2026-12-01T10:20:00+00:00")))
    out = tmp_path / "out"
    assert fleet.main(["--reports", str(reports), "--state-dir", str(states), "--hosts", "a,b",
                       "--rollout", str(record), "--out", str(out)]) == 0
    md = next(out.glob("fleet-*.md")).read_text().splitlines()
    assert md[2].startswith("**Stopped at the canary a (rolled-back: speed)")
    assert "image `vllm/vllm-openai:v0.33.0`, model `org/m` at `main`, FlashInfer patch on" in md[4]
    assert "commit `0123456789ab` (with uncommitted changes)" in md[5]
    body = json.loads(next(out.glob("fleet-*.json")).read_text())
    assert body["outcome"].startswith("Stopped at the canary a")
    assert [r["host"] for r in body["rows"]] == ["a", "b"] and not body["not_in_inventory"]


def test_a_missing_rollout_file_gives_a_report_without_those_lines(tmp_path):
    reports = write_reports(tmp_path / "reports", report("a"))
    out = tmp_path / "out"
    assert fleet.main(["--reports", str(reports), "--rollout", str(tmp_path / "none.json"),
                       "--out", str(out)]) == 0
    md = next(out.glob("fleet-*.md")).read_text().splitlines()
    assert md[2].startswith("| Host")
    assert json.loads(next(out.glob("fleet-*.json")).read_text())["outcome"] is None


def test_rows_carry_mtp_acceptance_and_the_switch_downtime(tmp_path):
    rig = report("a", mtp={"acceptance_rate": 0.443, "mean_acceptance_length": 2.773},
                 downtime_s=12.4)
    row = fleet.row_for("a", rig)
    assert (row["mtp_acceptance_length"], row["mtp_acceptance_rate"], row["downtime_s"]) == (
        2.773, 0.443, 12.4)
    cells = fleet.table_row(row)
    assert "2.77 (44 %)" in cells and 12.4 in cells
    bare = fleet.row_for("b", report("b"))
    assert bare["mtp_acceptance_length"] is None and bare["downtime_s"] is None
    md = fleet.render_markdown(fleet.build_fleet({"a": rig}, {}, "now"))
    assert "| MTP | Down s |" in md and "| 2.77 (44 %) | 12.4 |" in md


# --- pull mode: refused, failed before the switch, stale, and who uploaded ---------------------

COMMIT = "cd34" * 10


def pulled_report(host, pull, checked_at="2026-12-01T11:50:00Z", **extra):
    return report(host, checked_at, _from="pulled", pull=dict({"ref": "fleet-live"}, **pull),
                  **extra)


def test_a_refused_commit_is_a_pull_refused_row_with_the_commit_and_the_signer():
    refused = pulled_report("a", {"state": "refused", "commit": COMMIT, "rc": 1,
                                  "signer": "SHA256:abc", "reason": "No principal matched.",
                                  "at": "2026-12-01T11:55:00Z"})
    row = fleet.row_for("a", refused, now=NOW)
    assert (row["state"], row["pull_commit"], row["pull_signer"]) == (
        "pull-refused", COMMIT, "SHA256:abc")
    assert row["reason"] == (f"refused fleet-live at {COMMIT[:12]}: No principal matched. "
                             "(signer: SHA256:abc); serving rel-a")
    unsigned = pulled_report("b", {"state": "refused", "commit": COMMIT, "signer": "",
                                   "reason": "not signed", "at": "2026-12-01T11:55:00Z"})
    assert "not signed (signer: none)" in fleet.row_for("b", unsigned, now=NOW)["reason"]
    assert fleet.footer([row])["states"] == {"pull-refused": 1}


def test_a_failure_before_the_switch_is_pull_failed_with_its_reason_and_next_try():
    failed = pulled_report("a", {"state": "failed", "commit": COMMIT, "rc": 1,
                                 "reason": "cannot fetch the fleet repository: timeout",
                                 "next_try": "2026-12-01T12:40:00+00:00",
                                 "at": "2026-12-01T11:55:00Z"})
    row = fleet.row_for("a", failed, now=NOW)
    assert row["state"] == "pull-failed"
    assert row["reason"] == (f"pull of fleet-live at {COMMIT[:12]} failed before the switch: "
                             "cannot fetch the fleet repository: timeout; next try "
                             "2026-12-01T12:40:00+00:00; serving rel-a")
    rolled_back = pulled_report("b", {"state": "release-failed", "commit": COMMIT, "rc": 1,
                                      "at": "2026-12-01T11:55:00Z"})
    assert fleet.row_for("b", rolled_back, now=NOW)["state"] == "pull-failed"


def test_an_expired_signature_is_a_refusal_naming_when_it_expired():
    expired = pulled_report("a", {"state": "expired", "commit": COMMIT, "rc": 1,
                                  "signer": "owner", "applied_commit": COMMIT,
                                  "valid_until": "2026-11-28T00:00:00Z",
                                  "reason": "the fleet's signature expired at "
                                            "2026-11-28T00:00:00Z (the ref is frozen or not "
                                            "re-signed)", "at": "2026-12-01T11:55:00Z"})
    row = fleet.row_for("a", expired, now=NOW)
    assert (row["state"], row["pull_valid_until"]) == ("pull-refused", "2026-11-28T00:00:00Z")
    assert "signature expired at 2026-11-28T00:00:00Z" in row["reason"]


OTHER = "ab12" * 10


def test_every_pulled_rig_not_on_the_refs_commit_is_named_before_the_table():
    # A frozen or steered host shows only as a rig whose applied commit is not the ref's: each
    # heartbeat refreshed the report's time, and nothing compared the commits.
    rigs = {
        "on-ref": pulled_report("on-ref", {"state": "unchanged", "commit": COMMIT,
                                           "applied_commit": COMMIT, "at": "2026-12-01T11:55Z"}),
        "frozen": pulled_report("frozen", {"state": "unchanged", "commit": OTHER,
                                           "applied_commit": OTHER, "at": "2026-12-01T11:55Z"}),
        "refused": pulled_report("refused", {"state": "refused", "commit": COMMIT,
                                             "applied_commit": OTHER, "reason": "not signed",
                                             "at": "2026-12-01T11:55Z"}),
        "new": pulled_report("new", {"state": "failed", "commit": COMMIT, "applied_commit": "",
                                     "at": "2026-12-01T11:55Z"}),
        "older-script": pulled_report("older-script", {"state": "applied", "commit": COMMIT,
                                                       "at": "2026-12-01T11:55Z"}),
        "pushed": report("pushed"),
    }
    result = fleet.build_fleet(rigs, {}, "now", now=NOW, ref_commit=COMMIT)
    flags = {r["host"]: r["off_ref"] for r in result["rows"]}
    assert flags == {"on-ref": False, "frozen": True, "refused": True, "new": True,
                     "older-script": False, "pushed": None}
    md = fleet.render_markdown(result)
    head = md.split("| Host |")[0]
    assert f"**Not on the ref's commit {COMMIT[:12]} (3 pulled rigs):**" in head
    assert f"- frozen: applied {OTHER[:12]}, pull unchanged" in head
    assert "- new: applied nothing known, pull failed" in head
    assert "on-ref" not in head and "pushed" not in head
    without = fleet.build_fleet(rigs, {}, "now", now=NOW)  # no --ref-commit: nothing flagged
    assert {r["off_ref"] for r in without["rows"]} == {None}
    assert "Not on the ref's commit" not in fleet.render_markdown(without)


def test_cli_ref_commit_flags_rigs_off_the_ref(tmp_path):
    reports = write_reports(tmp_path / "reports")
    pulled = write_reports(tmp_path / "pulled", pulled_report(
        "a", {"state": "unchanged", "commit": OTHER, "applied_commit": OTHER}))
    out = tmp_path / "out"
    assert fleet.main(["--reports", str(reports), "--pulled", str(pulled), "--out", str(out),
                       "--ref-commit", COMMIT, "--stale-after", "1e12"]) == 0
    [written] = out.glob("fleet-*.json")
    result = json.loads(written.read_text())
    assert result["ref_commit"] == COMMIT and result["rows"][0]["off_ref"] is True


@pytest.mark.parametrize("checked_at, pull_at, state", [
    ("2026-12-01T11:00:00Z", "2026-12-01T11:59:00Z", "healthy"),   # 1 h: fresh enough
    ("2026-12-01T10:00:00Z", "2026-12-01T11:59:00Z", "stale"),     # 2 h: fresh upload, old health
    ("not a time", "2026-12-01T11:59:00Z", "stale"),
])
def test_a_pulled_rig_whose_newest_health_check_is_old_is_stale(checked_at, pull_at, state):
    rig = pulled_report("a", {"state": "unchanged", "commit": COMMIT, "rc": 0, "at": pull_at},
                        checked_at=checked_at)
    row = fleet.row_for("a", rig, now=NOW, stale_after=fleet.STALE_AFTER_S)
    assert (row["state"], row["stale"]) == (state, state == "stale")
    if state == "stale" and checked_at.startswith("2026"):
        assert row["reason"] == ("stale: newest health check 2.0 h ago (over 4200 s); "
                                 "last known: healthy, serving rel-a")


def test_a_refused_rig_is_stale_only_once_its_pull_runs_stop():
    pull = {"state": "refused", "commit": COMMIT, "signer": "", "reason": "not signed"}
    alive = pulled_report("a", dict(pull, at="2026-12-01T11:50:00Z"), checked_at="2026-11-01")
    gone = pulled_report("a", dict(pull, at="2026-12-01T09:00:00Z"), checked_at="2026-11-01")
    assert fleet.row_for("a", alive, now=NOW)["state"] == "pull-refused"
    row = fleet.row_for("a", gone, now=NOW)
    assert row["state"] == "stale"
    assert row["reason"].startswith("stale: newest pull run 3.0 h ago")
    assert "last known: pull refused fleet-live" in row["reason"]


def test_a_pushed_report_or_a_rollout_state_is_never_stale():
    pushed = report("a", "2026-01-01T00:00:00Z")
    assert fleet.row_for("a", pushed, now=NOW)["state"] == "healthy"
    old_pull = pulled_report("b", {"state": "applied", "at": "2026-01-01"}, "2026-01-01")
    assert fleet.row_for("b", old_pull, {"state": "updated"}, now=NOW)["state"] == "updated"


def test_cli_stale_after_marks_and_counts_stale_rigs(tmp_path, capsys):
    reports = write_reports(tmp_path / "reports")
    pulled = write_reports(tmp_path / "pulled",
                           pulled_report("fresh", {"state": "unchanged"},
                                         checked_at=fleet.datetime.datetime.now(
                                             fleet.datetime.timezone.utc).isoformat()),
                           pulled_report("old", {"state": "unchanged"},
                                         checked_at="2026-01-01T00:00:00Z"))
    code, out, err = run(capsys, "--reports", reports, "--pulled", pulled, "--out",
                         tmp_path / "o", "--stale-after", 600, "--print")
    assert code == 0, err
    [written] = (tmp_path / "o").glob("fleet-*.json")
    result = json.loads(written.read_text())
    states = {row["host"]: row["state"] for row in result["rows"]}
    assert states == {"fresh": "healthy", "old": "stale"}
    assert result["footer"]["stale"] == 1 and result["footer"]["states"]["stale"] == 1
    assert "| old | stale |" in out
    assert "1 stale" in out and "Stale (pulled rigs" in out


def test_the_default_threshold_is_two_timer_runs_and_the_random_delay(tmp_path):
    assert fleet.STALE_AFTER_S == 2 * 1800 + 600
    assert fleet.build_parser().parse_args(["--reports", "r", "--out", "o"]).stale_after == 4200


def test_a_report_naming_another_host_than_its_file_is_flagged_under_the_file_name(tmp_path,
                                                                                   capsys):
    reports = write_reports(tmp_path / "reports")
    pulled = tmp_path / "pulled"
    write_reports(pulled, report("rig-b"))
    (pulled / "rig-a.json").write_text(json.dumps(report("rig-b", "2026-12-02T00:00:00Z",
                                                         release="rel-forged")))
    code, out, err = run(capsys, "--reports", reports, "--pulled", pulled, "--out",
                         tmp_path / "o")
    assert code == 0, err
    [written] = (tmp_path / "o").glob("fleet-*.json")
    result = json.loads(written.read_text())
    rows = {row["host"]: row for row in result["rows"]}
    assert rows["rig-b"]["release"] == "rel-rig-b"  # the forged report did not replace it
    assert rows["rig-b"]["host_mismatch"] is None
    assert rows["rig-a"]["host_mismatch"] == "rig-b"
    assert rows["rig-a"]["reason"].startswith("report names host 'rig-b', not the 'rig-a'")
    assert result["footer"]["host_mismatch"] == ["rig-a"]


# --- signed uploads: a rig speaks only for itself (--rig-keys) ----------------------------------

class RigKeys:
    """Real ed25519 keys of rigs, the fleet's list of rig keys (git's allowed-signers format, as
    an enrolment writes it), and uploads signed as the pull script signs them."""

    def __init__(self, folder, enrolled=("rig-a", "rig-b"), others=("rig-c",)):
        folder.mkdir()
        self.folder = folder
        for name in (*enrolled, *others):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name,
                            "-f", str(folder / name)], check=True)
        self.path = folder / "pull-rig-keys"
        self.path.write_text("".join(
            f'{name} namespaces="{signed.NAMESPACE}" {(folder / f"{name}.pub").read_text()}'
            for name in enrolled))

    def upload(self, rig, body: dict, key=None, tamper=None) -> str:
        """The envelope rig `rig` uploads: body's JSON text signed with `key` (default: the
        rig's own; None signs nothing); tamper(text) changes the text after signing."""
        text = json.dumps(body, indent=2)
        data = self.folder / f"{rig}-upload.json"
        data.write_text(text)
        signature = None
        if key is not False:
            (self.folder / f"{rig}-upload.json.sig").unlink(missing_ok=True)
            subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(self.folder / (key or rig)),
                            "-n", signed.NAMESPACE, str(data)], check=True, capture_output=True)
            signature = (self.folder / f"{rig}-upload.json.sig").read_text()
        envelope = {"format": signed.SIGNED_FORMAT, "version": 1, "namespace": signed.NAMESPACE,
                    "report": tamper(text) if tamper else text, "signature": signature}
        return json.dumps(envelope)


@pytest.fixture
def rig_keys(tmp_path):
    return RigKeys(tmp_path / "keys")


def signed_fleet(tmp_path, capsys, uploads: dict, keys=None, *more):
    """The CLI on pulled/<file> = body for each of `uploads`; returns (code, result, out, err)."""
    reports = write_reports(tmp_path / "reports", report("rig-b"))
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    for name, body in uploads.items():
        (pulled / name).write_text(body)
    argv = ["--reports", reports, "--pulled", pulled, "--out", tmp_path / "o", "--print", *more]
    if keys:
        argv += ["--rig-keys", keys]
    code, out, err = run(capsys, *argv)
    [written] = (tmp_path / "o").glob("fleet-*.json")
    return code, json.loads(written.read_text()), out, err


def test_a_report_signed_by_its_rig_is_verified_and_counted(tmp_path, capsys, rig_keys):
    good = rig_keys.upload("rig-a", pulled_report("rig-a", {"state": "unchanged", "rc": 0}))
    code, result, out, err = signed_fleet(tmp_path, capsys, {"rig-a.json": good}, rig_keys.path)
    assert code == 0, err
    rows = {row["host"]: row for row in result["rows"]}
    assert (rows["rig-a"]["state"], rows["rig-a"]["report_from"]) == ("healthy", "pulled")
    assert rows["rig-a"]["verified"] is True
    assert rows["rig-b"]["verified"] is None  # pushed: the controller fetched it itself
    assert result["not_verified"] == []
    assert result["footer"]["states"] == {"healthy": 2}
    assert "NOT verified" not in out


@pytest.mark.parametrize("case", ["other-rigs-report", "other-rigs-key", "changed-after-signing",
                                  "not-enrolled", "unsigned-envelope", "plain-report"])
def test_an_upload_that_does_not_verify_is_listed_apart_and_counted_nowhere(
        tmp_path, capsys, rig_keys, case):
    body = pulled_report("rig-a", {"state": "unchanged", "rc": 0})
    name, expected = "rig-a.json", None
    if case == "other-rigs-report":  # rig-b's own signed report, uploaded under rig-a's name
        upload, expected = rig_keys.upload("rig-b", pulled_report("rig-b", {"rc": 0})), "signature"
    elif case == "other-rigs-key":  # rig-b writes a report as rig-a, signed with its own key
        upload, expected = rig_keys.upload("rig-a", body, key="rig-b"), "signature"
    elif case == "changed-after-signing":
        upload = rig_keys.upload("rig-a", dict(body, healthy=False),
                                 tamper=lambda t: t.replace('"healthy": false',
                                                            '"healthy": true'))
        expected = "signature"
    elif case == "not-enrolled":
        name = "rig-c.json"
        upload = rig_keys.upload("rig-c", pulled_report("rig-c", {"rc": 0}))
        expected = "not in the rig keys file"
    elif case == "unsigned-envelope":
        upload, expected = rig_keys.upload("rig-a", body, key=False), "unsigned"
    else:
        upload, expected = json.dumps(body), "unsigned"
    code, result, out, err = signed_fleet(tmp_path, capsys, {name: upload}, rig_keys.path)
    assert code == 0, err
    rig = name[:-len(".json")]
    [apart] = result["not_verified"]
    assert (apart["file"], apart["rig"]) == (name, rig)
    assert expected in apart["why"], apart["why"]
    rows = {row["host"]: row for row in result["rows"]}
    assert rig not in rows  # no row, no state: never counted healthy
    assert result["footer"]["states"] == {"healthy": 1}  # rig-b's pushed report alone
    assert f"not verified: {apart['why']}" in out
    assert "not verified" in err


def test_a_rig_listed_in_the_inventory_with_only_a_forged_report_has_no_report(
        tmp_path, capsys, rig_keys):
    forged = rig_keys.upload("rig-a", pulled_report("rig-a", {"rc": 0}), key="rig-c")
    code, result, _, err = signed_fleet(tmp_path, capsys, {"rig-a.json": forged}, rig_keys.path,
                                        "--hosts", "rig-a,rig-b")
    assert code == 0, err
    rows = {row["host"]: row for row in result["rows"]}
    assert rows["rig-a"]["state"] == "no-report"
    assert "uploaded report not verified" in rows["rig-a"]["reason"]


def test_without_rig_keys_pulled_reports_are_read_but_flagged_loudly(tmp_path, capsys, rig_keys):
    signed = rig_keys.upload("rig-a", pulled_report("rig-a", {"rc": 0}))
    code, result, out, err = signed_fleet(tmp_path, capsys, {"rig-a.json": signed})
    assert code == 0, err
    rows = {row["host"]: row for row in result["rows"]}
    assert rows["rig-a"]["verified"] is False
    assert result["footer"]["pulled_unverified"] == ["rig-a"]
    assert "NOT verified" in out and "--rig-keys" in out
    assert "--rig-keys" in err


def test_a_rig_keys_file_that_does_not_exist_verifies_nothing(tmp_path, capsys, rig_keys):
    signed = rig_keys.upload("rig-a", pulled_report("rig-a", {"rc": 0}))
    code, result, _, err = signed_fleet(tmp_path, capsys, {"rig-a.json": signed},
                                        tmp_path / "no-such-keys")
    assert code == 0, err
    assert [a["rig"] for a in result["not_verified"]] == ["rig-a"]
    assert "does not exist" in err


def test_the_envelope_schema_describes_what_the_tests_upload(rig_keys):
    schema = json.loads(SCHEMA.read_text())
    jsonschema.validate(json.loads(rig_keys.upload("rig-a", report("rig-a"))), schema)
    jsonschema.validate(json.loads(rig_keys.upload("rig-a", report("rig-a"), key=False)), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"format": signed.SIGNED_FORMAT, "version": 1}, schema)


def test_gates_that_did_not_see_are_named_before_the_table(tmp_path):
    """Before: a canary whose race check could not run (warn under `auto`) or a rig whose kernel
    log was unreadable showed nothing of it in the fleet report."""
    judged = {"speed": {"result": "pass", "reason": ""},
              "race_check": {"result": "warn", "reason": "race check could not run: no GPU"},
              "kernel_xid": {"result": "cannot-judge",
                             "reason": "kernel log not readable here (dmesg: refused)"}}
    reports = write_reports(tmp_path / "reports", report("a", judged=judged), report("b"))
    out = tmp_path / "out"
    assert fleet.main(["--reports", str(reports), "--hosts", "a,b", "--out", str(out)]) == 0
    md = next(out.glob("fleet-*.md")).read_text().splitlines()
    table = md.index(next(line for line in md if line.startswith("| Host")))
    head = "\n".join(md[:table])
    assert "Gates that did not see on 1 rig" in head
    assert "- a: kernel-xid cannot-judge (kernel log not readable here" in head
    assert "race-check warn (race check could not run: no GPU)" in head
    body = json.loads(next(out.glob("fleet-*.json")).read_text())
    unseen = {r["host"]: [g["gate"] for g in r["gates_unseen"]] for r in body["rows"]}
    assert unseen == {"a": ["kernel-xid", "race-check"], "b": []}


def test_a_report_whose_gates_all_saw_adds_no_line():
    judged = {"speed": {"result": "pass", "reason": ""}, "mtp": {"result": "off", "reason": ""}}
    assert fleet.unseen_lines([fleet.row_for("a", report("a", judged=judged))]) == []


FP = ":".join(["A1"] * 32)


def test_each_lan_rigs_certificate_fingerprint_is_listed_for_clients_to_pin():
    rigs = {"lan": report("lan", lan_bind="0.0.0.0:8000", tls_fingerprint_sha256=FP),
            "blind": report("blind", lan_bind="0.0.0.0:8000", tls_fingerprint_sha256=""),
            "local": report("local")}
    result = fleet.build_fleet(rigs, {}, "now")
    rows = {r["host"]: r for r in result["rows"]}
    assert (rows["lan"]["lan_bind"], rows["lan"]["tls_fingerprint_sha256"]) == (
        "0.0.0.0:8000", FP)
    assert rows["local"]["tls_fingerprint_sha256"] is None
    tail = fleet.render_markdown(result).split("LAN binds over TLS")[1]
    assert f"- lan 0.0.0.0:8000: {FP}" in tail
    assert "- blind 0.0.0.0:8000: NOT READ" in tail and "- local" not in tail



def test_each_rigs_envelope_is_listed_and_a_rig_never_fitted_is_named():
    envelope = {"max_num_seqs": 3, "max_model_len": 65536, "max_num_batched_tokens": 2048,
                "kv_cache_memory_bytes": 1081344000, "kv_cache_tokens": 65995,
                "measured_at": "2026-12-07T01:16:29Z", "report": "fit-fitted-1.json"}
    rigs = {"fitted": report("fitted", envelope=envelope), "plain": report("plain"),
            "old": report("old", envelope="garbage")}
    result = fleet.build_fleet(rigs, {}, "now")
    rows = {r["host"]: r for r in result["rows"]}
    assert rows["fitted"]["envelope"]["max_num_seqs"] == 3
    assert rows["plain"]["envelope"] == {} and rows["old"]["envelope"] == {}
    tail = fleet.render_markdown(result).split("Envelopes (playbooks/fit.yml")[1]
    assert ("- fitted: 3 sequences x 65,536 tokens, 2,048 batched, KV pool pinned at 1.01 GiB; "
            "measured 2026-12-07T01:16:29Z (fit-fitted-1.json)") in tail
    assert "- plain: not fitted" in tail
    # a fleet no fit has measured says nothing of envelopes
    assert "Envelopes" not in fleet.render_markdown(fleet.build_fleet({"plain": report("plain")},
                                                                      {}, "now"))
