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
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text(encoding="utf-8"))
    return env.get_template(GUARD_TEMPLATE).render(
        ansible_managed="rendered by tests/test_engine_guard.py",
        _vllm_dual_fast_engine_bridge=role_vars["_vllm_dual_fast_engine_bridge"])


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

    # A Docker that never jumps to DOCKER-USER ("iptables": false, Docker 29's nftables backend)
    # would leave the rule guarding nothing: run by the role, the guard says so and fails; at
    # boot (--boot, before Docker made the jump) it only adds its rules.
    unhooked = in_rig(f"""
iptables -w -D FORWARD -j DOCKER-USER
{GUARD} 2>&1; echo "rc=$?"; echo ---
{GUARD} --boot 2>&1; echo "rc=$?"
iptables -w -I FORWARD -j DOCKER-USER
""").stdout
    role_run, boot_run = (run.strip() for run in unhooked.split("---"))
    assert role_run.endswith("rc=1") and "cannot be guarded here" in role_run, role_run
    assert boot_run == "rc=0", boot_run
