"""The engine guard (roles/vllm_dual_fast/templates/usr/local/sbin/vllm-dual-fast-engine-guard.j2)
on Debian 12's Docker 20.10, which the Molecule scenarios (Debian 13 rigs, Docker 26) never run.

A systemd rig container (vdf-target:debian12) gets docker.io and iptables from Debian 12's
archive. Inside it, with no registry, an empty image runs the rig's own python3 (its /usr, /lib,
/lib64, /bin, /etc bind-mounted read-only) as two plain web servers: the "engine" on a network
whose bridge is named vdf-engine, published on 127.0.0.1:8001, and an unguarded "decoy" on
Docker's default bridge, published on 127.0.0.1:8099. A LAN neighbour (a container on the rig's
Docker network, molecule/shared/neighbour/probe.sh) routes the containers' addresses through the
rig and sends to the rig's 127.0.0.1 with a forged destination.

The engine here is `python3 -m http.server`, not vLLM: it answers /invocations with 501 and
/metrics with 404. Any HTTP status means the neighbour reached it; `none` (nothing answered within
the probe's time-out) means it did not. Without the guard the engine answers both ways (the hole
on 20.10, and proof that this test can fail); with it, and after Docker's restart, nothing does,
while the decoy still answers both ways (the neighbour's tricks still work on this Docker), and
the rig's own requests to both loopback ports (nginx's way to the engine) still answer.
"""

import os
import re
import shlex
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule
from vllm_double_fixtures import ROLE, ROOT

GUARD_TEMPLATE = "usr/local/sbin/vllm-dual-fast-engine-guard.j2"
GUARD = "/usr/local/sbin/vllm-dual-fast-engine-guard"
PROBE = ROOT / "molecule" / "shared" / "neighbour" / "probe.sh"
RIG_IMAGE = "vdf-target:debian12"
NAME = f"vdf-test-guard-{os.getpid()}"      # the rig, its network and (with -docker) its volume
ENGINE_LOOPBACK_PORT, DECOY_LOOPBACK_PORT = 8001, 8099
LOOPBACK_PORTS = (str(ENGINE_LOOPBACK_PORT), str(DECOY_LOOPBACK_PORT))
PROBE_TIMEOUT_S = 2                          # every hop is a local bridge: an answer takes ms
APT_CACHE = Path(os.environ.get("VDF_CACHE", Path.home() / ".cache" / "vllm-dual-fast")) \
    / "apt-archives" / "guard-debian12"

# Run in the rig. Bounded waits only: each loop gives up at its deadline.
# systemd first: until it is up, `systemctl start` fails and its tmp.mount may still cover /tmp.
INSTALL_DOCKER = """
for _ in $(seq 120); do
  case $(systemctl is-system-running 2>/dev/null) in running|degraded) break ;; esac
  sleep 0.5
done
case $(systemctl is-system-running 2>&1) in
  running|degraded) ;;
  *) echo "systemd never came up: $(systemctl is-system-running 2>&1)"; exit 1 ;;
esac
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/root/apt.log 2>&1 &&
  apt-get install -y -q --no-install-recommends docker.io iptables >>/root/apt.log 2>&1 ||
  { tail -n 20 /root/apt.log; exit 1; }
systemctl start docker
docker version --format '{{.Server.Version}}'
"""
# The rig's own binaries in an empty image: no registry needed. /lib and /lib64 are symlinks
# into /usr on Debian 12; Docker mounts what they point at. $1, $2: the loopback ports. Python as
# PID 1 ignores SIGTERM: --stop-timeout 1 spares Docker's restart its 10 s wait before SIGKILL.
START_SERVERS = """
set -e
tar -cf - --files-from /dev/null | docker import - vdf-guard-empty >/dev/null
mounts="-v /usr:/usr:ro -v /lib:/lib:ro -v /lib64:/lib64:ro -v /bin:/bin:ro -v /etc:/etc:ro"
server="--restart unless-stopped --stop-timeout 1 vdf-guard-empty python3 -m http.server 8000"
docker network create -o com.docker.network.bridge.name=vdf-engine vdf-engine-net >/dev/null
docker run -d --name engine --network vdf-engine-net \
  -p "127.0.0.1:$1:8000" $mounts $server >/dev/null
docker run -d --name decoy -p "127.0.0.1:$2:8000" $mounts $server >/dev/null
"""
# Both servers answer HTTP on the rig's loopback ($1, $2), the way nginx reaches the engine
# (docker-proxy accepts before the server is up: a TCP connect proves nothing); then their
# addresses, "<engine's> | <decoy's>".
SERVERS_READY = """
python3 - "$1" "$2" <<'PY' || exit 1
import sys, time, urllib.request
deadline = time.monotonic() + 30
for port in sys.argv[1:]:
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2).close()
            break
        except OSError as error:
            if time.monotonic() > deadline:
                sys.exit(f"port {port} never answered on the rig's loopback: {error}")
            time.sleep(0.2)
PY
engine=$(docker inspect -f \
  '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{.GlobalIPv6Address}} {{end}}' engine)
echo "$engine | $(docker inspect -f '{{.NetworkSettings.IPAddress}}' decoy)"
"""


def docker(*args, timeout=120, check=True):
    result = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                            check=False)
    if check and result.returncode != 0:
        pytest.fail(f"docker {shlex.join(args)}: rc {result.returncode}\n"
                    f"{result.stdout}{result.stderr}")
    return result


def in_rig(script, *args, timeout=120, check=True):
    """One `docker exec` per step: each exec into a systemd container is a (rare) chance of
    runc's "read init-p: connection reset by peer" (ENVIRONMENT.md)."""
    return docker("exec", NAME, "bash", "-c", script, "bash", *args, timeout=timeout,
                  check=check)


def rendered_guard():
    """The guard as the role renders it: Jinja with Ansible's filters, vars/main.yml's bridge."""
    env = jinja2.Environment(  # noqa: S701 (a shell script: no HTML escaping)
        loader=jinja2.FileSystemLoader(str(ROLE / "templates")), trim_blocks=True,
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters.update(FilterModule().filters())
    return env.get_template(GUARD_TEMPLATE).render(**template_vars())


def template_vars():
    """What the guard's templates read: vars/main.yml's names and the role's defaults."""
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text(encoding="utf-8"))
    return {"ansible_managed": "rendered by tests/integration/test_engine_guard.py",
            "vllm_dual_fast_engine_guard_watch_s": defaults["vllm_dual_fast_engine_guard_watch_s"],
            **{k: role_vars[k] for k in ("_vllm_dual_fast_engine_bridge",
                                          "_vllm_dual_fast_textfile_dir",
                                          "_vllm_dual_fast_state_dir")}}


def rendered_unit(name):
    env = jinja2.Environment(  # noqa: S701 (a unit file: no HTML escaping)
        loader=jinja2.FileSystemLoader(str(ROLE / "templates")), trim_blocks=True,
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template(f"etc/systemd/system/{name}.j2").render(**template_vars())


def remove_everything():
    docker("rm", "-f", f"{NAME}-neighbour", NAME, check=False)
    docker("volume", "rm", f"{NAME}-docker", check=False)
    docker("network", "rm", NAME, check=False)


def host_can_run_the_rig():
    if docker("info", "--format", "{{.ServerVersion}}", check=False).returncode != 0:
        return "no Docker engine answers here (make setup starts one)"
    if docker("image", "inspect", RIG_IMAGE, check=False).returncode != 0:
        return f"no {RIG_IMAGE} image (make images builds it)"
    return None


def start_rig():
    APT_CACHE.mkdir(parents=True, exist_ok=True)
    docker("network", "create", NAME)
    docker("run", "-d", "--name", NAME, "--hostname", NAME, "--network", NAME,
           "--privileged", "--cgroupns=private",
           "--tmpfs", "/run", "--tmpfs", "/run/lock", "--tmpfs", "/tmp",
           "-v", f"{NAME}-docker:/var/lib/docker",
           "-v", f"{APT_CACHE}:/var/cache/apt/archives", RIG_IMAGE)


def start_servers():
    """Skips, naming runc's own words, where Docker 20.10 cannot start even a plain container
    (its runc 1.1.5 fails on a reduced capability bounding set for --privileged ones here)."""
    started = in_rig(START_SERVERS, *LOOPBACK_PORTS, check=False)
    if started.returncode != 0 and "unable to apply caps" in started.stderr:
        pytest.skip(f"Docker 20.10 cannot start a plain container here: {started.stderr.strip()}")
    assert started.returncode == 0, started.stdout + started.stderr


def servers_ready():
    """Waits (bounded) for both servers; returns (engine's addresses, decoy's address)."""
    out = in_rig(SERVERS_READY, *LOOPBACK_PORTS, timeout=60).stdout
    engine, decoy = out.split("|")
    return engine.strip(), decoy.strip()


@pytest.fixture(scope="module")
def rig():
    """A Debian 12 rig with Docker 20.10 running the engine and the decoy; yields the Docker
    version. Everything it started goes at teardown, even when a step fails."""
    reason = host_can_run_the_rig()
    if reason:
        pytest.skip(reason)
    try:
        start_rig()
        version = in_rig(INSTALL_DOCKER, timeout=600).stdout.strip()
        start_servers()
        yield version
    finally:
        remove_everything()


def rig_address():
    return docker("inspect", "-f", f'{{{{(index .NetworkSettings.Networks "{NAME}").IPAddress}}}}',
                  NAME).stdout.strip()


def neighbour_probe():
    """What the neighbour gets: {probe name: HTTP status or "none"} (probe.sh's lines)."""
    engine_addrs, decoy_addr = servers_ready()
    env = {"RIG": rig_address(), "RIG6": "", "ENGINE_ADDRS": engine_addrs, "ENGINE_PORT": "8000",
           "LOOPBACK_PORT": str(ENGINE_LOOPBACK_PORT), "PUBLIC_PORT": "", "KEY": "",
           "DECOY_ADDR": decoy_addr, "DECOY_LOOPBACK_PORT": str(DECOY_LOOPBACK_PORT),
           "TIMEOUT": str(PROBE_TIMEOUT_S)}
    out = docker("run", "--rm", f"--name={NAME}-neighbour", f"--network={NAME}",
                 "--cap-add=NET_ADMIN", "--sysctl=net.ipv4.conf.all.route_localnet=1",
                 "--sysctl=net.ipv4.conf.all.rp_filter=0", f"--volume={PROBE}:/probe.sh:ro",
                 "--entrypoint=/bin/bash", *(f"--env={k}={v}" for k, v in env.items()),
                 RIG_IMAGE, "/probe.sh").stdout
    return dict(line.split(maxsplit=1) for line in out.splitlines())


def engine_statuses(statuses):
    return {name: status for name, status in statuses.items() if not name.endswith("-decoy")}


def decoy_statuses(statuses):
    return {name: status for name, status in statuses.items() if name.endswith("-decoy")}


def answered(status):
    return status.isdigit()                  # any HTTP status: http.server is no vLLM


def install_guard():
    """Copies the rendered guard into the rig, runs it, again, then with --check:
    the three runs' outputs and exit statuses."""
    script = shlex.quote(rendered_guard())
    out = in_rig(f"""
printf %s {script} >{GUARD} && chmod 0755 {GUARD}
for args in '' '' --check; do {GUARD} $args 2>&1; echo "rc=$?"; echo ---; done
""").stdout
    return [run.strip() for run in out.split("---")[:3]]


def restart_docker_and_check_guard():
    return in_rig(f"systemctl restart docker && {GUARD} --check 2>&1; echo rc=$?",
                  timeout=120).stdout.strip()


def test_the_guard_closes_docker_20_10s_forwarding_hole(rig):
    assert rig.startswith("20.10."), f"Debian 12's docker.io is 20.10, got {rig}"

    before = neighbour_probe()
    assert {"routed-v4-invocations", "forged-invocations"} <= set(before), before
    assert all(answered(s) for s in before.values()), f"no hole to close on {rig}? {before}"

    first, second, check = install_guard()
    # "added ip6tables" too, where the rig's kernel has an IPv6 filter table (it has here).
    assert first.splitlines() in (["added iptables", "added ip6tables", "rc=0"],
                                  ["added iptables", "rc=0"]), first
    assert second == "rc=0", f"a second run changed something: {second}"
    assert check == "rc=0", check

    guarded = neighbour_probe()
    assert not any(answered(s) for s in engine_statuses(guarded).values()), guarded
    assert all(answered(s) for s in decoy_statuses(guarded).values()), guarded

    # Docker keeps DOCKER-USER's rules across its restart; the engine comes back by its policy.
    assert restart_docker_and_check_guard() == "rc=0"
    restarted = neighbour_probe()
    print(f"Docker {rig}: before {before}, guarded {guarded}, after a restart {restarted}")
    assert not any(answered(s) for s in engine_statuses(restarted).values()), restarted
    assert all(answered(s) for s in decoy_statuses(restarted).values()), restarted
    assert set(restarted) == set(before)

    # A FORWARD chain without the jump to DOCKER-USER (what an `iptables -F` leaves) would leave
    # the rule guarding nothing: before, the guard failed the deploy blaming "iptables": false;
    # now it puts the jump back itself, once (a second run changes nothing). At boot (--boot,
    # before Docker makes the jump) it only adds its rules.
    unhooked = in_rig(f"""
iptables -w -D FORWARD -j DOCKER-USER
{GUARD} --boot 2>&1; echo "rc=$?"; echo ---
{GUARD} 2>&1; echo "rc=$?"; echo ---
{GUARD} 2>&1; echo "rc=$?"; echo ---
iptables -w -S FORWARD | grep -c -- '-j DOCKER-USER'
""").stdout
    boot_run, role_run, again, jumps = (run.strip() for run in unhooked.split("---"))
    assert boot_run == "rc=0", boot_run
    assert role_run.startswith("added iptables FORWARD jump") and role_run.endswith("rc=0"), \
        role_run
    assert again == "rc=0" and jumps == "1", (again, jumps)
    assert not any(answered(s) for s in engine_statuses(neighbour_probe()).values())


# ufw-docker's /etc/ufw/after.rules (chaifeng/ufw-docker, its README's "Solving UFW and Docker
# issues"): it declares DOCKER-USER, so each `ufw reload` (`iptables-restore -n` of the file)
# flushes the chain, then fills it with RETURNs for the private ranges, which hand the LAN's
# traffic back to Docker's own rules. Its jump to ufw-user-forward and its logging chain are
# left out: they change nothing for the engine's bridge.
UFW_DOCKER_AFTER_RULES = """*filter
:DOCKER-USER - [0:0]
-A DOCKER-USER -j RETURN -s 10.0.0.0/8
-A DOCKER-USER -j RETURN -s 172.16.0.0/12
-A DOCKER-USER -j RETURN -s 192.168.0.0/16
-A DOCKER-USER -p udp -m udp --sport 53 --dport 1024:65535 -j RETURN
-A DOCKER-USER -j RETURN
COMMIT
"""
# How long the watch may take to put the rule back: its timer's interval and a margin.
WATCH_DEADLINE_S = 60
# Polls --check until the rule is back; prints the seconds since $1 (the flush's date +%s.%N).
WAIT_FOR_GUARD = f"""
for _ in $(seq {WATCH_DEADLINE_S * 5}); do
  {GUARD} --check >/dev/null 2>&1 && exec python3 -c \
    'import sys, time; print(round(time.time() - float(sys.argv[1]), 1))' "$1"
  sleep 0.2
done
echo "the guard was not back within {WATCH_DEADLINE_S} s: $({GUARD} --check 2>&1)"; exit 1
"""


def flushed(flush):
    """Runs `flush` in the rig; (its time, the guard's --check right after it)."""
    out = in_rig(f"date +%s.%N; {flush} >/dev/null 2>&1; {GUARD} --check 2>&1; echo rc=$?").stdout
    at, _, check = out.partition("\n")
    return at.strip(), check.strip()


def test_the_watch_puts_the_guard_back_after_each_kind_of_flush(rig):
    """With no role run: the watch's real timer and the drop-in in Docker's real unit. Before,
    only a role run or a boot put the rule back, so each flush below left the engine open to
    the LAN until then (a pull rig whose ref does not move never runs one)."""
    install_guard()
    in_rig("apt-get install -y -q --no-install-recommends nftables >>/root/apt.log 2>&1 || "
           "{ tail -n 20 /root/apt.log; exit 1; }", timeout=300)
    units = {name: shlex.quote(rendered_unit(name)) for name in (
        "vllm-dual-fast-engine-guard-watch.service", "vllm-dual-fast-engine-guard-watch.timer",
        "docker.service.d/vllm-dual-fast-engine-guard.conf")}
    in_rig("mkdir -p /etc/systemd/system/docker.service.d /var/lib/vllm-dual-fast "
           "/var/lib/prometheus/node-exporter && "
           + " && ".join(f"printf %s {text} >/etc/systemd/system/{name}"
                         for name, text in units.items())
           + " && systemctl daemon-reload"
           + " && systemctl start vllm-dual-fast-engine-guard-watch.timer")
    reachable = {}

    # A `ufw reload` with ufw-docker: DOCKER-USER flushed and refilled with RETURNs.
    ufw_reload = "printf %s " + shlex.quote(UFW_DOCKER_AFTER_RULES) + " | iptables-restore -n"
    at, check = flushed(ufw_reload)
    assert check.startswith("missing iptables") and check.endswith("rc=3"), check
    reachable["ufw reload (ufw-docker)"] = float(in_rig(WAIT_FOR_GUARD, at).stdout)
    # What that flush opens, shown with the watch paused: the neighbour's probe (a container of
    # its own) took longer to start than the watch's interval on a loaded machine (make test)
    # and found the engine closed again, so the hole was not seen.
    in_rig("systemctl stop vllm-dual-fast-engine-guard-watch.timer")
    flushed(ufw_reload)
    opened = neighbour_probe()
    assert any(answered(s) for s in engine_statuses(opened).values()), opened  # the hole
    in_rig("systemctl start vllm-dual-fast-engine-guard-watch.timer")
    in_rig(WAIT_FOR_GUARD, in_rig("date +%s.%N").stdout.strip())
    closed = neighbour_probe()
    assert not any(answered(s) for s in engine_statuses(closed).values()), closed

    # A RETURN put above the rule: the rule is there, shadowed, and counts as missing.
    at, check = flushed("iptables -w -I DOCKER-USER 1 -s 172.16.0.0/12 -j RETURN")
    assert check.startswith("shadowed iptables") and check.endswith("rc=3"), check
    reachable["a RETURN above the rule"] = float(in_rig(WAIT_FOR_GUARD, at).stdout)
    first = in_rig("iptables -w -S DOCKER-USER | sed -n 2p").stdout
    assert "vllm-dual-fast-engine-guard" in first, first

    # nftables.service's reload of a file that starts with `flush ruleset`: every table gone,
    # Docker's included, and nothing left to drop what is forwarded.
    at, check = flushed("nft flush ruleset")
    assert "missing iptables" in check and check.endswith("rc=3"), check
    reachable["nft flush ruleset"] = float(in_rig(WAIT_FOR_GUARD, at).stdout)
    closed = neighbour_probe()
    assert not any(answered(s) for s in engine_statuses(closed).values()), closed

    # `iptables -F` alone: Docker's rules and FORWARD's jump gone, the chain policy left as
    # Docker set it. The watch puts the rule and the jump back.
    at, check = flushed("iptables -w -F")
    assert "missing iptables FORWARD jump" in check and check.endswith("rc=3"), check
    flushed_only = neighbour_probe()
    reachable["iptables -F"] = float(in_rig(WAIT_FOR_GUARD, at).stdout)
    closed = neighbour_probe()
    assert not any(answered(s) for s in engine_statuses(closed).values()), closed
    print("the neighbour after `iptables -F`, before the watch ran: "
          f"{engine_statuses(flushed_only)}")

    # `iptables -F`, then Docker restarted: its drop-in runs the guard before Docker starts.
    out = in_rig(f"iptables -w -F && systemctl restart docker && {GUARD} --check; echo rc=$?",
                 timeout=120).stdout.strip()
    assert out == "rc=0", out
    closed = neighbour_probe()
    assert not any(answered(s) for s in engine_statuses(closed).values()), closed

    # A guard that cannot put its rule in place keeps Docker, and so the engine, down: the
    # drop-in's ExecStartPre fails the start (a guard that exits 1 stands in for one that cannot
    # reach iptables), and Docker starts once the guard can.
    down = in_rig(f"""
cp {GUARD} /root/guard.real && printf '#!/bin/sh\\nexit 1\\n' >{GUARD}
systemctl restart docker >/dev/null 2>&1; echo "restart rc=$?"; systemctl is-active docker
cp /root/guard.real {GUARD}; systemctl reset-failed docker; systemctl restart docker
systemctl is-active docker
""", check=False, timeout=120).stdout.split()
    # Not active: "failed", or "activating" while systemd's Restart= tries again (and fails).
    assert down[:2] != ["restart", "rc=0"] and down[2] != "active" and down[3:] == ["active"], \
        down

    metrics = in_rig("cat /var/lib/prometheus/node-exporter/vllm-dual-fast-engine-guard.prom"
                     ).stdout
    assert "\nvdf_engine_guard_in_place 1\n" in metrics, metrics
    repairs = int(re.search(r"^vdf_engine_guard_repairs_total (\d+)$", metrics, re.M)[1])
    assert repairs >= 4, metrics
    print(f"seconds the engine's network stayed open after each flush: {reachable}")
    assert all(0 < s <= WATCH_DEADLINE_S for s in reachable.values()), reachable
