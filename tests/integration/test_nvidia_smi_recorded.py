"""The nvidia-smi double held to what the real nvidia-smi printed on real machines, as public
reports recorded it (tests/recorded/nvidia_public_reports.json: each record names its source):
the topo -m matrix and legend of two RTX 3090s, the query CSV's units and number formats, and
the wording, stream and exit code of its refusals. Values (temperatures, bus numbers) are the
rig's; only the shape is compared.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_nvidia_doubles import SMI, smi_env  # noqa: F401 (a fixture, used by name)
from test_nvidia_doubles import smi as run_smi
from vllm_double_fixtures import load_file_module

ROOT = Path(__file__).resolve().parents[2]
RECORDS = json.loads((ROOT / "tests" / "recorded" / "nvidia_public_reports.json").read_text())[
    "records"]


def recorded(kind, *, gpu=None, contains=None) -> list:
    """The records of a kind, as printed (not those a paste re-wrapped), optionally of a GPU
    (a record says "not 3090" when it is another card) or holding a text."""
    return [r for r in RECORDS if r["kind"] == kind and not r.get("reformatted")
            and (gpu is None or (gpu in r["gpu"] and f"not {gpu}" not in r["gpu"]))
            and (contains is None or contains in r["text"])]


@pytest.fixture
def env(smi_env, tmp_path):  # noqa: F811 (the imported fixture, by name)
    """test_nvidia_doubles' isolated environment, with no kernel double around."""
    return dict(smi_env, NVIDIA_SMI_DOUBLE_KERNEL_DIR=str(tmp_path / "no-kernel-double"))


def smi(env, *args) -> subprocess.CompletedProcess:
    return run_smi(env, *args, check=False)


def legend(text: str) -> list:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Legend:")
    return [" ".join(line.split()) for line in lines[start + 1:] if line.strip()]


def matrix(text: str) -> list:
    """The matrix rows up to the legend, each as its cells (whitespace between them dropped)."""
    rows = []
    for line in text.splitlines():
        if line.strip() == "Legend:":
            break
        if line.strip():
            rows.append(line.split())
    return rows


def test_the_default_rig_is_two_3090s_as_recorded_rigs_report_them(env):
    # Name and memory as the recorded 3090 rigs' tables show them on 580 and later drivers, and
    # a driver version that real machines ran: not the double's own constants.
    tables = [r["text"] for r in recorded("smi-table")]
    only_3090s = [r["text"] for r in recorded("smi-table", gpu="3090") if "+" not in r["gpu"]]
    on_580 = [t for t in only_3090s if re.search(r"Driver Version: 5[89]\d|KMD Version: 6", t)
              or "Driver Version" not in t]
    assert on_580, "no recorded table of 3090s alone on a 580 or later driver"
    sizes = {size for t in on_580 for size in re.findall(r"/\s*(\d+)MiB", t)}
    assert sizes == {"24576"}
    rows = [[cell.strip() for cell in line.split(",")] for line in smi(
        env, "--query-gpu=index,name,memory.total,driver_version,pci.bus_id,compute_cap",
        "--format=csv,noheader").stdout.splitlines()]
    assert [row[0] for row in rows] == ["0", "1"]
    for _index, name, memory, driver, bus, cap in rows:
        assert name == "NVIDIA GeForce RTX 3090" and any(name in t for t in on_580)
        assert memory.endswith(" MiB") and memory[:-4] in sizes
        assert any(f"Driver Version: {driver}" in t for t in tables), driver
        assert re.fullmatch(r"0{8}:[0-9A-F]{2}:00\.0", bus) and cap == "8.6"


def test_topo_legend_is_the_real_tools_word_for_word(env):
    sources = [r for r in recorded("topo-m") if "Legend:" in r["text"]]
    assert len(sources) >= 2
    double = legend(smi(env, "topo", "-m").stdout)
    for source in sources:    # some reports cut the legend short: every line they show
        assert set(legend(source["text"])) <= set(double), source["source_url"]
    assert set(double) == set().union(*(legend(r["text"]) for r in sources))


def test_topo_matrix_of_two_3090s_without_nvlink_is_laid_out_as_the_real_one(env):
    sources = [r for r in recorded("topo-m", gpu="3090")
               if matrix(r["text"])[0][:3] == ["GPU0", "GPU1", "CPU"]]    # two GPUs
    assert sources, "no recorded topo -m of two RTX 3090s"
    ours = matrix(smi(env, "topo", "-m").stdout)
    for source in sources:
        theirs = matrix(source["text"])
        assert theirs[0] == ours[0], source["source_url"]           # the header's columns
        assert [len(row) for row in theirs[1:3]] == [len(row) for row in ours[1:3]]
        # each GPU row: its name, X on the diagonal, a PCIe link word (never NV# without NVLink)
        for row in theirs[1:3] + ours[1:3]:
            assert row[0].startswith("GPU") and "X" in row[1:3]
            assert re.fullmatch(r"SYS|NODE|PHB|PXB|PIX", row[2] if row[1] == "X" else row[1])


def csv_cells(text: str) -> list:
    return [cell.strip() for cell in text.strip().splitlines()[-1].split(",")]


@pytest.mark.parametrize("field, header, with_units, without_units", [
    ("memory.total", "memory.total [MiB]", r"\d+ MiB", r"\d+"),
    ("power.limit", "power.limit [W]", r"\d+\.\d\d W", r"\d+\.\d\d"),
    ("temperature.gpu", "temperature.gpu", r"\d+", r"\d+"),
    ("clocks_event_reasons.active", "clocks_event_reasons.active", r"0x[0-9A-F]{16}",
     r"0x[0-9A-F]{16}"),
])
def test_query_values_print_as_the_real_tool_prints_them(env, field, header, with_units,
                                                         without_units):
    # The forms the recorded CSVs show ("memory.total [MiB]", "16376 MiB", "320.00 W",
    # "0x0000000000000001"); the double held to each, with and without units.
    shown = " ".join(r["text"] for r in recorded("query-gpu-csv"))
    for pattern in (re.escape(header), with_units, without_units):
        assert re.search(pattern, shown), f"no recorded value of the form {pattern}"
    assert smi(env, f"--query-gpu={field}", "--format=csv").stdout.splitlines()[0] == header
    assert re.fullmatch(with_units, csv_cells(
        smi(env, f"--query-gpu={field}", "--format=csv,noheader").stdout)[0])
    assert re.fullmatch(without_units, csv_cells(
        smi(env, f"--query-gpu={field}", "--format=csv,noheader,nounits").stdout)[0])


def test_an_unknown_query_field_is_refused_on_stdout_with_exit_2_as_recorded(env):
    source = recorded("smi-error", contains="is not a valid field to query")
    assert any(r["rc"] == 2 and r.get("stream") == "stdout" for r in source)
    proc = smi(env, "--query-gpu=device_minor", "--format=csv,noheader")
    assert proc.returncode == 2 and proc.stderr == ""
    assert proc.stdout == 'Field "device_minor" is not a valid field to query.\n\n'


def test_no_driver_and_a_lost_gpu_say_what_the_real_tool_says(env):
    no_driver = recorded("smi-error", contains="couldn't communicate with the NVIDIA driver")
    assert any(r["rc"] == 9 for r in no_driver)
    env["NVIDIA_SMI_DOUBLE_FAULT"] = "no-driver"
    proc = smi(env, "--query-gpu=index", "--format=csv,noheader")
    assert proc.returncode == 9
    assert any(r["text"].strip() in proc.stdout for r in no_driver if r["rc"] == 9)
    lost = [r["text"] for r in recorded("smi-error", contains="GPU is lost")]
    assert lost
    env["NVIDIA_SMI_DOUBLE_FAULT"] = "gpu-lost"
    said = smi(env, "--query-gpu=index", "--format=csv,noheader").stdout
    shape = re.compile(r"Unable to determine the device handle for GPU (\d{4}:[0-9A-F]{2}:00\.0): "
                       r"GPU is lost\.")
    assert shape.match(said), said
    assert all(shape.match(" ".join(text.split())) for text in lost), lost


def test_every_recorded_xid_line_is_counted_by_its_code_and_bus_and_judged_a_fault():
    # Real NVRM lines, of 3090 rigs and others, old and new driver wording (pid= or not,
    # "Ch 000000.." or "channel 0x.."): what rig_metrics counts and the health gate keeps.
    metrics = load_file_module("rig_metrics")
    from ansible.module_utils.vllm_dual_fast_domain import verdict as health
    lines = [line for r in recorded("xid-line") for line in r["text"].splitlines()
             if "NVRM: Xid" in line]
    assert len(lines) >= 5 and any("): 79, " in line for line in lines)
    for line in lines:
        found = re.search(r"NVRM: Xid \(PCI:(\w{4}:\w{2}:\w{2})\): (\d+),", line)
        assert found, line
        assert metrics.xid_events([line]) == {(found[1].lower(), int(found[2])): (1, None)}, line
        assert health.xid_lines(["kernel: " + line]) == ["kernel: " + line]


def test_the_recorder_keeps_each_invocation_with_its_exit_code_and_streams(env, tmp_path):
    # record_nvidia_smi.py (for a machine with GPUs), run here over the double as `nvidia-smi`:
    # every invocation the role makes answers 0, the refusals keep their own codes and text.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\nexec {sys.executable} {SMI} \"$@\"\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    out = tmp_path / "recorded.json"
    env = dict(env, PATH=f"{bin_dir}:{env['PATH']}")
    subprocess.run([sys.executable, str(ROOT / "tests" / "recorded" / "record_nvidia_smi.py"),
                    str(out)], env=env, check=True, timeout=120)
    records = {" ".join(r["argv"][1:]): r for r in json.loads(out.read_text())}
    assert records["topo -m"]["rc"] == 0 and "Legend:" in records["topo -m"]["stdout"]
    roles_own = [r for argv, r in records.items() if argv.startswith("--query-gpu=index,name")]
    assert roles_own and roles_own[0]["rc"] == 0 and len(roles_own[0]["stdout"].splitlines()) == 2
    bad_field = records["--query-gpu=no.such.field --format=csv,noheader"]
    assert bad_field["rc"] == 2 and "not a valid field" in bad_field["stdout"]
    assert records["--no-such-option"]["rc"] == 2
