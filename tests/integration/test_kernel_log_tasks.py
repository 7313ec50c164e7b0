"""The kernel-log window as the role opens and reads it: kernel_window.yml, then health.yml's
kernel-log tasks taken from the file unchanged, run by ansible-playbook on localhost with the
kernel-log double (molecule/doubles/dmesg-double) as dmesg and journalctl ahead of stand-ins for
the real tools. The double's wall-clock stamps drift as a real host's do after a suspend (-300 s)
or when the clock was set back (+300 s): an Xid line written after the window opened must be
found, and one written before it must not, whichever way the clock went."""

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.vllm_dual_fast_domain import verdict as health
from ansible_runner import ROLE, run_playbook
from docker_engine import docker, needs_docker
from kernel_log_stand_ins import install_kernel_log_tools

ROOT = Path(__file__).parents[2]
DOUBLE = ROOT / "molecule/doubles/dmesg-double"
HEALTH = yaml.safe_load((ROLE / "tasks/health.yml").read_text())
XID = ("NVRM: Xid (PCI:0000:01:00): 31, pid={pid}, name=python3, Ch 00000008, intr 00000000. "
       "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_1c000000.")
BEFORE, AFTER = XID.format(pid=1111), XID.format(pid=2222)

def kernel_log_tasks():
    """health.yml's kernel-log task (an include of kernel_log.yml), pointed at the role's file
    (the play is outside the role)."""
    tasks = [dict(t) for t in HEALTH
             if t["name"] == "Read the kernel lines written since the window opened"]
    assert len(tasks) == 1, [t["name"] for t in HEALTH]
    tasks[0]["ansible.builtin.include_tasks"] = str(
        ROLE / "tasks" / tasks[0]["ansible.builtin.include_tasks"])
    return tasks


def read_window(tmp_path, drift_s, journal_keeps_kernel=False):
    """Opens the window (kernel_window.yml), writes an Xid line 5 s before it opened and one after,
    then reads the kernel log as health.yml does; the facts it set and the stand-ins' calls."""
    double_bin, real_bin = install_kernel_log_tools(tmp_path)
    lines, out = tmp_path / "kernel-lines", tmp_path / "facts.json"
    python = os.path.realpath(sys.executable)
    write = ("import sys, time; at = time.time() + float(sys.argv[2]); "
             "open(sys.argv[1], 'a').write(f'{at:.6f} {sys.argv[3]}\\n')")
    play = [{
        "name": "Kernel-log window", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "Open the window",
             "ansible.builtin.include_tasks": str(ROLE / "tasks/kernel_window.yml")},
            {"name": "The driver writes an Xid line dated before the window, and one after it",
             "ansible.builtin.shell": (
                 f"{python} -c \"{write}\" {lines} -5 '{BEFORE}' && sleep 0.2 && "
                 f"{python} -c \"{write}\" {lines} 0 '{AFTER}'"),
             "changed_when": False},
            *kernel_log_tasks(),
            {"name": "Keep the facts", "ansible.builtin.copy": {
                "content": "{{ _vllm_dual_fast_kernel_log"
                           " | combine({'window': _vllm_dual_fast_kernel_window}) | to_json }}",
                "dest": str(out), "mode": "0644"}},
        ],
    }]
    env = {"PATH": f"{double_bin}:{real_bin}:{os.environ['PATH']}",
           "DMESG_DOUBLE_DRIFT_S": str(drift_s), "DMESG_DOUBLE_LINES": str(lines),
           "DMESG_DOUBLE_CONFIG": str(tmp_path / "no-config.json"),
           "JOURNAL_KEEPS_KERNEL": "1" if journal_keeps_kernel else "0"}
    began = time.time()
    result, text = run_playbook(tmp_path, play, env=env)
    assert result.returncode == 0, text
    facts = json.loads(out.read_text())
    assert began <= facts["window"]["since_epoch"] <= time.time(), facts
    return facts, (real_bin / "calls.log").read_text().splitlines()


def xid_pids(lines):
    return [line.split("pid=")[1].split(",")[0] for line in lines if "NVRM: Xid" in line]


@pytest.mark.parametrize("drift_s", [-300, 0, 300])
def test_the_xid_after_the_window_opened_is_found_whatever_the_wall_clock_stamps_say(
        tmp_path, drift_s):
    # -300: after a five-minute suspend dmesg's wall-clock stamps lag by five minutes, and the
    # line written after the window opened looked older than it; +300: the line written before
    # looked newer. Read against the kernel's own clock, neither moves.
    facts, calls = read_window(tmp_path, drift_s)
    assert xid_pids(facts["lines"]) == ["2222"], facts
    assert facts["source"] == "dmesg" and facts["readable"] is True, facts
    assert "dmesg " in calls and not [c for c in calls if "time-format" in c], calls


def test_the_journal_is_read_since_the_window_opened_by_the_rig_s_own_clock(tmp_path):
    facts, calls = read_window(tmp_path, -300, journal_keeps_kernel=True)
    assert xid_pids(facts["lines"]) == ["2222"], facts
    assert facts["source"] == "journal" and facts["readable"] is True, facts
    assert "Linux version" not in " ".join(facts["lines"])      # the journal's old line is out
    since = f"--since=@{facts['window']['since_epoch']}"
    assert [c for c in calls if since in c and "_TRANSPORT=kernel" in c], calls
    assert not [c for c in calls if c.startswith("dmesg")], calls


def test_the_window_holds_both_clocks_of_one_boot(tmp_path):
    facts, _ = read_window(tmp_path, 0)
    window = facts["window"]
    assert set(window) == {"since_epoch", "since_monotonic", "boot_id"}, window
    # read together: the wall clock minus the kernel clock is the boot's wall time, to a second
    boot_at = time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)
    assert abs(window["since_epoch"] - window["since_monotonic"] - boot_at) < 1, window
    assert window["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()



@pytest.fixture(scope="module")
def rig():
    """A simulated rig as Molecule starts one (Debian 13, systemd, privileged: its journald reads
    the VM's kernel log), with the double installed as prepare_rig.yml installs it."""
    name = f"vdf-kernel-log-test-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name, "--privileged", "--cgroupns", "private",
           "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
           "vdf-target:debian13", "/lib/systemd/systemd")
    try:
        docker("exec", name, "systemctl", "is-system-running", "--wait", check=False)
        for tool in ("dmesg", "journalctl"):
            docker("cp", str(DOUBLE), f"{name}:/usr/local/bin/{tool}")
        docker("exec", name, "sh", "-c", "mkdir -p /var/lib/dmesg-double && "
               "echo '{\"drift_s\": -300}' > /etc/dmesg-double.json")
        yield name
    finally:
        docker("rm", "-f", name, check=False)



@needs_docker
def test_a_simulated_rig_reads_its_real_journal_and_finds_the_xid_after_the_window(tmp_path, rig):
    # The real journalctl of Debian 13 (systemd 257): its short-unix lines, its --since=@EPOCH,
    # its answer to whether journald keeps kernel lines; the double's wall clock drifted -300 s.
    lines = "/var/lib/dmesg-double/lines"
    write = (f"import time; open('{lines}', 'a').write(f'{{time.time() - 5:.6f}} {BEFORE}\\n'); "
             f"time.sleep(0.2); open('{lines}', 'a').write(f'{{time.time():.6f}} {AFTER}\\n')")
    play = [{
        "name": "Kernel-log window on a rig", "hosts": "rig", "gather_facts": False,
        "tasks": [
            {"name": "Open the window",
             "ansible.builtin.include_tasks": str(ROLE / "tasks/kernel_window.yml")},
            {"name": "The driver writes an Xid line dated before the window, and one after it",
             "ansible.builtin.command": {"argv": ["python3", "-c", write]},
             "changed_when": False},
            *kernel_log_tasks(),
            {"name": "Keep the facts", "ansible.builtin.copy": {
                "content": "{{ _vllm_dual_fast_kernel_log | to_json }}",
                "dest": "/tmp/kernel-log-facts.json", "mode": "0644"}},
        ],
    }]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {"rig": {
        "ansible_connection": "community.docker.docker", "ansible_host": rig}}}}))
    result, text = run_playbook(tmp_path, play, inventory=("-i", str(tmp_path / "inventory.yml")),
                                args=("-e", "ansible_python_interpreter=/usr/bin/python3"))
    assert result.returncode == 0, text
    facts = json.loads(docker("exec", rig, "cat", "/tmp/kernel-log-facts.json").stdout)
    assert facts["source"] == "journal" and facts["readable"] is True, facts
    assert xid_pids(facts["lines"]) == ["2222"], facts
    # every line of the real journal's kernel log is dated, or continues the line before it
    real = docker("exec", rig, "/usr/bin/journalctl", "_TRANSPORT=kernel", "--boot=0", "--quiet",
                  "--no-pager", "--output=short-unix").stdout.splitlines()
    assert real and all(health.journal_line_epoch(line) is not None or line.startswith(" ")
                        for line in real), real
    assert health.journal_line_epoch(real[-1]) == pytest.approx(time.time(), abs=3600), real[-1]


def test_this_machine_s_real_dmesg_lines_carry_the_stamps_the_filter_reads():
    done = subprocess.run(["/usr/bin/dmesg"], capture_output=True, text=True, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        pytest.skip(f"the kernel log is not readable here: {done.stderr.strip()}")
    lines = done.stdout.splitlines()
    stamps = [health.dmesg_line_stamp(line) for line in lines]
    # a multi-line message continues on indented lines, which go with the line before
    undated = [line for line, at in zip(lines, stamps) if at is None]
    assert stamps[0] is not None and all(line.startswith(" ") for line in undated), undated
    assert max(at for at in stamps if at is not None) <= time.clock_gettime(time.CLOCK_MONOTONIC)


REFUSED_DMESG = """#!/bin/sh
# The real dmesg, run as nobody: under kernel.dmesg_restrict=1 (as in an LXC or Proxmox guest, or
# on a host that restricts it) it refuses to read the kernel buffer.
exec setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/dmesg "$@"
"""


@pytest.mark.skipif(Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() != "1"
                    or shutil.which("setpriv") is None or os.geteuid() != 0,
                    reason="needs kernel.dmesg_restrict=1, setpriv and root to drop to nobody")
def test_a_kernel_log_the_real_dmesg_refuses_fails_a_canary_as_cannot_judge(tmp_path):
    """The real util-linux dmesg refused by the kernel, and a journal with no kernel lines:
    before, the verdict said "healthy" with nothing judged (an LXC guest's canary passed with
    its headline risk, the Xid 31 of vllm#40756, unchecked)."""
    bin_dir, out = tmp_path / "bin", tmp_path / "facts.json"
    bin_dir.mkdir()
    for name, text in (("dmesg", REFUSED_DMESG), ("journalctl", "#!/bin/sh\nexit 0\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    play = [{
        "name": "Kernel log refused", "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"name": "Open the window",
             "ansible.builtin.include_tasks": str(ROLE / "tasks/kernel_window.yml")},
            *kernel_log_tasks(),
            {"name": "Keep the facts", "ansible.builtin.copy": {
                "content": "{{ _vllm_dual_fast_kernel_log"
                           " | combine({'window': _vllm_dual_fast_kernel_window}) | to_json }}",
                "dest": str(out), "mode": "0644"}},
        ],
    }]
    result, text = run_playbook(tmp_path, play,
                                env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert result.returncode == 0, text
    kernel = json.loads(out.read_text())
    assert kernel["source"] == "dmesg" and kernel["readable"] is False, kernel
    assert "Operation not permitted" in kernel["error"], kernel
    result, lines = health.kernel_log_gate(kernel)
    assert result == "cannot-judge" and "Xid lines not checked" in lines[0], lines
