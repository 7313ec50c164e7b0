"""The test doubles of NVIDIA's pieces (molecule/doubles/): shapes, merge semantics, signed repo.

Fast and without Docker: every double runs as a subprocess the way Molecule's targets run it,
with its state and configuration redirected into pytest's tmp_path. The repository double is
built once per module; its tests need dpkg-deb, gpg and gpgv and are skipped (with the reason)
where one of them is missing.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOUBLES = ROOT / "molecule" / "doubles"
SMI = DOUBLES / "nvidia-smi-double"
REPO_DIR = DOUBLES / "nvidia-apt-repo"
BUILD = REPO_DIR / "build.sh"
FILES = REPO_DIR / "files"
CTK = FILES / "nvidia-ctk"
HOOK = FILES / "nvidia-container-runtime-hook"

QUERY = "index,name,memory.total,driver_version,pci.bus_id,compute_cap"
NVIDIA_DAEMON_RUNTIME = {"args": [], "path": "nvidia-container-runtime"}


# --------------------------------------------------------------------------- nvidia-smi double


@pytest.fixture
def smi_env(tmp_path):
    """Environment isolating the double from any /etc/nvidia-smi-double.json on this machine."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVIDIA_SMI_DOUBLE_")}
    env["NVIDIA_SMI_DOUBLE_CONFIG"] = str(tmp_path / "nvidia-smi-double.json")
    env["NVIDIA_SMI_DOUBLE_STATE_DIR"] = str(tmp_path / "state")
    return env


def smi(env, *args, check=True):
    proc = subprocess.run(
        [sys.executable, str(SMI), *args], env=env, capture_output=True, text=True, timeout=30
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def parse_csv(text):
    return [row for row in csv.reader(io.StringIO(text), skipinitialspace=True) if row]


# What the double reports by default is held to recorded real rigs in
# test_nvidia_smi_recorded.py (test_the_default_rig_is_two_3090s_as_recorded_rigs_report_them).


def test_smi_query_nounits_and_header(smi_env):
    rows = parse_csv(smi(smi_env, f"--query-gpu={QUERY}", "--format=csv,noheader,nounits").stdout)
    assert [row[2] for row in rows] == ["24576", "24576"]
    with_header = parse_csv(smi(smi_env, "--query-gpu=index,memory.total", "--format=csv").stdout)
    assert with_header[0] == ["index", "memory.total [MiB]"]
    assert len(with_header) == 3


def test_smi_config_file_overrides(smi_env, tmp_path):
    Path(smi_env["NVIDIA_SMI_DOUBLE_CONFIG"]).write_text(
        json.dumps({"gpu_count": 1, "memory_mib": 12288, "name": "NVIDIA GeForce RTX 3060",
                    "compute_cap": "8.6"})
    )
    rows = parse_csv(smi(smi_env, f"--query-gpu={QUERY}", "--format=csv,noheader").stdout)
    assert rows == [
        ["0", "NVIDIA GeForce RTX 3060", "12288 MiB", "580.95.05", "00000000:01:00.0", "8.6"]
    ]
    assert smi(smi_env, "-L").stdout.count("GPU ") == 1


def test_smi_env_overrides_config_file(smi_env):
    Path(smi_env["NVIDIA_SMI_DOUBLE_CONFIG"]).write_text(json.dumps({"gpu_count": 1}))
    env = dict(smi_env, NVIDIA_SMI_DOUBLE_GPU_COUNT="3", NVIDIA_SMI_DOUBLE_COMPUTE_CAP="7.5")
    rows = parse_csv(smi(env, "--query-gpu=index,compute_cap", "--format=csv,noheader").stdout)
    assert rows == [["0", "7.5"], ["1", "7.5"], ["2", "7.5"]]


def test_smi_reports_what_a_speed_ran_at(smi_env):
    """The health check's conditions query: power limit, temperature, SM clock, the clocks event
    reasons (and their older name), as the real tool prints them."""
    fields = "power.limit,temperature.gpu,clocks.sm,clocks_event_reasons.active,driver_version"
    assert parse_csv(smi(smi_env, f"--query-gpu={fields}", "--format=csv,noheader").stdout)[0] == [
        "350.00 W", "34", "1695 MHz", "0x0000000000000000", "580.95.05"]
    Path(smi_env["NVIDIA_SMI_DOUBLE_CONFIG"]).write_text(json.dumps(
        {"temperature_c": 83, "sm_clock_mhz": 1410, "clocks_event_reasons": "0x0000000000000020"}))
    rows = parse_csv(smi(smi_env, "--query-gpu=temperature.gpu,clocks.sm,"
                         "clocks_throttle_reasons.active", "--format=csv,noheader,nounits").stdout)
    assert rows == [["83", "1410", "0x0000000000000020"]] * 2


def test_smi_memory_is_what_the_vllm_double_holds_on_the_cards(smi_env, tmp_path):
    """The fit reads memory.used and memory.free while the engine works: the vLLM double writes
    what it holds, the nvidia-smi double reports it on every card (total = used + free + 256
    reserved, as the real tool's figures add up); no file, nothing holds memory."""
    used_file = tmp_path / "vllm-double-gpu.json"
    Path(smi_env["NVIDIA_SMI_DOUBLE_CONFIG"]).write_text(json.dumps(
        {"memory_used_file": str(used_file)}))
    query = ("--query-gpu=index,memory.used,memory.free,memory.total",
             "--format=csv,noheader,nounits")
    assert parse_csv(smi(smi_env, *query).stdout) == [["0", "1", "24319", "24576"],
                                                      ["1", "1", "24319", "24576"]]
    used_file.write_text(json.dumps({"used_mib": 23872, "card_mib": 24576}))
    assert parse_csv(smi(smi_env, *query).stdout)[1] == ["1", "23872", "448", "24576"]
    used_file.write_text(json.dumps({"used_mib": 99999}))    # never more than the card has
    assert parse_csv(smi(smi_env, *query).stdout)[0][1:3] == ["24320", "0"]
    # another process on GPU 0 (a desktop), as a real card shows it beside the engine
    used_file.write_text(json.dumps({"used_mib": 22118}))
    Path(smi_env["NVIDIA_SMI_DOUBLE_CONFIG"]).write_text(json.dumps(
        {"memory_used_file": str(used_file), "other_used_mib": "900"}))
    assert [row[1:3] for row in parse_csv(smi(smi_env, *query).stdout)] == [
        ["23018", "1302"], ["22118", "2202"]]


def test_smi_list_gpus(smi_env):
    lines = smi(smi_env, "-L").stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-")
    assert lines[1].startswith("GPU 1: NVIDIA GeForce RTX 3090 (UUID: GPU-")


def test_smi_plain_summary(smi_env):
    out = smi(smi_env).stdout
    assert "Driver Version: 580.95.05" in out
    assert out.count("NVIDIA GeForce RTX 3090") == 2
    assert "24576MiB" in out


def test_smi_no_nvlink_by_default(smi_env):
    status = smi(smi_env, "nvlink", "--status").stdout
    assert "Link 0:" not in status
    assert status.count("all links are inActive") == 2
    topo = smi(smi_env, "topo", "-m").stdout
    header, gpu0, gpu1 = topo.splitlines()[:3]
    assert header.split("\t")[1:3] == ["GPU0", "GPU1"]
    assert gpu0.split("\t")[:3] == ["GPU0", " X ", "PHB"]
    assert gpu1.split("\t")[:3] == ["GPU1", "PHB", " X "]
    assert "NV4" not in "\n".join(topo.splitlines()[:3])


def test_smi_nvlink_when_configured(smi_env):
    env = dict(smi_env, NVIDIA_SMI_DOUBLE_NVLINK="true")
    assert "Link 0: 14.062 GB/s" in smi(env, "nvlink", "--status").stdout
    assert "\tNV4\t" in smi(env, "topo", "-m").stdout
    env = dict(smi_env, NVIDIA_SMI_DOUBLE_TOPO="SYS")
    assert "GPU0\t X \tSYS\t" in smi(env, "topo", "-m").stdout


def test_smi_power_limit_is_recorded(smi_env):
    query = ("--query-gpu=power.limit", "--format=csv,noheader,nounits")
    assert smi(smi_env, *query).stdout.split() == ["350.00", "350.00"]
    out = smi(smi_env, "-i", "1", "-pl", "300").stdout
    assert out == (
        "Power limit for GPU 00000000:02:00.0 was set to 300.00 W from 350.00 W.\nAll done.\n"
    )
    assert smi(smi_env, *query).stdout.split() == ["350.00", "300.00"]
    state = json.loads((Path(smi_env["NVIDIA_SMI_DOUBLE_STATE_DIR"]) / "state.json").read_text())
    assert state["power_limit"] == {"1": 300.0}
    smi(smi_env, "-pl", "280")
    assert smi(smi_env, *query).stdout.split() == ["280.00", "280.00"]
    too_high = smi(smi_env, "-i", "0", "-pl", "500", check=False)
    assert too_high.returncode == 2
    assert "not a valid power limit" in too_high.stderr


def test_smi_persistence_mode(smi_env):
    first = smi(smi_env, "-pm", "1").stdout
    assert "Enabled persistence mode for GPU 00000000:01:00.0." in first
    assert first.endswith("All done.\n")
    again = smi(smi_env, "-pm", "1").stdout
    assert "Persistence mode is already Enabled for GPU 00000000:02:00.0." in again
    rows = parse_csv(smi(smi_env, "--query-gpu=persistence_mode", "--format=csv,noheader").stdout)
    assert rows == [["Enabled"], ["Enabled"]]


def test_smi_records_calls(smi_env):
    smi(smi_env, "-L")
    log = Path(smi_env["NVIDIA_SMI_DOUBLE_STATE_DIR"]) / "calls.log"
    assert json.loads(log.read_text().splitlines()[-1]) == ["-L"]


@pytest.mark.parametrize(
    "args",
    [
        ["--bogus"],
        ["-q", "-x"],
        ["--query-gpu=not.a.field", "--format=csv"],
        ["--query-gpu=index", "--format=json"],
        ["--query-gpu=index"],
        ["nvlink", "--bogus"],
        ["topo", "-p2p", "r"],
        ["-pl"],
    ],
)
def test_smi_unknown_args_exit_2(smi_env, args):
    proc = smi(smi_env, *args, check=False)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2 and said.strip()
    # an unknown field is refused on stdout, as recorded (test_nvidia_smi_recorded.py); the
    # other refusals go to stderr
    assert (proc.stdout if "is not a valid field" in said else proc.stderr) == said


# --------------------------------------------------------------------------- nvidia-ctk double


def ctk(*args, check=True):
    proc = subprocess.run(
        [sys.executable, str(CTK), *args], capture_output=True, text=True, timeout=30
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_ctk_merges_and_keeps_keys(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"log-driver": "json-file", "log-opts": {"max-size": "10m"}}\n')
    proc = ctk("runtime", "configure", "--runtime=docker", f"--config={daemon}")
    assert "It is recommended that docker daemon be restarted." in proc.stderr
    assert f"Wrote updated config to {daemon}" in proc.stderr
    # Exactly the bytes Go's json.MarshalIndent(cfg, "", "    ") writes: sorted, no final newline.
    assert daemon.read_text() == (
        "{\n"
        '    "log-driver": "json-file",\n'
        '    "log-opts": {\n'
        '        "max-size": "10m"\n'
        "    },\n"
        '    "runtimes": {\n'
        '        "nvidia": {\n'
        '            "args": [],\n'
        '            "path": "nvidia-container-runtime"\n'
        "        }\n"
        "    }\n"
        "}"
    )
    assert "default-runtime" not in json.loads(daemon.read_text())


def smi_on_path(tmp_path, **config):
    """PATH with the nvidia-smi double first, configured by `config`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "nvidia-smi").write_text(
        f"#!/bin/sh\nexec {sys.executable} {SMI} \"$@\"\n")
    (bin_dir / "nvidia-smi").chmod(0o755)
    (tmp_path / "smi.json").write_text(json.dumps(config))
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "NVIDIA_SMI_DOUBLE_CONFIG": str(tmp_path / "smi.json"),
            "NVIDIA_SMI_DOUBLE_STATE_DIR": str(tmp_path / "smi-state")}


def test_ctk_links_every_possible_node_of_the_loaded_driver_in_dev_char(tmp_path):
    """NVIDIA's fix for containers losing their GPUs at a systemd daemon-reload (runc's systemd
    cgroup driver names devices by /dev/char/MAJOR:MINOR): one link per possible node."""
    env = smi_on_path(tmp_path, gpu_count=2)
    args = [sys.executable, str(CTK), "system", "create-dev-char-symlinks", "--create-all",
            f"--dev-char-path={tmp_path / 'char'}"]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    links = {p.name: os.readlink(p) for p in (tmp_path / "char").iterdir()}
    assert links == {"195:254": "/dev/nvidia-modeset", "195:255": "/dev/nvidiactl",
                     "511:0": "/dev/nvidia-uvm", "511:1": "/dev/nvidia-uvm-tools",
                     "195:0": "/dev/nvidia0", "195:1": "/dev/nvidia1"}
    assert proc.stderr.count("Creating link") == 6
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=30)
    assert again.returncode == 0 and again.stderr.count("Could not create symlink") == 6


def test_ctk_refuses_to_link_without_a_loaded_driver(tmp_path):
    env = smi_on_path(tmp_path, fault="no-driver")
    proc = subprocess.run([sys.executable, str(CTK), "system", "create-dev-char-symlinks",
                           "--create-all", f"--dev-char-path={tmp_path / 'char'}"],
                          env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert "missing required device major nvidia-frontend" in proc.stderr
    assert not (tmp_path / "char").exists()


def test_ctk_is_idempotent(tmp_path):
    daemon = tmp_path / "daemon.json"
    existing = {"data-root": "/srv/docker", "runtimes": {"crun": {"path": "crun"}}}
    daemon.write_text(json.dumps(existing))
    ctk("runtime", "configure", "--runtime=docker", "--config", str(daemon))
    first = daemon.read_bytes()
    ctk("runtime", "configure", "--runtime=docker", "--config", str(daemon))
    assert daemon.read_bytes() == first
    loaded = json.loads(first)
    assert loaded["runtimes"] == {"crun": {"path": "crun"}, "nvidia": NVIDIA_DAEMON_RUNTIME}
    assert loaded["data-root"] == "/srv/docker"


def test_ctk_default_runtime_only_when_asked(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text("{}")
    ctk("runtime", "configure", "--runtime=docker", f"--config={daemon}")
    assert "default-runtime" not in json.loads(daemon.read_text())
    ctk("runtime", "configure", "--runtime=docker", f"--config={daemon}", "--set-as-default")
    assert json.loads(daemon.read_text())["default-runtime"] == "nvidia"


def test_ctk_creates_missing_file(tmp_path):
    daemon = tmp_path / "etc" / "docker" / "daemon.json"
    proc = ctk("runtime", "configure", "--runtime=docker", f"--config={daemon}")
    assert "Config file does not exist" in proc.stderr
    assert json.loads(daemon.read_text()) == {"runtimes": {"nvidia": NVIDIA_DAEMON_RUNTIME}}


def test_ctk_refuses_invalid_json_and_unknown_flags(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text("{not json")
    proc = ctk("runtime", "configure", "--runtime=docker", f"--config={daemon}", check=False)
    assert proc.returncode == 1
    assert daemon.read_text() == "{not json"
    assert ctk("runtime", "configure", "--bogus", check=False).returncode == 1
    assert ctk("runtime", "configure", "--runtime=podman", check=False).returncode == 1


def test_ctk_dry_run_and_version(tmp_path):
    daemon = tmp_path / "daemon.json"
    proc = ctk("runtime", "configure", "--runtime=docker", f"--config={daemon}", "--dry-run")
    assert json.loads(proc.stdout) == {"runtimes": {"nvidia": NVIDIA_DAEMON_RUNTIME}}
    assert not daemon.exists()
    assert ctk("--version").stdout.startswith("NVIDIA Container Toolkit CLI version 1.17.8\n")


# --------------------------------------------------------------------------- other doubles


def test_hook_double_records_visible_devices(tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(
        json.dumps({"process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0,1"]}})
    )
    log = tmp_path / "hook.log"
    proc = subprocess.run(
        [sys.executable, str(HOOK), "prestart"],
        input=json.dumps({"id": "abc", "bundle": str(bundle)}),
        env=dict(os.environ, NVIDIA_HOOK_DOUBLE_LOG=str(log)),
        capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(log.read_text())
    assert record["NVIDIA_VISIBLE_DEVICES"] == "0,1"
    assert record["args"] == ["prestart"]


def test_every_double_says_it_is_one():
    doubles = [SMI, *(p for p in FILES.iterdir() if p.name != "config.toml"), BUILD]
    for path in doubles:
        head = path.read_text()[:1500]
        assert "TEST DOUBLE" in head, path
        assert os.access(path, os.X_OK), path


def test_shell_doubles_parse():
    for path in (BUILD, FILES / "nvidia-container-runtime", FILES / "nvidia-container-cli"):
        shell = "bash" if path == BUILD else "sh"
        subprocess.run([shell, "-n", str(path)], check=True, timeout=30)
    assert "set -euo pipefail" in BUILD.read_text()


# --------------------------------------------------------------------------- apt repository double

REPO_TOOLS = ("dpkg-deb", "gpg", "gpgv")


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    missing = [tool for tool in REPO_TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"repository double needs {', '.join(missing)} (apt-get install gnupg dpkg)")
    out = tmp_path_factory.mktemp("nvidia-apt-double")
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", str(BUILD), str(out)], capture_output=True, text=True, timeout=120
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    return {"out": out, "flat": out / "stable" / "deb" / "amd64", "elapsed": elapsed,
            "stdout": proc.stdout}


def parse_release(text):
    sums, current = {}, None
    for line in text.splitlines():
        if line.startswith(" ") and current:
            digest, size, name = line.split()
            sums[current][name] = (digest, int(size))
        elif line.endswith(":"):
            current = line[:-1]
            sums[current] = {}
        else:
            current = None
    return sums


def parse_stanzas(text):
    stanzas = []
    for block in text.strip().split("\n\n"):
        fields = {}
        for line in block.splitlines():
            if not line.startswith(" "):
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        stanzas.append(fields)
    return stanzas


def test_repo_layout_matches_nvidia_flat_repo(repo):
    flat = repo["flat"]
    for name in ("Packages", "Packages.gz", "Release", "InRelease", "Release.gpg"):
        assert (flat / name).is_file(), name
    for name in ("gpgkey", "nvidia-container-toolkit.gpg.asc",
                 "nvidia-container-toolkit-keyring.gpg"):
        assert (repo["out"] / name).is_file(), name
    listing = (repo["out"] / "stable" / "deb" / "nvidia-container-toolkit.list").read_text()
    assert listing.splitlines()[0] == "deb http://127.0.0.1:8089/stable/deb/$(ARCH) /"
    assert repo["elapsed"] < 10, f"build took {repo['elapsed']:.1f} s"


def test_repo_release_hashes_match(repo):
    flat = repo["flat"]
    sums = parse_release((flat / "Release").read_text())
    algos = {"MD5Sum": hashlib.md5, "SHA1": hashlib.sha1, "SHA256": hashlib.sha256,
             "SHA512": hashlib.sha512}
    for field, algo in algos.items():
        assert set(sums[field]) == {"Packages", "Packages.gz"}, field
        for name, (digest, size) in sums[field].items():
            data = (flat / name).read_bytes()
            assert algo(data).hexdigest() == digest, (field, name)
            assert len(data) == size, (field, name)
    assert gzip.decompress((flat / "Packages.gz").read_bytes()) == (flat / "Packages").read_bytes()


def test_repo_packages_index(repo):
    flat = repo["flat"]
    stanzas = {s["Package"]: s for s in parse_stanzas((flat / "Packages").read_text())}
    assert set(stanzas) == {
        "nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools"
    }
    toolkit = stanzas["nvidia-container-toolkit"]
    assert toolkit["Version"] == "1.17.8-1"
    assert toolkit["Architecture"] == "all"
    assert "python3" in toolkit["Depends"]
    assert "nvidia-container-toolkit-base (= 1.17.8-1)" in toolkit["Depends"]
    for stanza in stanzas.values():
        deb = flat / stanza["Filename"]
        data = deb.read_bytes()
        assert hashlib.sha256(data).hexdigest() == stanza["SHA256"]
        assert len(data) == int(stanza["Size"])


def test_repo_debs_carry_the_doubles(repo, tmp_path):
    deb = repo["flat"] / "nvidia-container-toolkit-base_1.17.8-1_all.deb"
    subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path)], check=True, timeout=30)
    assert (tmp_path / "usr/bin/nvidia-ctk").read_bytes() == CTK.read_bytes()
    assert os.access(tmp_path / "usr/bin/nvidia-ctk", os.X_OK)
    assert (tmp_path / "usr/bin/nvidia-container-runtime").is_file()
    hook_deb = repo["flat"] / "nvidia-container-toolkit_1.17.8-1_all.deb"
    listing = subprocess.run(["dpkg-deb", "-c", str(hook_deb)], capture_output=True, text=True,
                             check=True, timeout=30).stdout
    assert "./usr/bin/nvidia-container-runtime-hook" in listing


def gpgv(keyring, *files):
    return subprocess.run(["gpgv", "--keyring", str(keyring), *map(str, files)],
                          capture_output=True, text=True, timeout=30)


def test_repo_inrelease_verifies_with_exported_key(repo, tmp_path):
    out, flat = repo["out"], repo["flat"]
    keyring = out / "nvidia-container-toolkit-keyring.gpg"
    proc = gpgv(keyring, flat / "InRelease")
    assert proc.returncode == 0, proc.stderr
    proc = gpgv(keyring, flat / "Release.gpg", flat / "Release")
    assert proc.returncode == 0, proc.stderr
    # The armored export dearmors to the binary keyring (what the role does with `gpgkey`).
    dearmored = tmp_path / "dearmored.gpg"
    subprocess.run(
        ["gpg", "--batch", "--dearmor", "-o", str(dearmored), str(out / "gpgkey")],
        env=dict(os.environ, GNUPGHOME=str(tmp_path)), check=True, capture_output=True,
        timeout=30,
    )
    assert dearmored.read_bytes() == keyring.read_bytes()
    assert (out / "gpgkey").read_bytes() == (out / "nvidia-container-toolkit.gpg.asc").read_bytes()


def test_repo_tampered_release_fails(repo, tmp_path):
    tampered = tmp_path / "Release"
    original = (repo["flat"] / "Release").read_text()
    tampered.write_text(original.replace("Packages.gz", "Packages.xz"))
    keyring = repo["out"] / "nvidia-container-toolkit-keyring.gpg"
    assert gpgv(keyring, repo["flat"] / "Release.gpg", tampered).returncode != 0


def test_repo_holds_no_private_key(repo):
    for path in repo["out"].rglob("*"):
        if path.is_file():
            assert b"PRIVATE KEY" not in path.read_bytes(), path
    assert not any(p.name in ("gnupg", ".gnupg", "private-keys-v1.d")
                   for p in repo["out"].rglob("*"))


def test_repo_rebuild_is_a_no_op(repo):
    before = {p: p.read_bytes() for p in repo["out"].rglob("*") if p.is_file()}
    proc = subprocess.run(["bash", str(BUILD), str(repo["out"])], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "up to date" in proc.stdout
    after = {p: p.read_bytes() for p in repo["out"].rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.parametrize("args", [
    ("--query-gpu=index,name,memory.total,driver_version,pci.bus_id,compute_cap",
     "--format=csv,noheader"),
    ("topo", "-m"),
    (),
])
def test_smi_faults_exit_as_the_real_tool_does(smi_env, args):
    smi_env["NVIDIA_SMI_DOUBLE_FAULT"] = "no-driver"
    proc = smi(smi_env, *args, check=False)
    assert proc.returncode == 9 and "couldn't communicate with the NVIDIA driver" in proc.stdout
    smi_env["NVIDIA_SMI_DOUBLE_FAULT"] = "gpu-lost"
    proc = smi(smi_env, *args, check=False)
    assert proc.returncode == 15 and "GPU is lost" in proc.stdout
    assert smi(smi_env, "--version").returncode == 0      # needs no driver


# ------------------------------------------------------------------ booted by the kernel double


def booted(tmp_path, smi_env, release="6.8.0-50-generic", module=None, libraries=()):
    kernel, libs = tmp_path / "kernel-double", tmp_path / "lib"
    kernel.mkdir()
    libs.mkdir()
    if release:
        (kernel / "release").write_text(release + "\n")
    if module:
        (kernel / "nvidia-module").write_text(module + "\n")
    for version in libraries:
        (libs / f"libnvidia-ml.so.{version}").write_text(version)
    (libs / "libnvidia-ml.so.1").write_text("link")   # the soname link, not a version
    return {**smi_env, "NVIDIA_SMI_DOUBLE_KERNEL_DIR": str(kernel),
            "NVIDIA_SMI_DOUBLE_LIB_DIR": str(libs)}


def test_a_kernel_booted_with_its_module_reports_the_module_s_driver(tmp_path, smi_env):
    env = booted(tmp_path, smi_env, module="580.105.08", libraries=["580.105.08"])
    out = smi(env, "--query-gpu=driver_version", "--format=csv,noheader").stdout
    assert out.splitlines() == ["580.105.08", "580.105.08"]


def test_a_kernel_booted_without_a_module_has_no_driver(tmp_path, smi_env):
    env = booted(tmp_path, smi_env, module=None, libraries=["580.95.05"])
    proc = smi(env, "-L", check=False)
    assert proc.returncode == 9 and "couldn't communicate with the NVIDIA driver" in proc.stdout


def test_libraries_newer_than_the_loaded_module_are_nvml_s_version_mismatch(tmp_path, smi_env):
    env = booted(tmp_path, smi_env, module="580.95.05", libraries=["580.105.08"])
    proc = smi(env, "--query-gpu=driver_version", "--format=csv", check=False)
    assert proc.returncode == 18
    assert proc.stdout.splitlines() == [
        "Failed to initialize NVML: Driver/library version mismatch",
        "NVML library version: 580.105",
    ]


def test_debian_s_nvml_in_its_nvidia_current_folder_is_found(tmp_path, smi_env):
    """Debian's libnvidia-ml1 installs libnvidia-ml.so.<version> in <libdir>/nvidia/current
    (nvidia-alternative links the soname into <libdir>)."""
    env = booted(tmp_path, smi_env, module="550.163.01")
    current = Path(env["NVIDIA_SMI_DOUBLE_LIB_DIR"]) / "nvidia/current"
    current.mkdir(parents=True)
    (current / "libnvidia-ml.so.550.163.01").write_text("550.163.01")
    out = smi(env, "--query-gpu=driver_version", "--format=csv,noheader").stdout
    assert out.splitlines() == ["550.163.01", "550.163.01"]


def test_no_nvml_library_installed_is_its_own_error(tmp_path, smi_env):
    proc = smi(booted(tmp_path, smi_env, module="580.95.05"), "-L", check=False)
    assert proc.returncode == 12 and "couldn't find libnvidia-ml.so" in proc.stdout


def test_without_a_booted_kernel_the_double_answers_as_configured(tmp_path, smi_env):
    env = booted(tmp_path, smi_env, release=None)
    out = smi(env, "--query-gpu=driver_version", "--format=csv,noheader").stdout
    assert out.splitlines() == ["580.95.05", "580.95.05"]
