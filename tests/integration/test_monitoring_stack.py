"""The monitoring host end to end, on loopback: the monitoring role's configuration tasks write
Prometheus' and Alertmanager's files from an inventory (each checked by the real promtool and
amtool as the role checks it), then the distribution's real Prometheus and Alertmanager run them
against a rig made of what exists here: the role's nginx site in a real nginx, in front of a real
node_exporter whose textfile folder files/rig_metrics.py writes (against the nvidia-smi and
kernel-log doubles) and of the vLLM double (vLLM itself cannot run here); and the monitoring
host's own node_exporter serving pull_metrics.py's file of a pull rig's signed upload. Faults on
the rig (an Xid line in the kernel log, the engine stopped) must reach a webhook receiver on
loopback as the alerts the rules name, and resolve. Intervals and holds are shortened here only
(role variables)."""

import contextlib
import copy
import importlib.util
import json
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_runner import run_playbook
from rig_metrics_stand_ins import XID_31, CollectorRig
from test_fleet_report import RigKeys, pulled_report
from test_nginx_proxy import LAN, METRICS_TOKEN, running_proxy, unverified_tls
from vllm_double_fixtures import MTP, DoubleServer, double_env, free_port

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles/vllm_dual_fast_monitoring"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"
TOKEN = METRICS_TOKEN
ANY = "0.0.0.0"  # noqa: S104 (a rig's bind address in an inventory: data, nothing binds it)
ENGINE_ARGS = ["--served-model-name", "qwen3.8-27b", "--speculative-config", MTP]
_spec = importlib.util.spec_from_file_location(
    "vdf_monitoring_filters", ROLE / "filter_plugins/vllm_dual_fast_monitoring.py")
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)

pytestmark = pytest.mark.skipif(
    not all(Path(p).exists() for p in (PROMETHEUS, ALERTMANAGER, NODE_EXPORTER))
    or not shutil.which("promtool"),
    reason="needs the distribution's prometheus, prometheus-alertmanager and "
           "prometheus-node-exporter (make host-packages)")


@contextlib.contextmanager
def serving(handler):
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def started(stack_, argv, log):
    """argv in the background until the stack closes, its output in `log`."""
    out = stack_.enter_context(open(log, "w"))  # noqa: SIM115 (the stack closes it)
    process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    stack_.callback(process.wait, 10)
    stack_.callback(process.terminate)
    return process


def node_exporter(stack_, folder, log):
    """The distribution's node_exporter on a loopback port, its textfile collector on `folder`
    (the others off: this machine's own node metrics say nothing here); returns the port."""
    port = free_port()
    started(stack_, [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}",
                     "--collector.disable-defaults", "--collector.textfile",
                     f"--collector.textfile.directory={folder}"], log)
    return port


class Receiver(BaseHTTPRequestHandler):
    """The owner's webhook: every notification Alertmanager POSTs, kept in order."""

    received: list = []

    def log_message(self, format, *args):  # noqa: A002
        pass

    def do_POST(self):  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        payload = json.loads(body)
        payload["_path"] = self.path    # /hook: the fleet's owner; /alice, /deadman
        self.received.append((time.monotonic(), payload))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


def config_tasks():
    """tasks/config.yml as the role runs it, without its handlers (no services here) and with
    its templates named where they are."""
    tasks = yaml.safe_load((ROLE / "tasks/config.yml").read_text())
    for task in tasks:
        task.pop("notify", None)
        template = task.get("ansible.builtin.template")
        if template:
            template["src"] = str(ROLE / "templates" / template["src"])
    return copy.deepcopy(tasks)


def render(tmp_path, rigs, overrides):
    """Runs config.yml on localhost with an inventory of `rigs` ({name: vars}); returns the run."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"rig3090": {"hosts": rigs}}}}))
    plays = [{"name": "Configure the monitoring host as the role does", "hosts": "localhost",
              "gather_facts": False,
              "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
              "tasks": config_tasks()}]
    env = {"ANSIBLE_FILTER_PLUGINS": str(ROLE / "filter_plugins")}
    # Outside a role, its default (beside role_path) cannot be read: none fetched, unless given.
    overrides = {"vllm_dual_fast_monitoring_tls_certs_dir": str(tmp_path / "no-certs"),
                 **overrides}
    return run_playbook(tmp_path, plays, overrides, env=env,
                        inventory=("-i", str(inventory), "-i", "localhost,", "-c", "local"))


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (loopback)
        return json.loads(response.read())


def wait_until(what, check, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.25)
    raise AssertionError(f"not within {timeout} s: {what}")


def notified(alertname, status, since, path="/hook", **labels):
    """The first notification to `path` after `since` carrying alert `alertname` in `status`."""
    for at, payload in Receiver.received:
        if at < since or payload["_path"] != path:
            continue
        for alert in payload["alerts"]:
            if (alert["labels"].get("alertname") == alertname and alert["status"] == status
                    and all(alert["labels"].get(k) == v for k, v in labels.items())):
                return at, alert
    return None


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """Stand-ins, the role's files, then Prometheus and Alertmanager on loopback: one stack for
    the tests below, each watching its own alert from its own fault on."""
    tmp_path = tmp_path_factory.mktemp("monitoring")
    Receiver.received.clear()
    keys = RigKeys(tmp_path / "keys", enrolled=("rig-c",), others=())
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    (pulled / "rig-c.json").write_text(keys.upload("rig-c", pulled_report(
        "rig-c", {"state": "refused", "rc": 1, "at": "2026-01-01T00:00:00Z"},
        checked_at="2026-01-01T00:00:00Z")))
    pull_textfiles = tmp_path / "monitoring-host-textfiles"
    pull_textfiles.mkdir()
    done = subprocess.run([sys.executable, str(ROOT / "files/pull_metrics.py"), "--pulled",
                           str(pulled), "--rig-keys", str(keys.path), "--out",
                           str(pull_textfiles / "vllm-dual-fast-pull.prom")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    logs = tmp_path / "logs"
    logs.mkdir()
    (tmp_path / "rig").mkdir()
    collector = CollectorRig(tmp_path / "rig")
    collector.run()
    engine_env = double_env(tmp_path)
    with contextlib.ExitStack() as stack_:
        # the engine of the moment: a test stops it and starts another on its port
        stack_state = {"engine": DoubleServer(tmp_path, ENGINE_ARGS, env=engine_env).start()}
        stack_.callback(lambda: stack_state["engine"].stop())
        engine = stack_state["engine"]
        rig_node_port = node_exporter(stack_, collector.folder, logs / "rig-node-exporter.log")
        proxy = stack_.enter_context(running_proxy(
            tmp_path / "nginx", engine.port, vllm_dual_fast_node_exporter_port=rig_node_port))
        receiver_port = stack_.enter_context(serving(Receiver))
        exporter_port = node_exporter(stack_, pull_textfiles, logs / "host-node-exporter.log")
        prometheus_port, alertmanager_port = free_port(), free_port()
        etc = tmp_path / "etc-prometheus"
        rigs = {
            "rig-a": {"ansible_host": LAN, "vllm_dual_fast_port": proxy["port"],
                      "vllm_dual_fast_bind_address": ANY, "vllm_dual_fast_metrics_token": TOKEN,
                      "vllm_dual_fast_owner": "alice"},
            "rig-b": {"vllm_dual_fast_metrics_token": TOKEN},    # loopback only: not scraped
            "rig-c": {"vllm_dual_fast_pull_repo_url": "https://git.invalid/fleet.git"},
        }
        certs = tmp_path / "controller-tls"  # what rig-a's deploy fetched (tls.yml)
        certs.mkdir()
        shutil.copy(proxy["cert"], certs / "rig-a.pem")
        overrides = {
            "vllm_dual_fast_monitoring_tls_certs_dir": str(certs),
            "_vllm_dual_fast_monitoring_prometheus_dir": str(etc),
            "_vllm_dual_fast_monitoring_group": "root",
            "vllm_dual_fast_monitoring_webhook_url": f"http://127.0.0.1:{receiver_port}/hook",
            "vllm_dual_fast_monitoring_alertmanager_listen": f"127.0.0.1:{alertmanager_port}",
            "vllm_dual_fast_monitoring_prometheus_listen": f"127.0.0.1:{prometheus_port}",
            "vllm_dual_fast_monitoring_pulled_dir": str(pulled),
            "vllm_dual_fast_monitoring_node_exporter_port": exporter_port,
            "vllm_dual_fast_monitoring_scrape_interval": "1s",
            "vllm_dual_fast_monitoring_evaluation_interval": "1s",
            "vllm_dual_fast_monitoring_group_wait": "1s",
            "vllm_dual_fast_monitoring_group_interval": "1s",
            "vllm_dual_fast_monitoring_repeat_interval": "1h",
            "vllm_dual_fast_monitoring_down_for": "3s",
            "vllm_dual_fast_monitoring_xid_window": "15s",
            "vllm_dual_fast_monitoring_owners": {
                "alice": {"webhook_url": f"http://127.0.0.1:{receiver_port}/alice"}},
            "vllm_dual_fast_monitoring_deadman_url": f"http://127.0.0.1:{receiver_port}/deadman",
            "vllm_dual_fast_monitoring_deadman_interval": "2s",
        }
        result, out = render(tmp_path, rigs, overrides)
        assert result.returncode == 0, out
        started(stack_, [ALERTMANAGER, f"--config.file={etc / 'alertmanager.yml'}",
                         f"--storage.path={tmp_path / 'am'}",
                         f"--web.listen-address=127.0.0.1:{alertmanager_port}",
                         "--cluster.listen-address="], logs / "alertmanager.log")
        started(stack_, [PROMETHEUS, f"--config.file={etc / 'prometheus.yml'}",
                         f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                         f"--web.listen-address=127.0.0.1:{prometheus_port}"],
                logs / "prometheus.log")
        api = f"http://127.0.0.1:{prometheus_port}/api/v1"
        wait_until("Prometheus answers", lambda: _ready(f"{api}/status/buildinfo"), 60)
        yield {"api": api, "etc": etc, "logs": logs, "out": out, "collector": collector,
               "alertmanager": f"http://127.0.0.1:{alertmanager_port}/api/v2",
               "engine": stack_state, "engine_env": engine_env, "tmp": tmp_path,
               "rig_url": f"https://{LAN}:{proxy['port']}"}


def _status(url, headers=None):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}),  # noqa: S310
                                    timeout=10, context=unverified_tls()) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _ready(url):
    try:
        return get_json(url)["status"] == "success"
    except OSError:
        return False


def targets(api):
    return {(t["labels"]["job"], t["labels"].get("rig", "")): t["health"]
            for t in get_json(f"{api}/targets")["data"]["activeTargets"]}


def test_the_rigs_are_scraped_as_the_rules_name_them_with_their_token(stack):
    found = wait_until("every target scraped", lambda: (lambda t: t if len(t) == 5 and set(
        t.values()) == {"up"} else None)(targets(stack["api"])), 30)
    # one rig on the LAN with a token (two jobs), the pull rigs' file, the pipeline itself; the
    # loopback rig skipped
    assert set(found) == {("vdf_rig_node", "rig-a"), ("vdf_rig_vllm", "rig-a"),
                          ("vdf_pull_reports", ""), ("prometheus", ""), ("alertmanager", "")}
    assert "Not scraped: rig-b: serves on loopback only" in stack["out"]
    assert "Not scraped: rig-c: a pull rig" in stack["out"]
    # every scrape of the rig carried its token: nginx answers its metrics to nothing else
    for path in ("/node-metrics", "/metrics"):
        assert _status(stack["rig_url"] + path) == 404
        assert _status(stack["rig_url"] + path, {"Authorization": f"Bearer {TOKEN}"}) == 200
    token_file = stack["etc"] / "vllm-dual-fast-tokens/rig-a"
    assert token_file.read_text() == TOKEN and oct(token_file.stat().st_mode & 0o777) == "0o640"
    assert TOKEN not in (stack["etc"] / "prometheus.yml").read_text()
    assert TOKEN not in stack["out"]
    # the pull rig's series keep their rig (honor_labels), and only vdf_ series are kept
    series = get_json(f"{stack['api']}/query?query=vdf_pull_state%7Brig%3D%22rig-c%22%7D")
    assert {r["metric"]["state"]: r["value"][1] for r in series["data"]["result"]}["refused"] == "1"


def test_an_xid_31_reaches_the_owner_as_critical_and_resolves(stack):
    wait_until("rig-a scraped", lambda: targets(stack["api"]).get(("vdf_rig_node", "rig-a"))
               == "up", 30)
    time.sleep(3)    # a few scrapes at 0 first, as on a rig that ran clean
    fault = time.monotonic()
    stack["collector"].write_kernel_line(XID_31, at=time.time())    # the driver logs it
    stack["collector"].run()                                       # the timer's next run
    at, alert = wait_until("the Xid 31 alert, firing", lambda: notified(
        "VllmDualFastGpuXidCritical", "firing", fault, rig="rig-a", code="31"), 60)
    assert alert["labels"]["severity"] == "critical"
    assert "vllm#40756" in alert["annotations"]["action"]
    print(f"fault to webhook: {at - fault:.1f} s")
    assert at - fault < 30
    wait_until("the Xid 31 alert, resolved", lambda: notified(
        "VllmDualFastGpuXidCritical", "resolved", at, rig="rig-a"), 90)


def test_a_rig_s_own_owner_hears_of_its_xid_as_the_fleet_s_owner_does(stack):
    fault = time.monotonic()
    stack["collector"].write_kernel_line(XID_31.replace("31,", "13,"), at=time.time())
    stack["collector"].run()
    for path in ("/hook", "/alice"):
        wait_until(f"the Xid 13 alert at {path}", lambda path=path: notified(
            "VllmDualFastGpuXid", "firing", fault, path=path, rig="rig-a", code="13"), 60)


def test_the_watchdog_reaches_the_dead_man_s_switch_again_and_again_and_no_one_else(stack):
    first, _ = wait_until("the watchdog at the switch", lambda: notified(
        "VllmDualFastWatchdog", "firing", 0, path="/deadman"), 60)
    again, _ = wait_until("the watchdog again", lambda: notified(
        "VllmDualFastWatchdog", "firing", first + 0.5, path="/deadman"), 30)
    print(f"watchdog at the dead man's switch every {again - first:.1f} s (interval 2s)")
    for path in ("/hook", "/alice"):
        assert notified("VllmDualFastWatchdog", "firing", 0, path=path) is None
    assert {payload["_path"] for _, payload in Receiver.received
            if any(a["labels"]["alertname"] != "VllmDualFastWatchdog"
                   for a in payload["alerts"])} <= {"/hook", "/alice"}


def test_prometheus_and_alertmanager_scrape_themselves(stack):
    wait_until("the pipeline's own targets up", lambda: all(
        targets(stack["api"]).get((job, "")) == "up" for job in ("prometheus", "alertmanager")),
        30)


def post_alerts(base, alerts):
    request = urllib.request.Request(f"{base}/alerts", data=json.dumps(alerts).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 (loopback)
        assert response.status == 200


def test_a_rig_whose_node_exporter_is_down_mutes_its_other_alerts_and_only_its_own(stack):
    """Alerts posted to the live Alertmanager as Prometheus would: rig-z's node scrape is down,
    rig-w's vLLM alone; each has an Xid alert, and so has rig-y."""
    def alert(name, rig, **labels):
        return {"labels": {"alertname": name, "rig": rig, "severity": "warning", **labels}}
    post_alerts(stack["alertmanager"], [
        alert("VllmDualFastRigDown", "rig-z", job="vdf_rig_node"),
        alert("VllmDualFastRigDown", "rig-w", job="vdf_rig_vllm"),
        *(alert("VllmDualFastGpuXid", rig, code="13") for rig in ("rig-z", "rig-w", "rig-y"))])

    def inhibited():
        found = get_json(f"{stack['alertmanager']}/alerts")
        return {(a["labels"]["alertname"], a["labels"]["rig"]): bool(a["status"]["inhibitedBy"])
                for a in found if a["labels"].get("rig") in ("rig-z", "rig-w", "rig-y")}
    state = wait_until("the posted alerts", lambda: len(inhibited()) == 5 and inhibited(), 10)
    assert state == {("VllmDualFastRigDown", "rig-z"): False,
                     ("VllmDualFastRigDown", "rig-w"): False,
                     ("VllmDualFastGpuXid", "rig-z"): True,
                     ("VllmDualFastGpuXid", "rig-w"): False,
                     ("VllmDualFastGpuXid", "rig-y"): False}


def test_a_rig_naming_an_owner_the_fleet_does_not_have_is_refused_before_any_file(tmp_path):
    etc = tmp_path / "etc-prometheus"
    result, out = render(tmp_path, {"rig-a": {"vllm_dual_fast_owner": "bob"}}, {
        "_vllm_dual_fast_monitoring_prometheus_dir": str(etc),
        "vllm_dual_fast_monitoring_webhook_url": "http://127.0.0.1:9/hook"})
    assert result.returncode != 0
    assert "rig-a (bob)" in out and "vllm_dual_fast_monitoring_owners" in out
    assert not etc.exists() or not any(etc.rglob("*"))


def test_a_stopped_engine_fires_down_then_resolves_when_it_serves_again(stack):
    wait_until("rig-a's vLLM scraped", lambda: targets(stack["api"]).get(
        ("vdf_rig_vllm", "rig-a")) == "up", 30)
    fault = time.monotonic()
    engine = stack["engine"]["engine"]
    engine.stop()    # nginx answers 502 for it from now on
    at, alert = wait_until("the down alert", lambda: notified(
        "VllmDualFastRigDown", "firing", fault, rig="rig-a", job="vdf_rig_vllm"), 60)
    assert alert["labels"]["severity"] == "critical"
    print(f"engine stopped to webhook: {at - fault:.1f} s")
    stack["engine"]["engine"] = DoubleServer(stack["tmp"], ENGINE_ARGS, env=stack["engine_env"],
                                             port=engine.port).start()
    wait_until("the down alert, resolved", lambda: notified(
        "VllmDualFastRigDown", "resolved", at, rig="rig-a"), 60)


def test_a_pull_rig_that_stopped_reporting_and_was_refused_alerts(stack):
    """Its signed upload is months old and says the run refused the fleet's commit: both fire
    from the first evaluations on (any notification since the stack started)."""
    wait_until("the stale pull rig", lambda: notified(
        "VllmDualFastPullReportStale", "firing", 0, rig="rig-c"), 60)
    wait_until("the refused pull", lambda: notified(
        "VllmDualFastPullRefused", "firing", 0, rig="rig-c"), 60)


def test_every_dashboard_panel_s_query_returns_data(stack):
    """files/dashboards/vllm-dual-fast.json (for owners who run Grafana): every query of every
    panel, with the rig variable at All and Grafana's rate interval at 1m, answered with data by
    the live Prometheus; so is the rig variable's own query."""
    dashboard = json.loads((ROOT / "files/dashboards/vllm-dual-fast.json").read_text())
    queries = [target["expr"] for panel in dashboard["panels"]
               for target in panel.get("targets", [])]
    assert len(queries) >= 15
    wait_until("two scrapes of every target", lambda: _has_data(stack["api"], (
        "count_over_time(vllm:generation_tokens_total[1m]) > 2")), 30)
    empty = [query for query in queries if not _has_data(stack["api"], query.replace(
        "$rig", ".*").replace("$__rate_interval", "1m"))]
    assert empty == []
    [variable] = dashboard["templating"]["list"]
    assert variable["query"] == "label_values(vdf_report_healthy, rig)"
    labels = get_json(f"{stack['api']}/label/rig/values?match[]=vdf_report_healthy")["data"]
    assert {"rig-a", "rig-c"} <= set(labels)


def _has_data(api, query):
    found = get_json(f"{api}/query?query={urllib.parse.quote(query)}")
    return found["status"] == "success" and len(found["data"]["result"]) > 0


def test_alerts_that_would_reach_no_one_are_refused_before_anything_changes(tmp_path):
    first = yaml.safe_load((ROLE / "tasks/main.yml").read_text())[0]
    plays = [{"name": "The role's first check", "hosts": "localhost", "gather_facts": False,
              "vars_files": [str(ROLE / "defaults/main.yml")], "tasks": [first]}]
    result, out = run_playbook(tmp_path, plays, {})
    assert result.returncode != 0 and "alerts that reach no one" in out, out
    result, out = run_playbook(tmp_path, plays, {
        "vllm_dual_fast_monitoring_email_to": "owner@example.org",
        "vllm_dual_fast_monitoring_email_from": "rigs@example.org",
        "vllm_dual_fast_monitoring_smtp_smarthost": "mail.example.org:587"})
    assert result.returncode == 0, out


def test_a_configuration_promtool_refuses_leaves_the_one_in_use(tmp_path):
    etc = tmp_path / "etc"
    overrides = {"_vllm_dual_fast_monitoring_prometheus_dir": str(etc),
                 "_vllm_dual_fast_monitoring_group": "root",
                 "vllm_dual_fast_monitoring_webhook_url": "http://127.0.0.1:9/hook"}
    rigs = {"rig-a": {"vllm_dual_fast_bind_address": ANY,
                      "vllm_dual_fast_metrics_token": TOKEN}}
    result, out = render(tmp_path, rigs, overrides)
    assert result.returncode == 0, out
    before = (etc / "prometheus.yml").read_text()
    result, out = render(tmp_path, rigs, dict(
        overrides, vllm_dual_fast_monitoring_scrape_interval="soon"))
    assert result.returncode != 0 and "failed to validate" in out, out
    assert (etc / "prometheus.yml").read_text() == before


@pytest.mark.parametrize(("rig", "outcome"), [
    ({"rig": "a", "address": "10.0.0.5", "port": 8000, "bind": ANY, "token": "t"},
     ("target", "10.0.0.5:8000")),
    ({"rig": "a", "address": "fd00::5", "port": 8443, "bind": "::", "token": "t"},
     ("target", "[fd00::5]:8443")),
    ({"rig": "a", "bind": "127.0.0.1", "token": "t"}, ("why", "serves on loopback only")),
    ({"rig": "a", "bind": ANY, "token": ""}, ("why", "has no vllm_dual_fast_metrics_token")),
    ({"rig": "a", "bind": ANY, "token": "t", "pull": True}, ("why", "a pull rig")),
    ({"rig": "a", "bind": ANY, "token": "t", "certificate": False},
     ("why", "its TLS certificate is not on the controller")),
    ({"rig": "a", "bind": ANY, "token": "t", "pull": True, "push_token": "p" * 32},
     ("why", "pushes its series")),
])
def test_which_rigs_are_scraped_and_why_not(rig, outcome):
    targets_, skipped = filters.scrape_targets([rig])
    kind, text = outcome
    if kind == "target":
        assert targets_ == [{"rig": "a", "target": text}] and skipped == []
    else:
        assert targets_ == [] and text in skipped[0]["why"]


def test_a_rig_pushes_only_with_a_url_and_a_token_of_its_own():
    """Issue 45, item 9: the push receiver's rigs, from their inventory variables."""
    names = ["a", "b", "c"]
    found = filters.rig_facts(names, [
        {"vllm_dual_fast_push_url": "https://m:9443/api/v1/write",
         "vllm_dual_fast_push_token": "A" * 40},
        {"vllm_dual_fast_push_token": "B" * 40},    # no URL: it does not push
        {}])
    assert filters.push_rigs(found) == [{"rig": "a", "token": "A" * 40}]
    same = [{"rig": "a", "push_token": "C" * 40}, {"rig": "b", "push_token": "C" * 40}]
    with pytest.raises(AnsibleFilterError, match="b and a have the same"):
        filters.push_rigs(same)
    for bad in ("short", "x" * 40 + '"; return 200; #', "y" * 40 + "\n"):
        with pytest.raises(AnsibleFilterError, match="a: vllm_dual_fast_push_token must be") as err:
            filters.push_rigs([{"rig": "a", "push_token": bad}])
        assert bad not in str(err.value)


def test_a_wrong_variable_fails_at_argument_validation_before_anything_runs(tmp_path):
    plays = [{"name": "The monitoring role", "hosts": "localhost", "gather_facts": False,
              "roles": [{"role": "vllm_dual_fast_monitoring"}]}]
    result, out = run_playbook(tmp_path, plays, {
        "vllm_dual_fast_monitoring_webhook_url": "http://127.0.0.1:9/hook",
        "vllm_dual_fast_monitoring_pull_metrics_interval_s": "often"})
    assert result.returncode != 0, out
    assert "vllm_dual_fast_monitoring_pull_metrics_interval_s" in out, out
    assert "Validating arguments against arg spec 'main'" in out, out
    assert "Refuse alerts that would reach no one" not in out, out


def test_e_mail_through_the_owner_s_smtp_server_is_configured_and_its_password_never_shown(
        tmp_path):
    etc = tmp_path / "etc"
    password = "smtp-Secret-0123456789"  # noqa: S105 (test data)
    overrides = {"_vllm_dual_fast_monitoring_prometheus_dir": str(etc),
                 "_vllm_dual_fast_monitoring_group": "root",
                 "vllm_dual_fast_monitoring_tls_certs_dir": str(tmp_path / "no-certs"),
                 "vllm_dual_fast_monitoring_email_to": "owner@example.org",
                 "vllm_dual_fast_monitoring_email_from": "rigs@example.org",
                 "vllm_dual_fast_monitoring_smtp_smarthost": "mail.example.org:587",
                 "vllm_dual_fast_monitoring_smtp_username": "rigs",
                 "vllm_dual_fast_monitoring_smtp_password": password}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"rig3090": {"hosts": {}}}}}))
    plays = [{"name": "Configure", "hosts": "localhost", "gather_facts": False,
              "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
              "tasks": config_tasks()}]
    result, out = run_playbook(
        tmp_path, plays, overrides, env={"ANSIBLE_FILTER_PLUGINS": str(ROLE / "filter_plugins")},
        args=("--diff", "-v"), inventory=("-i", str(inventory), "-i", "localhost,", "-c", "local"))
    assert result.returncode == 0, out
    written = etc / "alertmanager.yml"
    config = yaml.safe_load(written.read_text())
    receivers = {receiver["name"]: receiver for receiver in config["receivers"]}
    assert set(receivers) == {"owner", "nowhere"}    # no dead man's switch set: nowhere
    receiver = receivers["owner"]
    assert receiver["email_configs"] == [{"to": "owner@example.org", "send_resolved": True}]
    assert "webhook_configs" not in receiver
    assert config["global"]["smtp_auth_password"] == password
    assert config["global"]["smtp_require_tls"] is True
    assert oct(written.stat().st_mode & 0o777) == "0o640"
    assert password not in out    # amtool checked it (validate), no diff or log showed it
