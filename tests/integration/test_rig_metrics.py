"""files/rig_metrics.py, the rig's textfile metrics, run as the timer runs it: against the
nvidia-smi double (two 3090s, knobs for a narrow link, a busy card, throttling, a lost driver),
the kernel-log double as journalctl and as dmesg (Xid lines written "into the kernel log"), and a
health report of the schema's shape. The file it writes is checked by the real promtool (the
format node_exporter's textfile collector reads) and read back sample by sample."""

import json
import os
import subprocess
import time

import pytest
from rig_metrics_stand_ins import (
    PROMTOOL,
    REPORT,
    XID_31,
    XID_79,
    CollectorRig,
    parse,
    rig_metrics,
    value,
)


@pytest.fixture
def rig(tmp_path):
    """run(**knobs) runs the collector as the rig's timer does and returns {(metric, labels):
    value} of the file it wrote; knobs go to the nvidia-smi double's config file."""
    collector = CollectorRig(tmp_path)

    def run(env=None, args=(), **knobs):
        run.text = collector.run(env, args, **knobs)
        return parse(run.text)

    run.lines = collector.lines
    run.report = collector.report
    run.last_good = collector.last_good
    run.folder = collector.folder
    run.write_kernel_line = collector.write_kernel_line
    return run


def test_each_card_s_telemetry_comes_from_nvidia_smi(rig):
    samples = rig(temperature_c=71, sm_clock_mhz=1395)
    for gpu in ("0", "1"):
        assert value(samples, "vdf_gpu_temperature_celsius", gpu=gpu) == 71
        assert value(samples, "vdf_gpu_sm_clock_hertz", gpu=gpu) == 1395e6
        assert value(samples, "vdf_gpu_power_limit_watts", gpu=gpu) == 350
        assert value(samples, "vdf_gpu_power_limit_target_watts", gpu=gpu) == 300
        assert value(samples, "vdf_gpu_power_draw_watts", gpu=gpu) == pytest.approx(21.37)
        assert value(samples, "vdf_gpu_memory_used_bytes", gpu=gpu) == 1024 * 1024
        assert value(samples, "vdf_gpu_pcie_link_width_max", gpu=gpu) == 16
    assert value(samples, "vdf_gpu_temperature_celsius", bus_id="00000000:02:00.0") == 71
    assert value(samples, "vdf_rig_metrics_source_up", source="nvidia") == 1


def test_the_limit_each_card_enforces_is_read_back_beside_the_one_set(rig):
    """Issue 46, part 3: a card enforces the lowest of its limiters (nvidia-smi(1), "Enforced
    Power Limit"): with another limiter at 280 W below the 350 W set, the metrics say both."""
    assert value(rig(), "vdf_gpu_power_limit_enforced_watts", gpu="0") == 350
    samples = rig(enforced_cap_w=280)
    for gpu in ("0", "1"):
        assert value(samples, "vdf_gpu_power_limit_watts", gpu=gpu) == 350
        assert value(samples, "vdf_gpu_power_limit_enforced_watts", gpu=gpu) == 280


def test_an_idle_link_runs_at_gen_1_a_busy_one_as_trained_and_a_narrow_one_shows(rig):
    idle = rig()
    assert value(idle, "vdf_gpu_pcie_link_gen", gpu="0") == 1    # trained down at rest
    assert value(idle, "vdf_gpu_pcie_link_gen_max", gpu="0") == 4
    busy = rig(utilization_pct=97, pcie_gen_trained=3, pcie_width_trained=4)
    assert value(busy, "vdf_gpu_utilization_ratio", gpu="1") == pytest.approx(0.97)
    assert value(busy, "vdf_gpu_pcie_link_gen", gpu="1") == 3
    assert value(busy, "vdf_gpu_pcie_link_width", gpu="1") == 4
    assert value(busy, "vdf_gpu_pcie_link_width_max", gpu="1") == 16


def test_clock_event_reasons_are_one_series_per_nvml_reason(rig):
    samples = rig(clocks_event_reasons="0x0000000000000024")    # SW power cap + SW thermal
    held = {reason for reason in rig_metrics.CLOCK_EVENT_REASONS
            if value(samples, "vdf_gpu_clocks_event_active", gpu="0", reason=reason)}
    assert held == {"sw_power_cap", "sw_thermal_slowdown"}


@pytest.mark.parametrize("journal", ["1", "0"], ids=["journald", "dmesg"])
def test_xid_lines_are_counted_by_bus_and_code_from_the_log_the_health_check_reads(rig, journal):
    rig.write_kernel_line(XID_31)
    rig.write_kernel_line(XID_31, at=1796131723.0)
    rig.write_kernel_line(XID_79)
    samples = rig(env={"JOURNAL_KEEPS_KERNEL": journal})
    assert value(samples, "vdf_gpu_xid_total", pci="0000:01:00", code="31") == 2
    assert value(samples, "vdf_gpu_xid_total", pci="0000:02:00", code="79") == 1
    # watched codes are there at 0 on both cards before their first line, so a rule sees the
    # first one as an increase
    assert value(samples, "vdf_gpu_xid_total", pci="0000:02:00", code="31") == 0
    assert value(samples, "vdf_gpu_xid_total", pci="0000:01:00", code="79") == 0
    assert value(samples, "vdf_rig_metrics_source_up", source="kernel") == 1
    calls = (rig.lines.parent / "real" / "calls.log").read_text()
    assert ("dmesg" in calls) == (journal == "0"), calls


def test_the_last_verdict_s_figures_come_from_the_health_report(rig):
    samples = rig()
    assert value(samples, "vdf_report_healthy") == 1
    assert value(samples, "vdf_report_info", release="0123456789abcdef", vllm_version="0.27.1") == 1
    assert value(samples, "vdf_report_checked_timestamp_seconds") == 1796292000
    assert value(samples, "vdf_report_decode_tokens_per_second", concurrency="1") == 52.25
    assert value(samples, "vdf_report_decode_tokens_per_second", concurrency="4") == 38.5
    assert value(samples, "vdf_report_mtp_mean_acceptance_length") == 2.75
    assert value(samples, "vdf_report_switch_downtime_seconds") == 41.5
    assert value(samples, "vdf_last_good_mtp_mean_acceptance_length") == 3.25
    rig.report.write_text(json.dumps(dict(REPORT, healthy=False, downtime_s=None, mtp={})))
    samples = rig()
    assert value(samples, "vdf_report_healthy") == 0
    assert not [k for k in samples if k[0] in ("vdf_report_switch_downtime_seconds",
                                                "vdf_report_mtp_mean_acceptance_length")]


def test_a_source_that_cannot_be_read_is_a_metric_and_the_others_are_still_written(rig):
    rig.write_kernel_line(XID_79)
    rig.report.write_text("{not json")
    samples = rig(fault="no-driver")
    assert value(samples, "vdf_rig_metrics_source_up", source="nvidia") == 0
    assert value(samples, "vdf_rig_metrics_source_up", source="report") == 0
    assert value(samples, "vdf_rig_metrics_source_up", source="kernel") == 1
    # no telemetry; the driver's state says why, and nvidia-smi lists no GPU
    assert not [k for k in samples if k[0].startswith("vdf_gpu_") and k[0] not in (
        "vdf_gpu_xid_total", "vdf_gpu_xid_last_timestamp_seconds", "vdf_nvidia_driver_state")]
    assert value(samples, "vdf_nvidia_driver_state", state="not_loaded") == 1
    assert value(samples, "vdf_nvidia_driver_state", state="ok") == 0
    assert value(samples, "vdf_gpus_listed") == 0
    # the Xid the kernel logged is still counted, on the bus the line names
    assert value(samples, "vdf_gpu_xid_total", pci="0000:02:00", code="79") == 1


def test_the_model_cache_s_file_system_is_measured_where_the_cache_is(rig, tmp_path):
    samples = rig()
    stat = os.statvfs(tmp_path / "hf-cache")
    assert value(samples, "vdf_model_cache_filesystem_size_bytes") == stat.f_blocks * stat.f_frsize
    avail = value(samples, "vdf_model_cache_filesystem_avail_bytes")
    assert 0 < avail <= stat.f_blocks * stat.f_frsize
    (rig.last_good / "verdict.json").unlink()
    samples = rig()
    assert value(samples, "vdf_rig_metrics_source_up", source="last_good") == 0
    assert value(samples, "vdf_rig_metrics_source_up", source="model_cache") == 1


def test_the_file_is_valid_text_format_and_declares_only_known_metrics(rig):
    rig.write_kernel_line(XID_31)
    samples = rig(utilization_pct=50)
    assert {name for name, _ in samples} <= set(rig_metrics.METRICS)
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=rig.text, capture_output=True,
                             text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_file_is_replaced_whole_and_no_temporary_file_is_left(rig):
    rig()
    target = rig.folder / "vllm-dual-fast.prom"
    with open(target) as reader:    # a scrape reading the old file as the next run writes
        before = reader.read()
        rig(temperature_c=90)
        assert reader.seek(0) == 0 and reader.read() == before
    assert "vdf_gpu_temperature_celsius" in target.read_text()
    assert value(parse(target.read_text()), "vdf_gpu_temperature_celsius", gpu="0") == 90
    assert sorted(p.name for p in rig.folder.iterdir()) == ["vllm-dual-fast.prom"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_samples_and_exposition_are_pure_functions_of_their_input():
    rows = rig_metrics.gpu_samples("0, 00000000:01:00.0, 60, [N/A], 300.00, 280.00, 1700, 4, 4, "
                                   "8, 16, 100, 0, 0x0000000000000001")
    names = [name for name, _, _ in rows]
    assert "vdf_gpu_power_draw_watts" not in names    # [N/A] is left out, not written as 0
    assert ("vdf_gpu_pcie_link_width", {"gpu": "0", "bus_id": "00000000:01:00.0",
                                        "pci": "0000:01:00"}, 8) in rows
    # The limit set and the one enforced (a lower limiter), each its own series.
    assert ("vdf_gpu_power_limit_watts", {"gpu": "0", "bus_id": "00000000:01:00.0",
                                          "pci": "0000:01:00"}, 300) in rows
    assert ("vdf_gpu_power_limit_enforced_watts", {"gpu": "0", "bus_id": "00000000:01:00.0",
                                                   "pci": "0000:01:00"}, 280) in rows
    text = rig_metrics.exposition(rows)
    assert text.count("# TYPE vdf_gpu_clocks_event_active gauge") == 1
    assert ('vdf_gpu_clocks_event_active{gpu="0",bus_id="00000000:01:00.0",pci="0000:01:00",'
            'reason="gpu_idle"} 1') in text


def test_a_report_time_without_an_offset_is_utc_as_the_reports_write_it(monkeypatch):
    """On a rig whose clock is set to another zone too: a naive time read as local time would
    be off by the zone's offset (9 h here)."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    report = dict(REPORT, checked_at="2026-12-03T10:00:00")
    [checked] = [v for name, _, v in rig_metrics.report_samples(report)
                 if name == "vdf_report_checked_timestamp_seconds"]
    assert checked == 1796292000


@pytest.fixture(autouse=True)
def _zone_restored():
    """time.tzset() after a test that changed TZ (monkeypatch restores the variable only)."""
    yield
    time.tzset()


# --- the driver's state, the boot's Xids, the kernels (issue 45: what nothing watched) ---------


@pytest.mark.parametrize("fault, state, listed", [
    (None, "ok", 2), ("no-driver", "not_loaded", 0), ("gpu-lost", "unreachable", 0),
    ("mismatch", "mismatch", 0), ("missing", "missing", 0)])
def test_the_driver_s_state_and_the_gpus_it_lists_against_the_rig_s(rig, fault, state, listed):
    env = {}
    if fault == "mismatch":    # libraries upgraded past the loaded module: nvidia-smi exits 18
        kernel, libs = rig.folder.parent / "kernel-double", rig.folder.parent / "lib"
        kernel.mkdir()
        libs.mkdir()
        (kernel / "release").write_text("6.8.0-50-generic\n")
        (kernel / "nvidia-module").write_text("580.95.05\n")
        (libs / "libnvidia-ml.so.580.105.08").write_text("")
        env = {"NVIDIA_SMI_DOUBLE_KERNEL_DIR": str(kernel),
               "NVIDIA_SMI_DOUBLE_LIB_DIR": str(libs)}
    if fault == "missing":
        (rig.folder.parent / "bin" / "nvidia-smi").unlink()
    knobs = {"fault": fault} if fault in ("no-driver", "gpu-lost") else {}
    samples = rig(env=env, args=("--expected-gpus", "2"), **knobs)
    assert {labels for (name, labels) in samples if name == "vdf_nvidia_driver_state"
            and samples[(name, labels)] == 1} == {frozenset({("state", state)})}
    assert len([k for k in samples if k[0] == "vdf_nvidia_driver_state"]) == 5
    assert value(samples, "vdf_gpus_listed") == listed
    assert value(samples, "vdf_gpus_expected") == 2


@pytest.mark.parametrize("journal", ["1", "0"], ids=["journald", "dmesg"])
def test_each_xid_carries_this_boot_and_the_time_of_its_newest_line(rig, journal):
    now = time.time()
    rig.write_kernel_line(XID_31, at=now - 700)
    rig.write_kernel_line(XID_31, at=now - 30)
    samples = rig(env={"JOURNAL_KEEPS_KERNEL": journal})
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
    assert value(samples, "vdf_rig_boot_info", boot_id=boot_id) == 1
    assert value(samples, "vdf_gpu_xid_total", pci="0000:01:00", code="31",
                 boot_id=boot_id) == 2
    # journald's stamp is the wall clock; dmesg's, seconds since boot turned back into one
    newest = value(samples, "vdf_gpu_xid_last_timestamp_seconds", pci="0000:01:00", code="31")
    assert newest == pytest.approx(now - 30, abs=1.0)
    # a watched code never seen has a count, and no time
    assert value(samples, "vdf_gpu_xid_total", pci="0000:02:00", code="79") == 0
    assert not [k for k in samples if k[0] == "vdf_gpu_xid_last_timestamp_seconds"
                and ("code", "79") in k[1]]
    # the GPU series carry the Xid series' bus label, to join on
    assert value(samples, "vdf_gpu_temperature_celsius", pci="0000:01:00") == 34


def write_status(path, packages):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n\n".join(
        f"Package: {name}\nStatus: {status}\nVersion: 1\nDescription: x\n continued: line"
        for name, status in packages) + "\n")


def test_the_kernel_that_boots_next_without_its_module_a_reboot_waiting_and_held_updates(
        tmp_path):
    root, state = tmp_path / "root", tmp_path / "state"
    (root / "boot").mkdir(parents=True)
    for kernel in ("6.8.0-9-generic", "6.8.0-50-generic", "6.8.0-100-generic"):
        (root / "boot" / f"vmlinuz-{kernel}").write_text("")
        (root / "lib/modules" / kernel).mkdir(parents=True)
    (root / "lib/modules/6.8.0-50-generic/modules.dep").write_text(
        "kernel/drivers/video/nvidia-580srv/nvidia.ko.zst:\n"
        "kernel/drivers/video/nvidia-580srv/nvidia-uvm.ko.zst: kernel/.../nvidia.ko.zst\n")
    (root / "lib/modules/6.8.0-100-generic/modules.dep").write_text(
        "kernel/drivers/video/nvidia-580srv/nvidia-uvm.ko.zst:\nkernel/fs/ext4/ext4.ko.zst:\n")
    (root / "run").mkdir()
    (root / "run/reboot-required").write_text("*** System restart required ***\n")
    os.utime(root / "run/reboot-required", (1796000000, 1796000000))
    write_status(root / "var/lib/dpkg/status", [
        ("linux-image-generic", "hold ok installed"), ("linux-generic", "hold ok installed"),
        ("linux-headers-generic", "install ok installed"),
        ("nvidia-utils-580", "hold ok installed")])
    state.mkdir()
    (state / "driver-holds.json").write_text("{}")
    os.utime(state / "driver-holds.json", (1795000000, 1795000000))
    samples = {(name, frozenset(labels.items())): v for name, labels, v in
               rig_metrics.kernel_samples(str(root), "6.8.0-50-generic", str(state))}
    assert value(samples, "vdf_kernel_nvidia_module", boot="running",
                 kernel="6.8.0-50-generic") == 1
    # the newest by version, not by name (100 > 50 > 9), and its module is missing
    assert value(samples, "vdf_kernel_nvidia_module", boot="next",
                 kernel="6.8.0-100-generic") == 0
    assert value(samples, "vdf_rig_reboot_required") == 1
    assert value(samples, "vdf_rig_reboot_required_since_timestamp_seconds") == 1796000000
    assert value(samples, "vdf_kernel_packages_held") == 2
    assert value(samples, "vdf_kernel_held_since_timestamp_seconds") == 1795000000
    # a maintenance run since is when updates last moved
    (state / "maintenance.json").write_text("{}")
    os.utime(state / "maintenance.json", (1796500000, 1796500000))
    samples = {(name, frozenset(labels.items())): v for name, labels, v in
               rig_metrics.kernel_samples(str(root), "6.8.0-50-generic", str(state))}
    assert value(samples, "vdf_kernel_held_since_timestamp_seconds") == 1796500000


def test_a_rig_without_kernels_on_hold_or_a_reboot_waiting_says_so(tmp_path):
    write_status(tmp_path / "var/lib/dpkg/status",
                 [("linux-image-generic", "install ok installed")])
    samples = {(name, frozenset(labels.items())): v for name, labels, v in
               rig_metrics.kernel_samples(str(tmp_path), "6.1.0-28-amd64", str(tmp_path))}
    assert value(samples, "vdf_rig_reboot_required") == 0
    assert value(samples, "vdf_kernel_packages_held") == 0
    assert value(samples, "vdf_kernel_nvidia_module", boot="running") == 0
    assert not [k for k in samples if k[0] in ("vdf_kernel_held_since_timestamp_seconds",
                                               "vdf_rig_reboot_required_since_timestamp_seconds")]
    assert not [k for k in samples if ("boot", "next") in k[1]]    # no /boot here: no next
