"""The LAN proxy (tasks/proxy.yml): a real nginx runs the role's site template, rendered by
Ansible with the role's template task (its `validate:` included), in front of a loopback
backend that guards paths as vLLM 0.27.1 does: the API key is checked only for paths starting
with /v1, /v2, /inference or /cohere, so /invocations (chat completions), /tokenize, /pooling,
/score, /rerank, /classify, /docs, /openapi.json and /metrics answer without it.

The project's vLLM double (molecule/images/vllm-double, the same guard, with /invocations,
/tokenize and /metrics) runs behind a second nginx for the routes it has; the in-test backend
also has the routes the double lacks and records what reached it.

nginx serves the LAN bind over TLS only, with a self-signed certificate made by the role's own
tls.yml task; a plain-HTTP request on that port is refused (400) and never reaches the backend.
Through nginx only /v1/ (key still checked by the backend), /health, and /metrics with its scrape
token get through; the rest is 404. Streams arrive as they are generated. No secret lands in a
log. A candidate site file that nginx refuses leaves the installed one in place.

nginx runs as a foreground process with its own prefix, configuration folder and logs in a
temporary folder, listening on 127.0.0.2 (loopback, but not an address the role treats as
loopback: so the role's own variables choose the proxied layout) and the backend on 127.0.0.1.
"""

import contextlib
import copy
import http.client
import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from ansible_runner import ROLE, ROOT, run_playbook
from vllm_double_fixtures import DoubleServer, double_env, load_file_module

KEY = "sk-proxy-Key-0123456789abcdef"
METRICS_TOKEN = "scrape-Token-fedcba9876543210"  # noqa: S105 (test data)
QUERY_SECRET = "QuerySecret-55aa"  # noqa: S105 (test data)
LAN = "127.0.0.2"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CHECK = ROOT / "files" / "nginx_check.py"
SITE_TEMPLATE = ROLE / "templates/etc/nginx/conf.d/vllm-dual-fast.conf.j2"
# vLLM 0.27.1's key check: only these prefixes (vllm/entrypoints/openai/api_server.py).
GUARDED = ("/v1", "/v2", "/inference", "/cohere")
UNGUARDED_POSTS = ("/invocations", "/tokenize", "/pooling", "/score", "/rerank", "/classify")
UNGUARDED_GETS = ("/docs", "/openapi.json", "/metrics")



@pytest.fixture(autouse=True, scope="module")
def nginx_is_installed():
    assert Path(NGINX).exists(), "no nginx here: `make setup` installs it (host-packages.sh)"


def free_port(host="127.0.0.1"):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class GuardLikeVllm(BaseHTTPRequestHandler):
    """Answers like vLLM 0.27.1 with an API key set; records each path it was sent."""

    protocol_version = "HTTP/1.1"
    seen: list = []
    authorization: dict = {}    # path -> the Authorization header the engine was sent

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass

    def reply(self, status, payload):
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def guarded_and_refused(self):
        self.seen.append(self.path)
        self.authorization[self.path] = self.headers.get("Authorization")
        if self.path.startswith(GUARDED) and self.headers.get("Authorization") != f"Bearer {KEY}":
            self.reply(401, {"error": "Unauthorized"})
            return True
        return False

    def do_GET(self):  # noqa: N802 (http.server's naming)
        if self.guarded_and_refused():
            return
        path = self.path.split("?")[0]
        if path in ("/health",) + UNGUARDED_GETS or path == "/v1/models":
            self.reply(200, {"path": path})
        else:
            self.reply(404, {"detail": "Not Found"})

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)    # the request body, read so the connection stays usable
        if self.guarded_and_refused():
            return
        if self.path in UNGUARDED_POSTS:
            self.reply(200, {"path": self.path, "choices": [{"message": {"content": "free GPU"}}]})
        elif self.path == "/v1/chat/completions":
            self.reply(200, {"choices": [{"message": {"content": "hello"}}]})
        else:
            self.reply(404, {"detail": "Not Found"})


@pytest.fixture(scope="module")
def backend():
    server = ThreadingHTTPServer(("127.0.0.1", 0), GuardLikeVllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def nginx_tree(base: Path) -> dict:
    """A stand-in for /etc/nginx (main file including conf.d/*.conf) with its logs and temp
    folders under `base`; the default access log (combined format) is on too, so it is read."""
    paths = {"conf": base / "etc-nginx", "logs": base / "logs", "prefix": base / "prefix"}
    for sub in ("conf.d", "sites-enabled"):
        (paths["conf"] / sub).mkdir(parents=True)
    for sub in ("logs", "client_body", "proxy", "fastcgi", "uwsgi", "scgi"):
        (paths["prefix"] / sub).mkdir(parents=True)
    paths["logs"].mkdir()
    temps = "\n".join(f"    {kind}_temp_path {paths['prefix'] / name};" for kind, name in (
        ("client_body", "client_body"), ("proxy", "proxy"), ("fastcgi", "fastcgi"),
        ("uwsgi", "uwsgi"), ("scgi", "scgi")))
    (paths["conf"] / "nginx.conf").write_text(f"""\
worker_processes 1;
pid {base / 'nginx.pid'};
error_log {paths['logs'] / 'error.log'} info;
events {{ worker_connections 64; }}
http {{
    access_log {paths['logs'] / 'access.log'};
{temps}
    include {paths['conf']}/conf.d/*.conf;
    include {paths['conf']}/sites-enabled/*;
}}
""")
    return paths


def template_task():
    """proxy.yml's own task that writes the site, as the role runs it (without its handler)."""
    tasks = yaml.safe_load((ROLE / "tasks/proxy.yml").read_text())
    nested = [task for t in tasks for task in t.get("block", [])]
    task = copy.deepcopy(next(t for t in nested if "ansible.builtin.template" in t))
    task.pop("notify")
    task["ansible.builtin.template"]["src"] = str(SITE_TEMPLATE)
    return task


def certificate_tasks():
    """tls.yml's own tasks that make the rig's self-signed certificate (the folder, then the
    certificate), as the role runs them before the switch (without their handler)."""
    tasks = yaml.safe_load((ROLE / "tasks/tls.yml").read_text())
    chosen = [copy.deepcopy(t) for t in tasks
              if t["name"].startswith(("Create the folder of the LAN certificate",
                                       "Read the rig's addresses",
                                       "Make the rig's self-signed certificate"))]
    assert len(chosen) == 3
    for task in chosen:
        task.pop("notify", None)
    return chosen


def unverified_tls() -> ssl.SSLContext:
    """A client context that takes any certificate (these tests pin where it matters)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def render_site(tmp_path, paths, ports, **overrides):
    extra = {
        "vllm_dual_fast_bind_address": LAN,
        "vllm_dual_fast_port": ports["lan"],
        "vllm_dual_fast_engine_port": ports["engine"],
        "vllm_dual_fast_api_key": KEY,
        "vllm_dual_fast_metrics_token": METRICS_TOKEN,
        "_vllm_dual_fast_nginx_dir": str(paths["conf"]),
        "_vllm_dual_fast_nginx_log_dir": str(paths["logs"]),
        "_vllm_dual_fast_nginx_check": str(CHECK),
        "_vllm_dual_fast_tls_dir": str(paths["conf"].parent / "tls"),
        **overrides,
    }
    plays = [{
        "name": "Make the certificate as tls.yml does, render the site as proxy.yml does",
        "hosts": "localhost",
        "gather_facts": False,
        "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
        "tasks": certificate_tasks() + [template_task()],
    }]
    return run_playbook(tmp_path, plays, extra)


def wait_for(port, host, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on {host}:{port}")


@contextlib.contextmanager
def running_proxy(base: Path, engine_port: int, **overrides):
    """nginx in the foreground with the role's site rendered for `engine_port`."""
    paths = nginx_tree(base)
    ports = {"lan": free_port(LAN), "engine": engine_port}
    result, out = render_site(base, paths, ports, **overrides)
    assert result.returncode == 0, out
    with open(base / "nginx.out", "w") as console:
        process = subprocess.Popen(
            [NGINX, "-p", f"{paths['prefix']}/", "-c", str(paths["conf"] / "nginx.conf"),
             "-g", "daemon off;"], stdout=console, stderr=subprocess.STDOUT)
    try:
        wait_for(ports["lan"], LAN)
        yield {"port": ports["lan"], "paths": paths, "process": process,
               "site": paths["conf"] / "conf.d/vllm-dual-fast.conf", "base": base,
               "cert": base / "tls" / "self-signed.pem"}
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, backend):
    with running_proxy(tmp_path_factory.mktemp("proxy"), backend) as running:
        yield running


def request(port, method, path, host=LAN, headers=None, body=None, tls=True):
    conn = (http.client.HTTPSConnection(host, port, timeout=10, context=unverified_tls()) if tls
            else http.client.HTTPConnection(host, port, timeout=10))
    try:
        payload = json.dumps(body).encode() if body is not None else None
        conn.request(method, path, body=payload, headers={"Content-Type": "application/json",
                                                          **(headers or {})})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


BEARER = {"Authorization": f"Bearer {KEY}"}
CHAT = {"model": "q", "messages": [{"role": "user", "content": "hi"}]}


def test_published_directly_the_engine_serves_chat_without_the_key(backend):
    """The hole: what today's compose file publishes on the bind address."""
    assert request(backend, "POST", "/invocations", host="127.0.0.1", tls=False,
                   body=CHAT)[0] == 200
    assert request(backend, "POST", "/tokenize", host="127.0.0.1", tls=False, body={})[0] == 200
    assert request(backend, "GET", "/metrics", host="127.0.0.1", tls=False)[0] == 200
    assert request(backend, "POST", "/v1/chat/completions", host="127.0.0.1", tls=False,
                   body=CHAT)[0] == 401


# --- the LAN port speaks only TLS (issue: the API key must not cross the LAN in the clear) ----

lan_face_check = load_file_module("lan_face_check")


def served_fingerprint(cert: Path) -> str:
    done = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-fingerprint",
                           "-sha256"], capture_output=True, text=True, check=True)
    return done.stdout.strip().split("=", 1)[1].upper()


def test_a_plain_http_request_on_the_lan_port_is_refused_and_never_reaches_the_engine(proxy):
    # Before: the key crossed the LAN in the clear, and every request here was proxied.
    GuardLikeVllm.seen.clear()
    status, body = request(proxy["port"], "POST", "/v1/chat/completions", headers=BEARER,
                           body=CHAT, tls=False)
    assert status == 400 and b"plain HTTP request was sent to HTTPS port" in body
    assert request(proxy["port"], "GET", "/health", tls=False)[0] == 400
    assert GuardLikeVllm.seen == []
    assert request(proxy["port"], "GET", "/health")[0] == 200  # over TLS it answers


def test_a_client_trusting_the_fetched_certificate_verifies_the_rig_by_its_address(proxy):
    # What a client does with inventory/tls/<rig>.pem (curl --cacert): the self-signed
    # certificate names the bind address, so full verification passes, host name included.
    context = ssl.create_default_context(cafile=str(proxy["cert"]))
    with (socket.create_connection((LAN, proxy["port"]), timeout=10) as raw,
          context.wrap_socket(raw, server_hostname=LAN) as tls):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        der = tls.getpeercert(binary_form=True)
    assert lan_face_check.fingerprint_of(der) == served_fingerprint(proxy["cert"])
    other = ssl.create_default_context(cafile=str(proxy["cert"]))
    with (pytest.raises(ssl.SSLCertVerificationError),
          socket.create_connection((LAN, proxy["port"]), timeout=10) as raw):
        other.wrap_socket(raw, server_hostname="another-rig.lan")


def test_the_lan_face_check_passes_pinned_and_sends_nothing_to_another_certificate(
        proxy, monkeypatch, capsys):
    pin = served_fingerprint(proxy["cert"])
    monkeypatch.setenv("VDF_TEST_KEY", KEY)
    args = ["--host", LAN, "--port", str(proxy["port"]), "--key-env", "VDF_TEST_KEY"]
    assert lan_face_check.main(args + ["--fingerprint", pin.lower().replace(":", "")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["fingerprint"] == pin and result["problems"] == []
    assert result["checks"] == {"health": 200, "invocations": 404, "plain-health": 400,
                                "v1-without-key": 401, "v1-with-key": 200}
    GuardLikeVllm.seen.clear()
    wrong = "AB:" * 31 + "AB"
    assert lan_face_check.main(args + ["--fingerprint", wrong, "--lines", "nginx-"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "nginx-fingerprint mismatch" in lines and "nginx-v1-with-key pin-mismatch" in lines
    assert GuardLikeVllm.seen == []  # the key went nowhere
    assert lan_face_check.main(args + ["--fingerprint", "not-hex"]) == 2


@pytest.mark.parametrize("path", UNGUARDED_POSTS)
def test_unkeyed_engine_paths_are_not_published(proxy, path):
    assert request(proxy["port"], "POST", path, body=CHAT)[0] == 404
    assert request(proxy["port"], "POST", path, headers=BEARER, body=CHAT)[0] == 404


@pytest.mark.parametrize("path", UNGUARDED_GETS)
def test_docs_and_metrics_without_token_are_not_published(proxy, path):
    assert request(proxy["port"], "GET", path)[0] == 404


def test_the_key_is_checked_by_the_engine_behind_the_proxy(proxy):
    assert request(proxy["port"], "POST", "/v1/chat/completions", body=CHAT)[0] == 401
    assert request(proxy["port"], "POST", "/v1/chat/completions",
                   headers={"Authorization": "Bearer wrong"}, body=CHAT)[0] == 401
    status, body = request(proxy["port"], "POST", "/v1/chat/completions", headers=BEARER, body=CHAT)
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "hello"
    assert request(proxy["port"], "GET", "/health")[0] == 200


def test_dot_segments_cannot_reach_an_unkeyed_path(proxy):
    """nginx matches the normalised path and sends that one on: what it let through as /v1/ is
    what the engine's key check sees."""
    assert request(proxy["port"], "POST", "/v1/../invocations", body=CHAT)[0] == 404
    assert request(proxy["port"], "POST", "/v1/%2e%2e/invocations", body=CHAT)[0] == 404
    GuardLikeVllm.seen.clear()
    assert request(proxy["port"], "GET", "/x/../v1/models")[0] == 401
    assert GuardLikeVllm.seen == ["/v1/models"]


def test_metrics_only_with_the_scrape_token(proxy):
    GuardLikeVllm.seen.clear()
    ok = request(proxy["port"], "GET", "/metrics",
                 headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert ok[0] == 200
    wrong = request(proxy["port"], "GET", "/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong[0] == 404
    assert request(proxy["port"], "GET", "/metrics", headers=BEARER)[0] == 404
    assert GuardLikeVllm.seen == ["/metrics"]    # the refused ones never reached the engine
    assert GuardLikeVllm.authorization["/metrics"] is None    # nor did the scrape token


def metrics_status(port, authorization):
    return request(port, "GET", "/metrics", headers={"Authorization": authorization})[0]


def test_the_scrape_token_is_compared_exactly_and_whole(proxy):
    """nginx compares a map's plain strings ignoring case: the token is compared case-sensitively
    and as a whole. The scheme word is not: RFC 7235 (2.1) makes an auth-scheme case-insensitive,
    and RFC 6750 (2.1) allows one or more spaces after it."""
    port, token = proxy["port"], METRICS_TOKEN
    for other in (token.lower(), token.upper(), token.swapcase(), token[:-1], token[1:],
                  token + "x", "x" + token, token + "0", f"{token}, Bearer x", f"x {token}"):
        assert metrics_status(port, f"Bearer {other}") == 404, other
    for header in (token, f"Bearer{token}", f"Basic {token}", f"Bearer {token} x",
                   f"Bearer: {token}", f"XBearer {token}"):
        assert metrics_status(port, header) == 404, header
    assert metrics_status(port, f"Bearer {token}") == 200
    assert metrics_status(port, f"bearer {token}") == 200
    assert metrics_status(port, f"BEARER  {token}") == 200


SPECIAL_TOKEN = "a.b+c~d/e=-_Z9.=="  # noqa: S105 (test data: every character a token may hold)


@pytest.fixture(scope="module")
def special_proxy(tmp_path_factory, backend):
    with running_proxy(tmp_path_factory.mktemp("special-proxy"), backend,
                       vllm_dual_fast_metrics_token=SPECIAL_TOKEN) as running:
        yield running


def test_a_token_with_regex_characters_is_compared_as_written(special_proxy):
    """`.` and `+` are PCRE's, `~` starts a regex in nginx's map: each is a literal here."""
    port = special_proxy["port"]
    assert metrics_status(port, f"Bearer {SPECIAL_TOKEN}") == 200
    for other in ("aXb+c~d/e=-_Z9.==", "a.bbc~d/e=-_Z9.==", "a.b+c~d/e=-_Z9X==",
                  "a.b+c~d/e=-_Z9.===", "a.b+c~d/e=-_z9.==", SPECIAL_TOKEN[:-1],
                  "~" + SPECIAL_TOKEN, ".*", "a.*"):
        assert metrics_status(port, f"Bearer {other}") == 404, other


def test_no_secret_lands_in_a_log(proxy):
    port = proxy["port"]
    request(port, "GET", f"/v1/models?api_key={QUERY_SECRET}", headers=BEARER)
    request(port, "GET", "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    request(port, "GET", "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}x"})
    request(port, "POST", "/invocations", headers=BEARER, body=CHAT)
    access = proxy["paths"]["logs"] / "vllm-dual-fast.access.log"
    deadline = time.monotonic() + 5
    while "/invocations" not in (access.read_text() if access.exists() else ""):
        assert time.monotonic() < deadline, "the site's access log stays empty"
        time.sleep(0.05)
    assert "/v1/models" in access.read_text()
    logs = [*proxy["paths"]["logs"].iterdir(), *(proxy["paths"]["prefix"] / "logs").iterdir()]
    for log in logs:
        text = log.read_text()
        assert KEY not in text, log
        assert METRICS_TOKEN not in text, log
        assert QUERY_SECRET not in text, log


def test_without_a_metrics_token_metrics_is_not_published(tmp_path, backend):
    paths = nginx_tree(tmp_path)
    result, out = render_site(tmp_path, paths, {"lan": free_port(LAN), "engine": backend},
                              vllm_dual_fast_metrics_token="")
    assert result.returncode == 0, out
    site = (paths["conf"] / "conf.d/vllm-dual-fast.conf").read_text()
    assert "location = /metrics" not in site and "map $http_authorization" not in site
    assert f"server 127.0.0.1:{backend};" in site and f"listen {LAN}:" in site


def test_node_metrics_come_from_node_exporter_on_loopback_only_with_the_scrape_token(
        tmp_path, backend):
    """/node-metrics (node_exporter with the rig's GPU, Xid and verdict metrics): the same token
    as /metrics, passed to node_exporter's loopback port and never to it with the token. The
    stand-in answers node_exporter's /metrics."""
    with running_proxy(tmp_path, backend, vllm_dual_fast_node_exporter_port=backend) as running:
        port = running["port"]
        GuardLikeVllm.seen.clear()
        ok = request(port, "GET", "/node-metrics",
                     headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
        assert ok[0] == 200 and json.loads(ok[1]) == {"path": "/metrics"}
        for headers in ({}, BEARER, {"Authorization": f"Bearer {METRICS_TOKEN.upper()}"}):
            assert request(port, "GET", "/node-metrics", headers=headers)[0] == 404, headers
        assert GuardLikeVllm.seen == ["/metrics"]    # the refused ones reached nothing
        assert GuardLikeVllm.authorization["/metrics"] is None


def test_without_rig_metrics_or_a_token_node_metrics_is_not_published(tmp_path, backend):
    cases = ({"vllm_dual_fast_rig_metrics": False}, {"vllm_dual_fast_metrics_token": ""})
    for number, overrides in enumerate(cases):
        paths = nginx_tree(tmp_path / str(number))
        result, out = render_site(paths["conf"].parent, paths,
                                  {"lan": free_port(LAN), "engine": backend}, **overrides)
        assert result.returncode == 0, out
        site = (paths["conf"] / "conf.d/vllm-dual-fast.conf").read_text()
        assert "location = /node-metrics" not in site, overrides
        assert ("location = /metrics" in site) == bool(
            overrides.get("vllm_dual_fast_metrics_token", METRICS_TOKEN)), overrides


def test_a_refused_candidate_leaves_the_installed_site(tmp_path, proxy):
    """The role's template task with a candidate nginx refuses (a token with a quote breaks the
    map): the play fails, the file on disk is the old one, and nginx still serves."""
    paths = {"conf": proxy["paths"]["conf"], "logs": proxy["paths"]["logs"]}
    before = proxy["site"].read_bytes()
    result, out = render_site(tmp_path, paths, {"lan": proxy["port"], "engine": 1},
                              vllm_dual_fast_metrics_token='bad"token')  # noqa: S106
    assert result.returncode != 0
    assert "failed" in out.lower()
    assert proxy["site"].read_bytes() == before
    reload = subprocess.run(
        [NGINX, "-p", f"{proxy['paths']['prefix']}/", "-c",
         str(proxy["paths"]["conf"] / "nginx.conf"), "-s", "reload"],
        capture_output=True, text=True, timeout=10, check=False)
    assert reload.returncode == 0, reload.stderr
    time.sleep(0.5)
    assert request(proxy["port"], "GET", "/health")[0] == 200


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def check_cli(nginx_dir, target, candidate):
    return subprocess.run([sys.executable, str(CHECK), "--nginx-dir", str(nginx_dir),
                           "--target", str(target), "--nginx", NGINX, str(candidate)],
                          capture_output=True, text=True, timeout=60, check=False)


def test_the_check_judges_the_candidate_inside_the_whole_configuration(tmp_path):
    """A candidate fine on its own is refused when it clashes with another file of the
    configuration, and the installed folder is never written."""
    paths = nginx_tree(tmp_path)
    target = paths["conf"] / "conf.d/vllm-dual-fast.conf"
    upstream = "upstream vdf_test_engine { server 127.0.0.1:9; }\n"
    good = write(tmp_path / "good.conf", upstream)
    assert check_cli(paths["conf"], target, good).returncode == 0
    write(paths["conf"] / "sites-enabled/other", upstream)    # the same upstream name elsewhere
    clash = check_cli(paths["conf"], target, good)
    assert clash.returncode == 2
    assert "duplicate upstream" in clash.stderr
    bad = write(tmp_path / "bad.conf", "server { listen 127.0.0.2:1; no_such_directive on; }\n")
    refused = check_cli(paths["conf"], target, bad)
    assert refused.returncode == 2 and "no_such_directive" in refused.stderr
    assert not target.exists()


def test_the_check_says_when_it_could_not_run(tmp_path):
    paths = nginx_tree(tmp_path)
    outside = check_cli(paths["conf"], tmp_path / "elsewhere.conf", write(tmp_path / "c.conf", ""))
    assert outside.returncode == 1 and "could not test" in outside.stderr


def test_the_site_passes_the_check_in_the_distributions_own_configuration(tmp_path, backend):
    """Rendered for this machine's /etc/nginx (Debian's nginx.conf, modules and default site),
    the check accepts it; /etc/nginx itself is only read."""
    system = Path("/etc/nginx")
    assert (system / "nginx.conf").exists(), "nginx's package configuration is missing"
    paths = nginx_tree(tmp_path)
    result, out = render_site(tmp_path, paths, {"lan": free_port(LAN), "engine": backend})
    assert result.returncode == 0, out
    target = system / "conf.d/vllm-dual-fast.conf"
    checked = check_cli(system, target, paths["conf"] / "conf.d/vllm-dual-fast.conf")
    assert checked.returncode == 0, checked.stderr


def evaluate_with_role_vars(tmp_path, expression, variables, task_vars=None):
    """What Ansible makes of a Jinja2 expression with the role's defaults and vars/main.yml
    loaded, `variables` as extra variables and `task_vars` as the task's own (JSON)."""
    out = tmp_path / f"evaluated-{len(list(tmp_path.glob('evaluated-*')))}.json"
    plays = [{
        "name": "Evaluate an expression with the role's variables",
        "hosts": "localhost",
        "gather_facts": False,
        "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
        "tasks": [{"name": "Write it", "vars": task_vars or {},
                   "ansible.builtin.copy": {"dest": str(out), "mode": "0644",
                                            "content": "{{ " + expression + " | to_json }}"}}],
    }]
    result, text = run_playbook(tmp_path, plays, variables)
    assert result.returncode == 0, text
    return json.loads(out.read_text())


def derived_endpoint(tmp_path, **variables):
    """vars/main.yml's endpoint facts, as Ansible evaluates them for these variables."""
    return evaluate_with_role_vars(
        tmp_path, "{'proxied': _vllm_dual_fast_proxied | bool,"
                  " 'address': _vllm_dual_fast_engine_address,"
                  " 'port': _vllm_dual_fast_engine_host_port | int}", variables)


def test_an_ipv6_bind_is_written_in_brackets_and_passes_nginx_s_check(tmp_path, backend):
    # nginx needs an IPv6 address in brackets (`listen ::1:8000` is another address). The site
    # is written only once nginx accepted it in the whole configuration (the task's validate).
    paths = nginx_tree(tmp_path)
    ports = {"lan": free_port(), "engine": backend}
    result, out = render_site(tmp_path, paths, ports, vllm_dual_fast_bind_address="::1")
    assert result.returncode == 0, out
    site = (paths["conf"] / "conf.d/vllm-dual-fast.conf").read_text()
    assert f"listen [::1]:{ports['lan']} ssl;" in site


def test_the_engine_is_on_loopback_whenever_the_bind_is_not(tmp_path):
    from test_release_secrets import render, role_vars

    cases = {
        ("0.0.0.0", 8000, None): (True, "127.0.0.1", 8001),  # noqa: S104 (a bind address)
        ("192.168.1.20", 9000, 9100): (True, "127.0.0.1", 9100),
        ("127.0.0.1", 8000, None): (False, "127.0.0.1", 8000),
    }
    for (bind, port, engine_port), expected in cases.items():
        variables = {"vllm_dual_fast_bind_address": bind, "vllm_dual_fast_port": port}
        if engine_port:
            variables["vllm_dual_fast_engine_port"] = engine_port
        derived = derived_endpoint(tmp_path, **variables)
        assert (derived["proxied"], derived["address"], derived["port"]) == expected
        compose = yaml.safe_load(render("compose.yml.j2", {
            **role_vars(), **variables, "_vllm_dual_fast_engine_address": derived["address"],
            "_vllm_dual_fast_engine_host_port": derived["port"]}))
        assert compose["services"]["vllm"]["ports"] == [f"{expected[1]}:{expected[2]}:8000"]


def plain_role_vars():
    """vars/main.yml's values that are not templates (names the release templates use)."""
    data = yaml.safe_load((ROLE / "vars/main.yml").read_text())
    return {k: v for k, v in data.items() if not isinstance(v, str) or "{{" not in v}


# A loopback bind written as a name or as IPv6: the engine is published where Compose can.
LOOPBACK_BINDS = {"127.0.0.1": ("127.0.0.1", "127.0.0.1:8000:8000"),
                  "localhost": ("127.0.0.1", "127.0.0.1:8000:8000"),
                  "::1": ("::1", "[::1]:8000:8000")}


@pytest.mark.parametrize("bind", [*LOOPBACK_BINDS, "0.0.0.0", "::"])  # noqa: S104 (binds)
def test_every_loopback_bind_renders_a_compose_file_compose_accepts(tmp_path, bind):
    """`localhost` and `::1` pass as loopback: `docker compose config` must accept the ports line
    (Compose takes an IP, not a name, and an IPv6 one in brackets)."""
    from test_release_secrets import docker_compose, render, role_vars

    derived = derived_endpoint(tmp_path, vllm_dual_fast_bind_address=bind)
    address, line = LOOPBACK_BINDS.get(bind, ("127.0.0.1", "127.0.0.1:8001:8000"))
    assert (derived["proxied"], derived["address"]) == (bind not in LOOPBACK_BINDS, address)
    variables = {**role_vars(), **plain_role_vars(), "vllm_dual_fast_bind_address": bind,
                 "_vllm_dual_fast_engine_address": derived["address"],
                 "_vllm_dual_fast_engine_host_port": derived["port"]}
    text = render("compose.yml.j2", variables)
    assert yaml.safe_load(text)["services"]["vllm"]["ports"] == [line]
    if not docker_compose():
        pytest.skip("no Docker Compose CLI here")
    (tmp_path / "compose.yml").write_text(text)
    (tmp_path / "vllm.env").write_text(render("vllm.env.j2", variables))
    (tmp_path / "api-key").write_text("k")
    result = subprocess.run(["docker", "compose", "--file", str(tmp_path / "compose.yml"),
                             "config", "--format", "json"], capture_output=True, text=True,
                            timeout=60, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    ports = json.loads(result.stdout)["services"]["vllm"]["ports"]
    assert [(p["host_ip"], int(p["published"]), p["target"]) for p in ports] == [
        (address, derived["port"], 8000)]


def smoke_base_url(tmp_path, serving):
    """The --base-url health.yml's smoke is given for the release that serves (its manifest)."""
    block = next(t for t in yaml.safe_load((ROLE / "tasks/health.yml").read_text())
                 if t["name"] == "Gather the health checks' evidence on the rig")
    argv = evaluate_with_role_vars(tmp_path, "_smoke_argv", {"_vllm_dual_fast_serving": {
        "dir": "/r", "served_model_name": "q", "api_key_set": False, **serving}}, block["vars"])
    return argv[argv.index("--base-url") + 1]


@pytest.mark.parametrize("bind", LOOPBACK_BINDS)
def test_the_health_check_reaches_the_engine_of_every_loopback_bind(tmp_path, bind):
    """The smoke's URL, from the manifest deploy.yml writes (and from one written before the
    proxy, with neither engine key), reaches a server listening where Compose publishes."""
    derived = derived_endpoint(tmp_path, vllm_dual_fast_bind_address=bind)
    address = LOOPBACK_BINDS[bind][0]
    family = socket.AF_INET6 if ":" in address else socket.AF_INET

    class Server(ThreadingHTTPServer):
        address_family = family

    server = Server((address, 0), GuardLikeVllm)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        for serving in ({"bind_address": bind, "port": 1, "engine_address": derived["address"],
                         "engine_port": port},
                        {"bind_address": bind, "port": port}):
            url = smoke_base_url(tmp_path, serving)
            # A URL as RFC 3986 writes it (an IPv6 host in brackets), not one only Python's
            # http.client happens to split right.
            parts = urllib.parse.urlsplit(url)
            assert (parts.hostname, parts.port) in ((address, port), (bind, port)), url
            with urllib.request.urlopen(url + "/health", timeout=10) as response:  # noqa: S310
                assert response.status == 200, url
    finally:
        server.shutdown()
        server.server_close()


def run_proxy_tasks(tmp_path, nginx_dir, **variables):
    """tasks/proxy.yml itself on localhost, with a stand-in for the role's reload handler that
    records each reload (no init system here)."""
    reloads = tmp_path / "reloads"
    plays = [{
        "name": "The role's proxy tasks",
        "hosts": "localhost",
        "gather_facts": False,
        "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
        "tasks": [{"name": "Run proxy.yml",
                   "ansible.builtin.include_tasks": str(ROLE / "tasks/proxy.yml")}],
        "handlers": [{"name": "Reload nginx", "ansible.builtin.shell": f"echo reload >> {reloads}",
                      "changed_when": True}],
    }]
    result, out = run_playbook(tmp_path, plays, {"_vllm_dual_fast_nginx_dir": str(nginx_dir),
                                                 **variables})
    return result, out, (reloads.read_text().count("reload") if reloads.exists() else 0)


def test_a_loopback_bind_withdraws_the_site_of_an_earlier_lan_bind(tmp_path):
    nginx_dir = tmp_path / "etc-nginx"
    site = write(nginx_dir / "conf.d/vllm-dual-fast.conf", "# from an earlier LAN bind\n")
    result, out, reloads = run_proxy_tasks(tmp_path, nginx_dir,
                                           vllm_dual_fast_bind_address="127.0.0.1")
    assert result.returncode == 0, out
    assert not site.exists() and reloads == 1
    again, out, reloads = run_proxy_tasks(tmp_path, nginx_dir,
                                          vllm_dual_fast_bind_address="127.0.0.1")
    assert again.returncode == 0, out
    assert reloads == 1 and "changed=0" in out    # nothing left to withdraw: no reload


def deploy_task(name_start):
    return next(t for t in yaml.safe_load((ROLE / "tasks/deploy.yml").read_text())
                if t["name"].startswith(name_start))


@pytest.mark.parametrize(("token", "refused"), [
    ('secret"Token;X', True), ("Tok en", True), ("tok\\en", True), ("tok$en", True),
    ("tok{2}", True), ("(?i)tok", True), ("", False), ("aB3._~+/=-", False)])
def test_a_token_nginx_cannot_compare_is_refused_without_showing_it(tmp_path, token, refused):
    """deploy.yml refuses it before anything changes (proxy.yml writes it into nginx's map)."""
    plays = [{
        "name": "deploy.yml's token check",
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [deploy_task("Refuse a metrics token nginx cannot compare as written")],
    }]
    result, out = run_playbook(tmp_path, plays, {"vllm_dual_fast_metrics_token": token})
    assert (result.returncode != 0) is refused, out
    if refused:
        assert "may hold only letters, digits" in out
        assert token not in out


def test_an_engine_port_equal_to_the_public_port_is_refused_beyond_loopback(tmp_path):
    plays = [{
        "name": "deploy.yml's engine port check",
        "hosts": "localhost",
        "gather_facts": False,
        "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
        "tasks": [deploy_task("Refuse an engine port that is the public port")],
    }]
    same = {"vllm_dual_fast_port": 8000, "vllm_dual_fast_engine_port": 8000}
    lan, out = run_playbook(tmp_path, plays, {**same, "vllm_dual_fast_bind_address": "0.0.0.0"})  # noqa: S104
    assert lan.returncode != 0 and "must differ from" in out
    loopback, out = run_playbook(tmp_path, plays, same)
    assert loopback.returncode == 0, out
    default, out = run_playbook(tmp_path, plays, {"vllm_dual_fast_bind_address": "0.0.0.0"})  # noqa: S104
    assert default.returncode == 0, out


@pytest.fixture(scope="module")
def double(tmp_path_factory):
    """The project's vLLM double (its 0.27.1 key guard and routes), slow enough per token
    (0.15 s) that a buffered stream would show."""
    base = tmp_path_factory.mktemp("double")
    server = DoubleServer(base, model="q", env=double_env(
        base, VLLM_API_KEY=KEY, VLLM_DOUBLE_TOKEN_S="0.15",  # noqa: S106 (seconds)
        VLLM_DOUBLE_LATENCY_S="0"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def double_proxy(tmp_path_factory, double):
    with running_proxy(tmp_path_factory.mktemp("double-proxy"), double.port) as running:
        yield running


DOUBLE_CHAT = {"model": "q", "max_tokens": 8, "messages": [{"role": "user", "content": "Say hi."}]}


def test_the_double_published_directly_serves_chat_tokenize_and_metrics_without_the_key(double):
    def direct(method, path):
        return request(double.port, method, path, host="127.0.0.1", tls=False, body=DOUBLE_CHAT)[0]

    assert direct("POST", "/invocations") == 200
    assert direct("POST", "/tokenize") == 200
    assert direct("GET", "/metrics") == 200
    assert direct("POST", "/v1/chat/completions") == 401


def test_behind_the_proxy_the_double_serves_only_keyed_chat_health_and_scraped_metrics(
        double_proxy):
    port = double_proxy["port"]
    assert request(port, "POST", "/invocations", body=DOUBLE_CHAT)[0] == 404
    assert request(port, "POST", "/tokenize", body=DOUBLE_CHAT)[0] == 404
    assert request(port, "GET", "/metrics")[0] == 404
    assert request(port, "POST", "/v1/chat/completions", body=DOUBLE_CHAT)[0] == 401
    status, body = request(port, "POST", "/v1/chat/completions", headers=BEARER, body=DOUBLE_CHAT)
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"]
    assert request(port, "GET", "/health")[0] == 200
    status, body = request(port, "GET", "/metrics",
                           headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert status == 200 and b"vllm:" in body


def test_the_doubles_stream_arrives_token_by_token_through_the_proxy(double_proxy):
    conn = http.client.HTTPSConnection(LAN, double_proxy["port"], timeout=30,
                                       context=unverified_tls())
    start = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body=json.dumps({**DOUBLE_CHAT, "stream": True}),
                 headers={"Content-Type": "application/json", **BEARER})
    response = conn.getresponse()
    assert response.status == 200
    arrivals = [time.monotonic() - start for line in response if line.startswith(b"data:")]
    conn.close()
    assert len(arrivals) >= 8
    # As generated, not in one burst at the end: the first token's event comes with it (one
    # 0.15 s token time), and the rest follow a token time apart.
    assert arrivals[0] < 0.15 * 4
    assert arrivals[-1] - arrivals[0] > 0.15 * 5
