"""The fleet scenario's webhook receiver (molecule/fleet/files/alert_receiver.py): what it keeps of
each POST, and what its `wait` counts as the alert looked for. A wait that matched the wrong
alert, status, rig or time would let the scenario pass on a fault that never alerted."""

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from vllm_double_fixtures import free_port

RECEIVER = Path(__file__).resolve().parents[2] / "molecule/fleet/files/alert_receiver.py"


def notification(status, **labels):
    return {"status": status, "alerts": [{"status": status, "labels": labels}]}


def post(port, payload, path="/hook"):
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method="POST",
                                     data=json.dumps(payload).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 (loopback)
        return response.status


def wait(path, timeout, *expected, since=None, sent_to=None):
    argv = [sys.executable, str(RECEIVER), "wait", str(path), str(timeout), *expected]
    if since is not None:
        argv += ["--since", str(since)]
    if sent_to is not None:
        argv += ["--path", sent_to]
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=30)
    return done.returncode, json.loads(done.stdout)


def test_it_keeps_every_post_and_waits_for_exactly_the_alert_named(tmp_path):
    port, alerts = free_port(), tmp_path / "alerts.jsonl"
    server = subprocess.Popen([sys.executable, str(RECEIVER), "serve", str(port), str(alerts)])
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                status = post(port, notification("firing", alertname="Down", rig="rig-2"))
                break
            except OSError:
                assert time.monotonic() < deadline, "the receiver never listened"
                time.sleep(0.1)
        before = time.time()
        assert status == 200
        assert post(port, notification("resolved", alertname="Down", rig="rig-2")) == 200
        assert post(port, notification("firing", alertname="Watchdog"), "/deadman") == 200
    finally:
        server.terminate()
        server.wait(5)
    kept = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert [(k["payload"]["status"], k["path"]) for k in kept] == [
        ("firing", "/hook"), ("resolved", "/hook"), ("firing", "/deadman")]
    assert kept[0]["at"] <= before <= kept[1]["at"] + 1

    rc, found = wait(alerts, 1, "firing:Down:rig=rig-2", "resolved:Down")
    assert rc == 0 and set(found) == {"firing:Down:rig=rig-2", "resolved:Down"}
    assert found["firing:Down:rig=rig-2"] == kept[0]["at"]
    # another rig, another alert, a status not sent, or a time after it arrived: not found
    for wrong in ("firing:Down:rig=rig-1", "firing:Xid:rig=rig-2", "pending:Down"):
        rc, found = wait(alerts, 0.5, wrong)
        assert rc == 1 and found["missing"] == [wrong], wrong
    rc, found = wait(alerts, 0.5, "firing:Down:rig=rig-2", since=kept[1]["at"])
    assert rc == 1 and found["missing"] == ["firing:Down:rig=rig-2"]
    # a notification counts only where it was sent: the dead man's switch is not the owner
    rc, found = wait(alerts, 0.5, "firing:Watchdog")
    assert rc == 1 and found["missing"] == ["firing:Watchdog"]
    rc, found = wait(alerts, 1, "firing:Watchdog", sent_to="/deadman")
    assert rc == 0 and found["firing:Watchdog"] == kept[2]["at"]
    rc, found = wait(alerts, 0.5, "firing:Down:rig=rig-2", sent_to="/deadman")
    assert rc == 1
