"""Rigs that push their series (issue 45, item 9), end to end on loopback: the monitoring role's
configuration and push receiver tasks write Prometheus' files and the receiver's nginx site
(its certificate made by the role's own openssl task), and the distribution's real Prometheus
(with the arguments the role's /etc/default/prometheus gives it), Alertmanager and nginx run
them. The rig: the rig role's agent configuration in a real Prometheus in agent mode, scraping a
real node_exporter (files/rig_metrics.py's textfile, against the nvidia-smi and kernel-log
doubles) and the vLLM double, writing through the receiver with the rig's own token. Before:
a pull rig's GPU and Xid series came only with its report, 30 to 70 minutes late; no rig could
push. Intervals and holds are shortened here only (variables; Prometheus' lookback)."""

import contextlib
import http.client
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from ansible_runner import run_playbook
from rig_metrics_stand_ins import XID_31, CollectorRig
from test_monitoring_stack import (
    ALERTMANAGER,
    ENGINE_ARGS,
    NODE_EXPORTER,
    PROMETHEUS,
    ROLE,
    Receiver,
    _ready,
    config_tasks,
    get_json,
    node_exporter,
    notified,
    serving,
    started,
    wait_until,
)
from test_nginx_proxy import NGINX, nginx_tree, unverified_tls, wait_for
from vllm_double_fixtures import DoubleServer, double_env, free_port

ROOT = Path(__file__).resolve().parents[2]
RIG_ROLE = ROOT / "roles/vllm_dual_fast"
TOKENS = {"push-a": "a" * 8 + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6",
          "push-b": "b" * 8 + "Z9y8X7w6V5u4T3s2R1q0P9o8N7m6L5k4"}

pytestmark = pytest.mark.skipif(
    not all(Path(p).exists() for p in (PROMETHEUS, ALERTMANAGER, NODE_EXPORTER, NGINX)),
    reason="needs the distribution's prometheus, alertmanager, node_exporter and nginx")


def receiver_tasks():
    """push_receiver.yml's certificate and site tasks as the role runs them (no handlers)."""
    wanted = ("Make the receiver's self-signed certificate", "Write the receiver's site")
    tasks = [t for t in yaml.safe_load((ROLE / "tasks/push_receiver.yml").read_text())
             if t["name"].startswith(wanted)]
    assert len(tasks) == len(wanted)
    for task in tasks:
        task.pop("notify", None)
        template = task.get("ansible.builtin.template")
        if template:
            template["src"] = str(ROLE / "templates" / template["src"])
    return tasks


def render_monitoring(base, paths, rigs, overrides):
    """config.yml, then the receiver's certificate and site, and /etc/default/prometheus."""
    inventory = base / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"rig3090": {"hosts": rigs}}}}))
    default = {"name": "Write Prometheus' arguments", "ansible.builtin.template": {
        "src": str(ROLE / "templates/etc/default/prometheus.j2"),
        "dest": str(base / "default-prometheus"), "mode": "0644"}}
    plays = [{"name": "The monitoring host, its push receiver", "hosts": "localhost",
              "gather_facts": False,
              "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
              "tasks": config_tasks() + receiver_tasks() + [default]}]
    env = {"ANSIBLE_FILTER_PLUGINS": str(ROLE / "filter_plugins")}
    overrides = {
        "vllm_dual_fast_monitoring_tls_certs_dir": str(base / "no-certs"),
        "_vllm_dual_fast_monitoring_nginx_dir": str(paths["conf"]),
        "_vllm_dual_fast_monitoring_nginx_log_dir": str(paths["logs"]),
        "_vllm_dual_fast_monitoring_nginx_check": str(ROOT / "files/nginx_check.py"),
        **overrides}
    return run_playbook(base, plays, overrides, env=env,
                        inventory=("-i", str(inventory), "-i", "localhost,", "-c", "local"))


def render_agent(base, rig, extra):
    """The rig role's agent configuration for `rig`, as push.yml renders it there."""
    dest = base / f"agent-{rig}.yml"
    play = [{"hosts": rig, "gather_facts": False,
             "vars_files": [str(RIG_ROLE / "defaults/main.yml"), str(RIG_ROLE / "vars/main.yml")],
             "tasks": [{"name": "Render the agent's configuration", "ansible.builtin.template": {
                 "src": str(RIG_ROLE / "templates/etc/vllm-dual-fast/push/agent.yml.j2"),
                 "dest": str(dest), "mode": "0644"}}]}]
    result, out = run_playbook(base, play, extra, inventory=("-i", f"{rig},", "-c", "local"))
    assert result.returncode == 0, out
    return dest


def prometheus_args(default_file):
    """The ARGS the role's /etc/default/prometheus gives prometheus.service."""
    for line in default_file.read_text().splitlines():
        if line.startswith("ARGS="):
            return shlex.split(line.removeprefix("ARGS="))[0].split()
    raise AssertionError(default_file.read_text())


@pytest.fixture(scope="module")
def push(tmp_path_factory):
    base = tmp_path_factory.mktemp("push")
    Receiver.received.clear()
    logs = base / "logs"
    logs.mkdir()
    paths = nginx_tree(base / "nginx")
    (base / "rig").mkdir()
    (base / "receiver-tls").mkdir(mode=0o700)    # push_receiver.yml's folder task makes it
    collector = CollectorRig(base / "rig")
    collector.run()
    with contextlib.ExitStack() as stack_:
        engine = DoubleServer(base, ENGINE_ARGS, env=double_env(base)).start()
        stack_.callback(engine.stop)
        rig_node_port = node_exporter(stack_, collector.folder, logs / "rig-node-exporter.log")
        receiver_port = stack_.enter_context(serving(Receiver))
        prometheus_port, alertmanager_port, push_port = free_port(), free_port(), free_port()
        etc = base / "etc-prometheus"
        url = f"https://127.0.0.1:{push_port}/api/v1/write"
        rigs = {rig: {"vllm_dual_fast_pull_repo_url": "https://git.invalid/fleet.git",
                      "vllm_dual_fast_push_url": url, "vllm_dual_fast_push_token": token}
                for rig, token in TOKENS.items()}
        rigs["pull-c"] = {"vllm_dual_fast_pull_repo_url": "https://git.invalid/fleet.git"}
        result, out = render_monitoring(base, paths, rigs, {
            "_vllm_dual_fast_monitoring_prometheus_dir": str(etc),
            "_vllm_dual_fast_monitoring_group": "root",
            "_vllm_dual_fast_monitoring_push_tls_dir": str(base / "receiver-tls"),
            "vllm_dual_fast_monitoring_push_listen": f"127.0.0.1:{push_port}",
            "vllm_dual_fast_monitoring_push_names": ["127.0.0.1"],
            "vllm_dual_fast_monitoring_webhook_url": f"http://127.0.0.1:{receiver_port}/hook",
            "vllm_dual_fast_monitoring_alertmanager_listen": f"127.0.0.1:{alertmanager_port}",
            "vllm_dual_fast_monitoring_prometheus_listen": f"127.0.0.1:{prometheus_port}",
            "vllm_dual_fast_monitoring_scrape_interval": "1s",
            "vllm_dual_fast_monitoring_evaluation_interval": "1s",
            "vllm_dual_fast_monitoring_group_wait": "1s",
            "vllm_dual_fast_monitoring_group_interval": "1s",
            "vllm_dual_fast_monitoring_down_for": "3s",
            "vllm_dual_fast_monitoring_xid_window": "15s"})
        assert result.returncode == 0, out
        started(stack_, [NGINX, "-p", f"{paths['prefix']}/", "-c",
                         str(paths["conf"] / "nginx.conf"), "-g", "daemon off;"],
                logs / "nginx.log")
        wait_for(push_port, "127.0.0.1")
        started(stack_, [ALERTMANAGER, f"--config.file={etc / 'alertmanager.yml'}",
                         f"--storage.path={base / 'am'}",
                         f"--web.listen-address=127.0.0.1:{alertmanager_port}",
                         "--cluster.listen-address="], logs / "alertmanager.log")
        # A rig that went quiet leaves no series: Prometheus' own 5 min lookback, shortened here.
        started(stack_, [PROMETHEUS, *prometheus_args(base / "default-prometheus"),
                         f"--config.file={etc / 'prometheus.yml'}",
                         f"--storage.tsdb.path={base / 'tsdb'}", "--query.lookback-delta=5s"],
                logs / "prometheus.log")
        api = f"http://127.0.0.1:{prometheus_port}/api/v1"
        wait_until("Prometheus answers", lambda: _ready(f"{api}/status/buildinfo"), 60)
        agents = {}
        for rig in ("push-a",):
            config = render_agent(base, rig, {
                "vllm_dual_fast_push_url": url, "vllm_dual_fast_push_interval_s": 1,
                "vllm_dual_fast_push_ca_certificate": (base / "receiver-tls/cert.pem").read_text(),
                "vllm_dual_fast_node_exporter_port": rig_node_port,
                "_vllm_dual_fast_engine_host_port": engine.port,
                "_vllm_dual_fast_push_dir": str(base / f"push-{rig}")})
            (base / f"push-{rig}").mkdir()
            (base / f"push-{rig}/token").write_text(TOKENS[rig])
            (base / f"push-{rig}/receiver.pem").write_text(
                (base / "receiver-tls/cert.pem").read_text())
            agents[rig] = started(stack_, [
                PROMETHEUS, "--enable-feature=agent", f"--config.file={config}",
                f"--storage.agent.path={base / f'agent-{rig}'}",
                f"--web.listen-address=127.0.0.1:{free_port()}"], logs / f"agent-{rig}.log")
        yield {"api": api, "out": out, "collector": collector, "agents": agents, "logs": logs,
               "paths": paths, "push_port": push_port, "etc": etc, "base": base}


def query(api, promql):
    return get_json(f"{api}/query?query={quote(promql)}")["data"]["result"]


def test_a_pushing_rig_s_series_arrive_as_a_scraped_rig_s(push):
    up = wait_until("push-a's two jobs, written through the receiver", lambda: (lambda found: (
        found if len(found) == 2 else None))(query(push["api"], 'up{rig="push-a"} == 1')), 60)
    assert {r["metric"]["job"] for r in up} == {"vdf_rig_node", "vdf_rig_vllm"}
    assert {r["metric"]["source"] for r in up} == {"push"}
    assert query(push["api"], 'vdf_rig_metrics_last_run_timestamp_seconds{rig="push-a", '
                              'job="vdf_rig_node"}')
    assert query(push["api"], 'vllm:num_requests_running{rig="push-a"}')
    # Not scraped, and said why; the pull rig without a token still goes by its reports.
    assert "Not scraped: push-a: pushes its series" in push["out"]
    # a pull rig without a push token is still seen through its reports
    assert "Not scraped: pull-c: a pull rig" in push["out"]
    assert "push-a" not in (push["etc"] / "prometheus.yml").read_text()
    # The pull rigs' report series leave the pushed GPU series to the push.
    unit = (ROLE / "templates/etc/systemd/system/vllm-dual-fast-pull-metrics.service.j2")
    assert "--pushing {{ rig.rig }}" in unit.read_text()
    # The access log names the rig each write came with.
    log = (push["paths"]["logs"] / "vllm-dual-fast-push.log").read_text()
    assert 'rig=push-a "POST /api/v1/write" 204' in log, log


def test_an_xid_31_on_a_pushing_rig_pages_within_seconds(push):
    wait_until("push-a written", lambda: query(push["api"], 'up{rig="push-a"}'), 60)
    time.sleep(3)    # a few writes at 0 first
    fault = time.monotonic()
    push["collector"].write_kernel_line(XID_31, at=time.time())
    push["collector"].run()
    at, alert = wait_until("the Xid 31 alert of the pushing rig", lambda: notified(
        "VllmDualFastGpuXidCritical", "firing", fault, rig="push-a", code="31"), 60)
    assert alert["labels"]["severity"] == "critical"
    print(f"push rig: fault to webhook: {at - fault:.1f} s")
    assert at - fault < 30


def _call(port, method, path, token=None, body=b""):
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=unverified_tls())
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        conn.request(method, path, body=body or None, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


def test_the_receiver_takes_writes_with_a_rig_s_own_token_and_nothing_else(push):
    port = push["push_port"]
    assert _call(port, "POST", "/api/v1/write") == 401
    assert _call(port, "POST", "/api/v1/write", token="x" * 40) == 401
    assert _call(port, "POST", "/api/v1/write", token=TOKENS["push-a"][:-1]) == 401
    assert _call(port, "POST", "/api/v1/write", token=TOKENS["push-a"] + "x") == 401
    # A rig's token reads nothing and reaches nothing else of Prometheus.
    for method, path in (("GET", "/api/v1/query?query=up"), ("POST", "/api/v1/query"),
                         ("GET", "/api/v1/write"), ("GET", "/metrics"), ("POST", "/-/reload")):
        assert _call(port, method, path, token=TOKENS["push-b"]) in (403, 404), (method, path)
    # With push-b's own token a write reaches Prometheus (an empty body: it refuses it, 400).
    assert _call(port, "POST", "/api/v1/write", token=TOKENS["push-b"]) == 400
    site = (push["paths"]["conf"] / "conf.d/vllm-dual-fast-push.conf")
    assert oct(site.stat().st_mode & 0o777) == "0o600"
    assert all(token not in push["out"] for token in TOKENS.values())


def test_a_pushing_rig_that_went_quiet_pages_and_mutes_its_other_alerts(push):
    wait_until("push-a written", lambda: query(push["api"], 'up{rig="push-a"}'), 60)
    fault = time.monotonic()
    push["agents"]["push-a"].send_signal(signal.SIGKILL)    # the power went
    at, alert = wait_until("the silent push alert", lambda: notified(
        "VllmDualFastRigPushSilent", "firing", fault, rig="push-a"), 90)
    assert alert["labels"]["severity"] == "critical"
    print(f"push rig silent to webhook: {at - fault:.1f} s (lookback 5 s, held 3 s here)")


def _push_checks(tmp_path, extra):
    """push.yml's checks before anything changes (its settings, the distribution's Prometheus),
    as the role runs them; `extra` may stand in for apt-cache's answer."""
    block = yaml.safe_load((RIG_ROLE / "tasks/push.yml").read_text())[1]["block"]
    checks = block[:3]
    assert [t["name"].split(" ")[0] for t in checks] == ["Refuse", "Ask", "Refuse"]
    if "_vllm_dual_fast_push_policy" in extra:
        checks = [checks[0], checks[2]]
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars_files": [str(RIG_ROLE / "defaults/main.yml")], "tasks": checks}]
    return run_playbook(tmp_path, play, {"vllm_dual_fast_push_url": "https://m:9443/api/v1/write",
                                         "vllm_dual_fast_push_token": TOKENS["push-a"],
                                         "vllm_dual_fast_push_ca_certificate": "", **extra})


@pytest.mark.parametrize("bad", [
    {"vllm_dual_fast_push_url": "http://m:9443/api/v1/write"},      # the token in the clear
    {"vllm_dual_fast_push_token": "short"},
    {"vllm_dual_fast_push_token": TOKENS["push-a"] + "\n"},          # a vault string's newline
    {"vllm_dual_fast_push_interval_s": 1},
    {"vllm_dual_fast_rig_metrics": False},
])
def test_push_settings_that_could_not_work_are_refused_before_anything_changes(tmp_path, bad):
    result, out = _push_checks(tmp_path, bad)
    assert result.returncode != 0 and "Nothing was changed" in out, out


def test_a_distribution_without_agent_mode_is_refused_and_one_with_it_passes(tmp_path):
    """This machine's real `apt-cache policy prometheus` (Debian 12: 2.42.0) passes; the same
    answer with Ubuntu 22.04's 2.31 (agent mode came with 2.32) is refused, naming it."""
    result, out = _push_checks(tmp_path, {})
    assert result.returncode == 0, out
    real = subprocess.run(["apt-cache", "policy", "prometheus"], capture_output=True, text=True,
                          check=True).stdout
    old = re.sub(r"Candidate: \S+", "Candidate: 2.31.2+ds1-1ubuntu1", real)
    result, out = _push_checks(tmp_path, {"_vllm_dual_fast_push_policy": {"stdout": old}})
    assert result.returncode != 0 and "Prometheus 2.31.2" in out, out
