"""The rollout's silences (playbooks/tasks/rollout_silence.yml) in the distribution's real
Alertmanager on loopback: playbooks/rollout.yml over stand-in rigs (tests/rollout_stand_ins.py)
silences each batch's rigs before they switch and expires the silence once the batch is done,
whatever the batch did; an Alertmanager that does not answer stops nothing."""

import contextlib
import datetime
import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from rollout_stand_ins import run_rollout
from vllm_double_fixtures import free_port

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
RIGS = ["rig-1", "rig-2", "rig-3"]

pytestmark = pytest.mark.skipif(not Path(ALERTMANAGER).exists(),
                                reason="needs the distribution's prometheus-alertmanager")


@contextlib.contextmanager
def alertmanager(tmp_path):
    port = free_port()
    (tmp_path / "am.yml").write_text("route: {receiver: nobody}\nreceivers: [{name: nobody}]\n")
    log = (tmp_path / "am.log").open("w")
    process = subprocess.Popen(
        [ALERTMANAGER, f"--config.file={tmp_path / 'am.yml'}",
         f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--cluster.listen-address="], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "am.log").read_text()
                time.sleep(0.2)
        yield port
    finally:
        process.terminate()
        process.wait(10)
        log.close()


def silences(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/silences", timeout=5) as reply:
        return json.load(reply)


def rig_of(silence):
    """The rig a silence names (its matcher is the escaped name: rig-1 is rig\\-1)."""
    return silence["matchers"][0]["value"].replace("\\", "")


def at(text):
    """A UTC time as Alertmanager (…Z) or the rollout's record (now(utc=true), naive) writes it."""
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


@pytest.mark.parametrize(("entry", "action"), [("rollout.yml", "release"),
                                              ("maintain.yml", "maintenance")])
def test_each_batch_is_silenced_while_it_switches_and_unsilenced_after(tmp_path, entry, action):
    with alertmanager(tmp_path) as port:
        run = run_rollout(tmp_path, RIGS, entry=entry, monitoring={
            "watch": {"vllm_dual_fast_monitoring_alertmanager_listen": f"127.0.0.1:{port}"}})
        found = silences(port)
    assert run.result.returncode == 0, run.out
    by_rig = {rig_of(s): s for s in found}
    # One per batch (the canary, then one rig each) of the rigs that switched. A stand-in rig that
    # did not answer the first ping on a loaded machine is unreachable and switches in no batch.
    assert run.switched, (run.fleet_states(), run.out[-3000:])
    assert sorted(by_rig) == sorted(run.switched), (found, run.fleet_states())
    assert set(run.fleet_states().values()) <= {"updated", "maintained", "unreachable"}
    for rig, silence in by_rig.items():
        assert silence["matchers"] == [{"name": "rig", "value": rig.replace("-", "\\-"),
                                        "isRegex": True, "isEqual": True}]
        assert silence["createdBy"] == "vllm-dual-fast rollout"
        assert silence["status"]["state"] == "expired", silence
        # It covered the rig's switch: made before its state was recorded, expired after it,
        # long before the hour an interrupted rollout's silence would last.
        switched = at(run.states[rig]["at"])
        assert at(silence["startsAt"]) <= switched + datetime.timedelta(seconds=1)
        assert switched <= at(silence["endsAt"]) + datetime.timedelta(seconds=1)
        assert at(silence["endsAt"]) - at(silence["startsAt"]) < datetime.timedelta(minutes=10)
    canary = min(run.switched)
    assert f"{action} of the canary: {canary}" in by_rig[canary]["comment"]


def test_a_failed_canary_s_silence_is_expired_too(tmp_path):
    with alertmanager(tmp_path) as port:
        run = run_rollout(tmp_path, RIGS, {"vdf_test_fail": {"rig-1": "switch"}}, monitoring={
            "watch": {"vllm_dual_fast_monitoring_alertmanager_listen": f"127.0.0.1:{port}"}})
        found = silences(port)
    assert run.result.returncode != 0, run.out
    assert [(rig_of(s), s["status"]["state"]) for s in found] == [
        ("rig-1", "expired")], found


def test_an_alertmanager_that_does_not_answer_stops_nothing(tmp_path):
    run = run_rollout(tmp_path, RIGS, monitoring={
        "watch": {"vllm_dual_fast_monitoring_alertmanager_listen": f"127.0.0.1:{free_port()}"}})
    assert run.result.returncode == 0, run.out
    assert run.fleet_states() == dict.fromkeys(RIGS, "updated")
    assert "No Alertmanager silence for rig-1" in run.out, run.out[-3000:]


def test_without_a_monitoring_host_no_silence_is_asked_for(tmp_path):
    run = run_rollout(tmp_path, RIGS)
    assert run.result.returncode == 0, run.out
    assert "Silence the alerts of this batch" not in run.out
