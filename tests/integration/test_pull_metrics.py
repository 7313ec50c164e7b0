"""files/pull_metrics.py: the reports pull rigs upload, verified with real ssh-keygen signatures
as the fleet report verifies them, become series labelled with their rig: when the rig last had
news (so an alert sees it go quiet), its pull state, its verdict. A forged or unsigned upload is
counted apart and gives its rig no series. The file is checked by the real promtool."""

import datetime
import subprocess
import sys
from pathlib import Path

import pytest
from rig_metrics_stand_ins import PROMTOOL, parse, value
from test_fleet_report import RigKeys, pulled_report

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "files/pull_metrics.py"


@pytest.fixture
def fleet(tmp_path):
    keys = RigKeys(tmp_path / "keys")
    pulled = tmp_path / "pulled"
    pulled.mkdir()

    def run(uploads, with_keys=True):
        for name, body in uploads.items():
            (pulled / name).write_text(body)
        out = tmp_path / "textfile" / "pull.prom"
        out.parent.mkdir(exist_ok=True)
        argv = [sys.executable, str(SCRIPT), "--pulled", str(pulled), "--out", str(out)]
        done = subprocess.run(argv + (["--rig-keys", str(keys.path)] if with_keys else []),
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        run.text, run.err = out.read_text(), done.stderr
        return parse(run.text)

    run.keys = keys
    return run


def epoch(text):
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def states(samples, rig):
    return {dict(labels)["state"] for (name, labels), v in samples.items()
            if name == "vdf_pull_state" and dict(labels)["rig"] == rig and v == 1}


def test_each_verified_rig_has_its_news_time_state_and_verdict(fleet):
    applied = pulled_report("rig-a", {"state": "applied", "rc": 0, "at": "2026-12-03T10:01:00Z"},
                            checked_at="2026-12-03T10:00:00Z", release="aaaa000011112222")
    refused = pulled_report("rig-b", {"state": "refused", "rc": 1, "commit": "cd34" * 10,
                                      "at": "2026-12-03T11:30:00Z"},
                            checked_at="2026-12-02T08:00:00Z")
    samples = fleet({"rig-a.json": fleet.keys.upload("rig-a", applied),
                     "rig-b.json": fleet.keys.upload("rig-b", refused)})
    # a health check's time for an applied run, the run's own time for a refused one
    assert value(samples, "vdf_pull_report_timestamp_seconds", rig="rig-a") == epoch(
        "2026-12-03T10:00:00Z")
    assert value(samples, "vdf_pull_report_timestamp_seconds", rig="rig-b") == epoch(
        "2026-12-03T11:30:00Z")
    assert states(samples, "rig-a") == {"applied"} and states(samples, "rig-b") == {"refused"}
    assert value(samples, "vdf_pull_state", rig="rig-a", state="failed") == 0
    assert value(samples, "vdf_report_healthy", rig="rig-a") == 1
    assert value(samples, "vdf_report_info", rig="rig-a", release="aaaa000011112222") == 1
    assert value(samples, "vdf_pull_unverified_uploads") == 0
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=fleet.text,
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize(("pull", "state"), [
    ({"state": "release-failed", "rc": 1}, "rolled-back"),
    ({"state": "failed", "rc": 1}, "failed"),
    ({"state": "unchanged", "rc": 0}, "unchanged"),
    ({"rc": 3}, "failed"),    # a run that says no state but failed
])
def test_the_pull_state_names_what_the_alerts_watch(fleet, pull, state):
    body = pulled_report("rig-a", dict(pull, at="2026-12-03T10:00:00Z"))
    samples = fleet({"rig-a.json": fleet.keys.upload("rig-a", body)})
    assert states(samples, "rig-a") == {state}


def test_a_forged_or_unsigned_upload_gives_its_rig_no_series_and_is_counted(fleet):
    body = pulled_report("rig-a", {"state": "applied", "rc": 0})
    samples = fleet({"rig-a.json": fleet.keys.upload("rig-a", body, key="rig-c"),  # not rig-a's
                     "rig-b.json": fleet.keys.upload("rig-b", pulled_report(
                         "rig-b", {"state": "applied", "rc": 0}), key=False)})
    assert not [k for k in samples if dict(k[1]).get("rig")]
    assert value(samples, "vdf_pull_unverified_uploads") == 2
    assert "rig-a.json: not verified" in fleet.err


def test_without_the_rig_keys_nothing_is_taken_as_verified(fleet):
    body = pulled_report("rig-a", {"state": "applied", "rc": 0})
    samples = fleet({"rig-a.json": fleet.keys.upload("rig-a", body)}, with_keys=False)
    assert not [k for k in samples if dict(k[1]).get("rig")]
    assert value(samples, "vdf_pull_unverified_uploads") == 1


def test_a_newer_report_replaces_the_older_one_for_its_rig(fleet):
    old = pulled_report("rig-a", {"state": "applied", "rc": 0}, checked_at="2026-12-01T00:00:00Z")
    fleet({"rig-a.json": fleet.keys.upload("rig-a", old)})
    new = pulled_report("rig-a", {"state": "unchanged", "rc": 0}, checked_at="2026-12-03T00:00:00Z",
                        healthy=False)
    samples = fleet({"rig-a.json": fleet.keys.upload("rig-a", new)})
    assert value(samples, "vdf_pull_report_timestamp_seconds", rig="rig-a") == epoch(
        "2026-12-03T00:00:00Z")
    assert value(samples, "vdf_report_healthy", rig="rig-a") == 0
    assert states(samples, "rig-a") == {"unchanged"}


def test_the_gpu_telemetry_a_report_carries_becomes_the_rig_s_gpu_series(fleet):
    body = pulled_report("rig-a", {"state": "applied", "rc": 0}, speed_conditions={
        "power_limit_w": [300.0, 280.0], "temperature_c": [61.0, 84.0],
        "sm_clock_mhz": [1695.0, 1395.0], "clocks_event_reasons": ["0x0", "0x0000000000000020"],
        "driver_version": "580.95.05"})
    samples = fleet({"rig-a.json": fleet.keys.upload("rig-a", body)})
    assert value(samples, "vdf_gpu_temperature_celsius", rig="rig-a", gpu="1") == 84
    assert value(samples, "vdf_gpu_power_limit_watts", rig="rig-a", gpu="1") == 280
    assert value(samples, "vdf_gpu_sm_clock_hertz", rig="rig-a", gpu="0") == 1695e6
    assert value(samples, "vdf_gpu_clocks_event_active", rig="rig-a", gpu="1",
                 reason="sw_thermal_slowdown") == 1
    assert value(samples, "vdf_gpu_clocks_event_active", rig="rig-a", gpu="0",
                 reason="sw_thermal_slowdown") == 0


def test_a_rig_that_pushes_keeps_only_its_report_s_news_and_state(fleet, tmp_path):
    """Issue 45, item 9: a rig whose agent writes its GPU and verdict series live gets only
    vdf_pull_* from its report, so no alert fires twice (once per job) for one fact."""
    body = pulled_report("rig-a", {"state": "applied", "rc": 0},
                         checked_at="2026-12-03T10:00:00Z",
                         speed_conditions={"temperature_c": [84.0], "power_limit_w": [280.0]})
    other = pulled_report("rig-b", {"state": "applied", "rc": 0}, speed_conditions={
        "temperature_c": [70.0]})
    (tmp_path / "pulled").mkdir(exist_ok=True)
    for name, report in (("rig-a", body), ("rig-b", other)):
        (tmp_path / "pulled" / f"{name}.json").write_text(fleet.keys.upload(name, report))
    out = tmp_path / "pushing.prom"
    done = subprocess.run([sys.executable, str(SCRIPT), "--pulled", str(tmp_path / "pulled"),
                           "--rig-keys", str(fleet.keys.path), "--out", str(out),
                           "--pushing", "rig-a"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    samples = parse(out.read_text())
    assert {name for name, labels in samples if dict(labels).get("rig") == "rig-a"} == {
        "vdf_pull_report_timestamp_seconds", "vdf_pull_state"}
    assert value(samples, "vdf_gpu_temperature_celsius", rig="rig-b", gpu="0") == 70
    assert value(samples, "vdf_report_healthy", rig="rig-b") == 1


def test_without_ssh_keygen_it_says_so_and_keeps_the_last_file(fleet, tmp_path):
    """A monitoring host without openssh-client cannot check a signature: said as that, exit 2,
    the series written before left as they were (not every upload called forged)."""
    report = pulled_report("rig-a", {"state": "applied", "rc": 0, "at": "2026-12-03T10:01:00Z"},
                           checked_at="2026-12-03T10:00:00Z")
    fleet({"rig-a.json": fleet.keys.upload("rig-a", report)})
    out = tmp_path / "textfile" / "pull.prom"
    before = out.read_text()
    bare = tmp_path / "bin"    # python alone on PATH, no ssh-keygen
    bare.mkdir()
    (bare / "python3").symlink_to(sys.executable)
    done = subprocess.run([sys.executable, str(SCRIPT), "--pulled", str(tmp_path / "pulled"),
                           "--rig-keys", str(fleet.keys.path), "--out", str(out)],
                          capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": str(bare)})
    assert done.returncode == 2, done.stderr
    assert "ssh-keygen" in done.stderr and "openssh-client" in done.stderr, done.stderr
    assert "does not verify" not in done.stderr
    assert out.read_text() == before


@pytest.mark.parametrize("unit", [
    "roles/vllm_dual_fast_monitoring/templates/etc/systemd/system/vllm-dual-fast-pull-metrics.service.j2",
    "roles/vllm_dual_fast/templates/etc/systemd/system/vllm-dual-fast-metrics.service.j2",
])
def test_the_units_leave_their_script_a_temporary_folder_to_write(unit):
    """Under ProtectSystem=strict only ReadWritePaths are writable, /tmp included: pull_metrics.py
    verifies each upload's signature through a temporary file (fleet_report.py), so without a
    private /tmp every run failed ("No usable temporary directory", the fleet scenario's
    monitoring host) and no pull rig ever became a series."""
    lines = (ROOT / unit).read_text().splitlines()
    assert "ProtectSystem=strict" in lines
    assert "PrivateTmp=yes" in lines
