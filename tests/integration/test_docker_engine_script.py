"""scripts/docker-engine.sh's memory of engines that fail the probe here, sourced (its functions
only) with a temporary state folder: the real bash, dpkg-query, docker CLI and /proc."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "scripts/docker-engine.sh"
OLD = "docker.io=20.10.24+dfsg1-1+deb12u1"


def sourced(tmp_path, commands, **env):
    """Output of `commands` run after sourcing the script (set -e off, so a function's status
    can be printed)."""
    run = subprocess.run(
        ["bash", "-c", f"source {SCRIPT}; set +eu; {commands}"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "VDF_STATE_DIR": str(tmp_path), **env})
    assert run.returncode == 0, run.stderr
    return run.stdout


def bounding_set_is_reduced_here():
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    bnd = next(line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("CapBnd:"))
    return int(bnd, 16) != (1 << (last + 1)) - 1


def test_a_failed_engine_version_is_remembered_and_then_known(tmp_path):
    out = sourced(tmp_path, f"remember_failed_probe {OLD}; remember_failed_probe {OLD}; "
                            f"known_probe_failure {OLD}")
    assert "it failed the probe on this machine on 20" in out
    lines = (tmp_path / "engine-probe-failed").read_text().splitlines()
    assert len(lines) == 1 and lines[0].startswith(OLD + " ")          # remembered once


def test_an_engine_no_package_installed_is_never_remembered(tmp_path):
    sourced(tmp_path, "remember_failed_probe docker.io=none")
    assert not (tmp_path / "engine-probe-failed").exists()


def test_old_docker_is_known_to_fail_only_where_the_bounding_set_is_reduced(tmp_path):
    out = sourced(tmp_path, f"known_probe_failure {OLD}; echo ---; "
                            "known_probe_failure docker.io=26.1.5+dfsg1-9+b9")
    old, new = out.split("---")
    assert ("capability bounding set is reduced" in old) == bounding_set_is_reduced_here()
    assert new.strip() == ""


def test_a_probe_image_that_cannot_be_made_is_no_verdict_on_the_engine(tmp_path):
    # The real docker CLI against a socket where no engine listens: `docker import` fails.
    out = sourced(tmp_path, "engine_runs_rigs; echo rc=$?",
                  DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock")
    assert out.strip().endswith("rc=2")


def test_pid_files_left_by_a_restart_go_and_a_live_daemons_stays(tmp_path):
    # What a restart leaves: dockerd's file naming a PID now held by another process (this test's
    # own sleep), containerd's naming a PID no process holds. A file naming a live process of the
    # right name (the sleep, under the name "sleep") stays: that daemon is still running.
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        reused, gone = tmp_path / "docker.pid", tmp_path / "containerd.pid"
        live = tmp_path / "live.pid"
        reused.write_text(f"{sleeper.pid}\n")
        gone.write_text("4194304")                                      # above any pid_max
        live.write_text(str(sleeper.pid))
        out = sourced(tmp_path, "remove_stale_daemon_pidfiles",
                      VDF_DAEMON_PIDFILES=f"{reused}:dockerd {gone}:containerd {live}:sleep")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not reused.exists() and not gone.exists()
    assert live.exists()
    assert f"it names PID {sleeper.pid}, which is no running dockerd" in out


def test_the_engine_log_is_counted_quietly_before_its_first_start(tmp_path):
    """Before: `wc -l <log 2>/dev/null` printed "dockerd.log: No such file or directory" on a
    bare machine's first `make setup` (the redirection of stderr came after the one that failed)."""
    run = subprocess.run(
        ["bash", "-c", f"source {SCRIPT}; set +eu; log_lines_so_far; LOG={tmp_path}/lines; "
                       f"printf 'a\\nb\\n' >$LOG; log_lines_so_far"],
        capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "VDF_STATE_DIR": str(tmp_path / "fresh")})
    assert (run.returncode, run.stdout.split(), run.stderr) == (0, ["0", "2"], "")
