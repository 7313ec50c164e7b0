"""The health check's parts (module_utils/vllm_dual_fast_domain/verdict.py). Kernel log: only lines
written since the window opened (a deploy's or a rollback's) count, dated by journald's wall clock
or by the kernel's own clock, never by dmesg's wall-clock rendering."""

import pytest
from ansible.module_utils.vllm_dual_fast_domain import verdict as health

XID = ("NVRM: Xid (PCI:0000:01:00): 31, pid=4242, name=python3, Ch 00000008, intr 00000000. "
       "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_1c000000.")


# Real output's shapes: `journalctl _TRANSPORT=kernel -o short-unix` (systemd 257, Debian 13) and
# default-format `dmesg` (util-linux 2.38); a multi-line message continues on indented lines.
JOURNAL = [
    "1796131000.100000 rig3090 kernel: docker0: port 1(veth36101c7) entered disabled state",
    f"1796131100.468876 rig3090 kernel: {XID}",
    "1796131200.000001 rig3090 kernel: usb 1-1: new high-speed USB device number 2",
    "                                   using xhci_hcd",
    f"1796131300.250000 rig3090 kernel: {XID}",
]
DMESG = [
    "[    0.000000] Linux version 6.1.0-41-amd64 (debian-kernel@lists.debian.org)",
    f"[  256.457455] {XID}",
    "               Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    "[ 1234.500000] docker0: port 1(veth207e08e) entered disabled state",
    f"[12345.678901] {XID}",
]
WINDOW = {"since_epoch": 1796131150.0, "since_monotonic": 1000.0, "boot_id": "b-1"}


def test_the_journal_keeps_what_journald_received_since_the_window_opened():
    kept = health.kernel_window_lines(JOURNAL, "journal", WINDOW)
    assert kept == JOURNAL[2:]                     # the continuation line goes with its message
    assert health.xid_lines(kept) == [JOURNAL[4]]  # the Xid of 1796131100 is before the window


def test_dmesg_lines_are_judged_on_the_kernel_clock_not_a_wall_clock():
    kept = health.kernel_window_lines(DMESG, "dmesg", WINDOW, "b-1")
    assert kept == DMESG[3:]                     # the Xid at 256 s and its continuation are out
    assert health.xid_lines(kept) == [DMESG[4]]


def test_a_window_opened_in_an_earlier_boot_takes_this_boot_s_whole_log():
    # The rig booted again (a power cut during health): every line dmesg shows is newer.
    assert health.kernel_window_lines(DMESG, "dmesg", WINDOW, "b-2\n") == DMESG
    assert health.kernel_window_lines(DMESG, "dmesg", WINDOW, "b-1\n") == DMESG[3:]


@pytest.mark.parametrize("source", ["journal", "dmesg"])
def test_the_window_s_edge_is_in_it(source):
    lines = [JOURNAL[1], "1796131150.000000 rig3090 kernel: at the edge"] if source == "journal" \
        else [DMESG[1], "[ 1000.000000] at the edge"]
    assert health.kernel_window_lines(lines, source, WINDOW, "b-1") == lines[1:]


@pytest.mark.parametrize("lines", [[XID], []])
@pytest.mark.parametrize("source", ["journal", "dmesg"])
def test_undated_logs_are_kept_whole(lines, source):
    # printk.time=0 prints no stamps: nothing can be dated, so nothing is dropped.
    assert health.kernel_window_lines(lines, source, WINDOW, "b-1") == lines


def test_what_kernel_log_yml_keeps_of_a_read_and_of_a_refused_one():
    # The kernel log module's read, as kernel_log.yml hands it on: the window's lines, or why not.
    read = {"source": "dmesg", "rc": 0, "stdout_lines": DMESG, "stderr": "", "boot_id": "b-1"}
    assert health.kernel_log(read, WINDOW) == {"lines": DMESG[3:], "readable": True,
                                               "source": "dmesg", "error": ""}
    refused = {"source": "dmesg", "rc": 1, "stdout_lines": [], "boot_id": "b-1",
               "stderr": "dmesg: read kernel buffer failed: Operation not permitted\n"}
    kept = health.kernel_log(refused, WINDOW)
    assert (kept["readable"], kept["lines"]) == (False, [])
    assert kept["error"] == "dmesg: read kernel buffer failed: Operation not permitted"
    assert health.kernel_log_gate(kept)[0] == "cannot-judge"


def test_an_unknown_source_is_refused():
    with pytest.raises(ValueError, match="unknown kernel-log source 'syslog'"):
        health.kernel_window_lines(JOURNAL, "syslog", WINDOW)


def test_stamps_of_each_format():
    assert health.journal_line_epoch(JOURNAL[1]) == 1796131100.468876
    assert health.journal_line_epoch(JOURNAL[3]) is None
    assert health.dmesg_line_stamp(DMESG[0]) == 0.0
    assert health.dmesg_line_stamp(DMESG[2]) is None
    assert health.dmesg_line_stamp(DMESG[4]) == 12345.678901
    # an iso line (dmesg --time-format=iso) has no boot-relative stamp
    assert health.dmesg_line_stamp("2026-12-01T13:27:38,123456+00:00 " + XID) is None


@pytest.mark.parametrize(
    ("line", "status"),
    [
        ("fi-pinq: patched decode.py (2 allocations) flashinfer 0.7.2.post1", "patched"),
        ("fi-pinq: already-patched decode.py (2 allocations) flashinfer 0.7.2", "already-patched"),
        ("fi-pinq: upstream-fixed decode.py (0 allocations) flashinfer 0.9.0", "upstream-fixed"),
        ("fi-pinq: drift: decode.py: no allocation found flashinfer 0.8.0", "drift"),
    ],
)
def test_the_patch_state_comes_from_the_start_line(line, status):
    assert health.patch_at_start(line) == {"status": status, "line": line}


@pytest.mark.parametrize("line", ["", "INFO 11-30 vLLM API server started", None])
def test_no_start_line_means_no_start_state(line):
    assert health.patch_at_start(line) == {}


BEFORE = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.20}, "cN": {"tokens_per_s": 160.0},
          "concurrency": 4}


def test_a_release_as_fast_as_the_last_passes_the_speed_gate():
    now = {"c1": {"tokens_per_s": 47.0, "ttft_s": 0.21}, "cN": {"tokens_per_s": 150.0},
           "concurrency": 4}
    assert health.speed_regressions(now, BEFORE, 10) == []


def test_a_slower_release_fails_the_speed_gate_naming_what_fell():
    now = {"c1": {"tokens_per_s": 40.0, "ttft_s": 0.30}, "cN": {"tokens_per_s": 100.0},
           "concurrency": 4}
    found = health.speed_regressions(now, BEFORE, 10)
    assert len(found) == 3
    assert found[0].startswith("decode tokens/s at c=1 fell 20 %")
    assert "c=4 fell 38 %" in found[1]
    assert "time to first token at c=1 rose 50 %" in found[2]


def test_no_previous_figures_pass_the_speed_gate():
    assert health.speed_regressions({"c1": {"tokens_per_s": 1.0}}, {}, 10) == []


@pytest.mark.parametrize(
    ("rc", "mode", "verdict"),
    [(0, "auto", "pass"), (1, "auto", "fail"), (2, "auto", "warn"), (2, "required", "fail"),
     (None, "required", "fail"), (1, "off", "off")],
)
def test_race_check_verdicts(rc, mode, verdict):
    assert health.race_check_verdict(rc, mode, "why")[0] == verdict


def previous_report(release, healthy=True, speed=BEFORE):
    return {"release": release, "healthy": healthy, "smoke": {"speed": speed}}


def test_the_baseline_is_the_report_of_the_release_that_served_before():
    assert health.speed_baseline(previous_report("rel-a"), "rel-a") == (BEFORE, "")


@pytest.mark.parametrize(
    ("report", "previous", "why"),
    [
        (previous_report("rel-old"), "rel-a", "(report is for rel-old)"),
        ({}, "rel-a", "(report is for no release)"),
        (None, "rel-a", "(report is for no release)"),
        (previous_report("rel-a", healthy=False), "rel-a", "(its report is unhealthy)"),
        (previous_report("rel-a", speed={"skipped": "the smoke failed"}), "rel-a",
         "(its report has no speed figures)"),
    ],
)
def test_no_baseline_but_the_previous_release_s_own_healthy_figures(report, previous, why):
    # An older release's report, or a failed one's, measured something else than what served.
    assert health.speed_baseline(report, previous) == (
        {}, f"no baseline from the previous release rel-a {why}")


def test_no_baseline_without_a_previous_release():
    assert health.speed_baseline(previous_report("rel-a"), "") == (
        {}, "no baseline: no release served before on this rig")


def gate_inputs(**changed):
    return {"speed_now": {"c1": {"tokens_per_s": 10.0}},
            "previous_report": previous_report("rel-a"), "previous_release": "rel-a",
            "max_drop_pct": 10, "race_rc": 2, "race_mode": "required", "race_summary": "no GPU",
            "soak_s": 5,
            "soak_run": {"ok": True, "failures": [], "soak": {"requests": 9, "failed": 0}},
            **changed}


def test_canary_gates_combine_speed_race_and_soak():
    judged = health.canary_gates(gate_inputs())
    assert len(judged["failures"]) == 2
    assert judged["failures"][1] == "race check could not run: no GPU"
    assert judged["gates"] == {
        "race_check": ["fail", "race check could not run: no GPU"], "soak_s": 5,
        "soak": {"requests": 9, "failed": 0}, "speed_before": BEFORE,
        "speed_baseline": "the previous release rel-a",
        "speed_regressions": judged["failures"][:1], "speed_not_comparable": [],
        "speed_reference": {}, "mtp_before": {}, "mtp_regressions": []}
    assert health.canary_gates(gate_inputs(race_mode="auto", speed_now=BEFORE))["failures"] == []


def test_a_ttft_rise_within_the_absolute_floor_is_noise_not_a_regression():
    # 60 ms -> 85 ms is +42 %, but 25 ms: the jitter of a home link, not a slower release.
    before = {"c1": {"tokens_per_s": 50.0, "ttft_s": 0.060}}
    assert health.speed_regressions({"c1": {"tokens_per_s": 50.0, "ttft_s": 0.085}},
                                    before, 10, ttft_floor_s=0.05) == []
    found = health.speed_regressions({"c1": {"tokens_per_s": 50.0, "ttft_s": 0.150}},
                                     before, 10, ttft_floor_s=0.05)
    assert found and "rose 150 %" in found[0] and "50 ms allowed" in found[0]
    # A tokens/s drop under the floor does not count either (1.5 of 10 tok/s is 15 %).
    assert health.speed_regressions({"c1": {"tokens_per_s": 8.5}}, {"c1": {"tokens_per_s": 10}},
                                    10, rate_floor_tps=2.0) == []


SPEC = {"acceptance_rate": 0.44, "mean_acceptance_length": 2.77, "drafts": 100}


def test_mtp_acceptance_below_the_floor_or_falling_fails_the_canary():
    assert health.mtp_regressions(SPEC, SPEC, 0.2, 30) == []
    collapsed = dict(SPEC, acceptance_rate=0.02, mean_acceptance_length=1.08)
    found = health.mtp_regressions(collapsed, SPEC, 0.2, 30)
    assert len(found) == 2 and "below the floor 0.2" in found[0] and "fell 95 %" in found[1]
    assert health.mtp_regressions(dict(SPEC, acceptance_rate=0.30), SPEC, 0.2, 30)[0].startswith(
        "MTP acceptance fell 32 %")
    assert health.mtp_regressions({"unavailable": "no counters"}, SPEC, 0.2, 30) == []
    judged = health.canary_gates(gate_inputs(
        race_rc=0, speed_now=dict(BEFORE, spec_decode=collapsed),
        previous_report=previous_report("rel-a", speed=dict(BEFORE, spec_decode=SPEC)),
        mtp_floor=0.2,
        mtp_drop_pct=30))
    assert judged["gates"]["mtp_before"] == SPEC and len(judged["failures"]) == 2


SETTINGS = {"max_num_batched_tokens": 8192, "gpu_memory_utilization": 0.9, "max_num_seqs": 4,
            "w4a8": True}
LONG_RUN = {"ok": False, "failures": ["long prompt request 2: HTTP 500: EngineCore"],
            "long_prompt": {"concurrency": 4, "target_tokens": 16384}}
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 876.80 MiB. GPU 0 has a"



def test_a_release_running_mtp_whose_counters_are_gone_fails_the_mtp_gate():
    """vLLM deprecates a metric, hides it, then removes it: a canary must not pass unmeasured."""
    [found] = health.mtp_regressions({"unavailable": "no counters"}, SPEC, 0.2, 30, expected=True)
    assert found.startswith("MTP acceptance unmeasured (no counters)")
    assert health.mtp_regressions(None, SPEC, 0.2, 30, expected=True)
    assert health.mtp_regressions(SPEC, SPEC, 0.2, 30, expected=True) == []
    judged = health.canary_gates(gate_inputs(
        race_rc=0, speed_now={"c1": {"tokens_per_s": 50.0}, "spec_decode": {}},
        mtp_expected=True))
    assert any(f.startswith("MTP acceptance unmeasured") for f in judged["failures"])


def test_long_prompts_out_of_memory_name_the_remedies_cheapest_first():
    found = health.long_prompt_failures(LONG_RUN, ["INFO start", OOM], SETTINGS)
    assert len(found) == 1
    line = found[0]
    assert line.startswith("long prompts (4 concurrent prompts of 16384 tokens) failed: CUDA out")
    order = [line.index(k) for k in ("max_num_batched_tokens: 4096",
                                     "gpu_memory_utilization: 0.85", "max_num_seqs: 3",
                                     "w4a8: false")]
    assert order == sorted(order)
    assert health.long_prompt_failures(dict(LONG_RUN, ok=True, failures=[]), [], SETTINGS) == []
    assert health.long_prompt_failures(None, [OOM], SETTINGS) == []        # it did not run
    other = health.long_prompt_failures(LONG_RUN, [], SETTINGS)[0]         # no OOM line: say why
    assert "HTTP 500" in other and "Remedies" not in other
    # An OOM line in the log fails the gate even when every request got an answer.
    assert health.long_prompt_failures(dict(LONG_RUN, ok=True), [OOM], SETTINGS)


def test_a_slower_canary_passes_when_there_is_no_baseline_and_says_so():
    judged = health.canary_gates(gate_inputs(previous_report=previous_report("rel-old"),
                                             race_rc=0))
    assert judged["failures"] == []
    assert judged["gates"]["speed_before"] == {} and judged["gates"]["speed_regressions"] == []
    assert judged["gates"]["speed_baseline"] == (
        "no baseline from the previous release rel-a (report is for rel-old)")


def test_a_failed_soak_fails_the_canary():
    soak_run = {"ok": False, "soak": {"requests": 9, "failed": 1},
                "failures": ["soak: 1 of 9 requests failed in 5 s: HTTP 500"]}
    judged = health.canary_gates(gate_inputs(speed_now=BEFORE, race_rc=0, soak_run=soak_run))
    assert judged["failures"] == [
        "canary soak failed: soak: 1 of 9 requests failed in 5 s: HTTP 500"]
    assert judged["gates"]["soak"] == {"requests": 9, "failed": 1}


@pytest.mark.parametrize(
    ("soak_run", "stderr", "failures"),
    [(None, "", []),    # not run: no soak asked for, or the smoke had already failed
     ({}, "smoke: cannot read the API key file", [
         "canary soak failed: smoke: cannot read the API key file"]),
     ({}, "", ["canary soak failed: no output"])],
)
def test_a_soak_that_did_not_run_or_said_nothing(soak_run, stderr, failures):
    judged = health.canary_gates(gate_inputs(speed_now=BEFORE, race_rc=0, soak_run=soak_run,
                                             soak_stderr=stderr))
    assert judged["failures"] == failures and judged["gates"]["soak"] == {}
