"""The LAN bind's certificate: filter_plugins/vllm_dual_fast_tls.py (the names the rig's
self-signed certificate is made for, the fingerprint read from openssl's own output, recorded
here from OpenSSL 3.0.19), deploy.yml's check of an owner's certificate and key, and tls.yml's
own tasks placing them (run here with Ansible, into a temporary folder)."""

import copy
import importlib.util
import stat
import subprocess

import pytest
import yaml
from ansible_runner import ROLE, run_playbook
from vllm_double_fixtures import load_file_module

spec = importlib.util.spec_from_file_location(
    "vllm_dual_fast_tls", ROLE / "filter_plugins/vllm_dual_fast_tls.py")
tls = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tls)
lan_face_check = load_file_module("lan_face_check")


@pytest.mark.parametrize(("names", "sans"), [
    (["rig-7", "192.168.1.40", "0.0.0.0", "localhost", "127.0.0.1", "::1"],  # noqa: S104
     "DNS:rig-7,IP:192.168.1.40,DNS:localhost,IP:127.0.0.1,IP:::1"),
    (["Rig-7.lan", "rig-7.lan", "[fd00::5]", "::", "", None], "DNS:rig-7.lan,IP:fd00::5"),
    (["a,DNS:evil", "b c", "rig"], "DNS:rig"),     # nothing that would split openssl's list
])
def test_the_certificate_names_the_rig_by_every_address_clients_use(names, sans):
    assert tls.subject_alt_names(names) == sans


def test_openssl_takes_the_names_and_prints_the_fingerprint_the_filter_reads(tmp_path):
    names = tls.subject_alt_names(["rig-7", "192.168.1.40", "::1"])
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=rig-7",
                    "-addext", f"subjectAltName={names}", "-keyout", str(tmp_path / "k"),
                    "-out", str(tmp_path / "c")], check=True, capture_output=True)
    text = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "c"), "-noout", "-text"],
                          check=True, capture_output=True, text=True).stdout
    assert "DNS:rig-7, IP Address:192.168.1.40, IP Address:0:0:0:0:0:0:0:1" in text
    printed = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "c"), "-noout",
                              "-fingerprint", "-sha256"], check=True, capture_output=True,
                             text=True).stdout
    der = subprocess.run(["openssl", "x509", "-in", str(tmp_path / "c"), "-outform", "DER"],
                         check=True, capture_output=True).stdout
    assert tls.sha256_fingerprint(printed) == lan_face_check.fingerprint_of(der)


@pytest.mark.parametrize(("output", "fingerprint"), [
    ("sha256 Fingerprint=" + ":".join(["ab"] * 32) + "\n", ":".join(["AB"] * 32)),  # OpenSSL 3
    ("SHA256 Fingerprint=" + ":".join(["0F"] * 32), ":".join(["0F"] * 32)),          # OpenSSL 1.1
    ("Could not read certificate from /etc/vllm-dual-fast/tls/self-signed.pem", ""),
    ("sha1 Fingerprint=" + ":".join(["AB"] * 20), ""),
    ("", ""),
])
def test_the_fingerprint_is_read_from_either_openssls_output_or_not_at_all(output, fingerprint):
    assert tls.sha256_fingerprint(output) == fingerprint


def owner_pair(tmp_path):
    """An owner's certificate and key (PEM), made with openssl."""
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=rig-7.club.example", "-keyout", str(tmp_path / "owner.key"), "-out",
                    str(tmp_path / "owner.crt")], check=True, capture_output=True)
    return (tmp_path / "owner.crt").read_text(), (tmp_path / "owner.key").read_text()


def role_tasks(file, *names):
    tasks = [copy.deepcopy(t) for t in yaml.safe_load((ROLE / "tasks" / file).read_text())
             if t["name"].startswith(names)]
    assert len(tasks) == len(names)
    for task in tasks:
        task.pop("notify", None)
    return tasks


def run_tls_tasks(tmp_path, certificate, key):
    play = [{"name": "The owner's certificate", "hosts": "localhost", "gather_facts": False,
             "vars_files": [str(ROLE / "defaults/main.yml"), str(ROLE / "vars/main.yml")],
             "tasks": role_tasks("deploy.yml", "Refuse a TLS certificate without its key")
             + role_tasks("tls.yml", "Create the folder of the LAN certificate",
                          "Write the owner's certificate and key")}]
    return run_playbook(tmp_path, play, {
        "_vllm_dual_fast_tls_dir": str(tmp_path / "tls"),
        "vllm_dual_fast_tls_certificate": certificate, "vllm_dual_fast_tls_private_key": key})


def test_the_owners_certificate_is_placed_with_its_key_root_s_alone_and_never_shown(tmp_path):
    certificate, key = owner_pair(tmp_path)
    result, out = run_tls_tasks(tmp_path, certificate, key)
    assert result.returncode == 0, out
    placed_cert, placed_key = tmp_path / "tls/owner.pem", tmp_path / "tls/owner.key"
    assert placed_cert.read_text() == certificate and placed_key.read_text() == key
    assert stat.S_IMODE(placed_key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    body = "".join(key.splitlines()[1:-1])
    assert body[:40] not in out    # the key's base64 is in no output


@pytest.mark.parametrize("what", ["certificate without key", "key without certificate",
                                  "not PEM"])
def test_a_certificate_without_its_key_or_not_in_pem_stops_before_anything_is_written(
        tmp_path, what):
    certificate, key = owner_pair(tmp_path)
    pair = {"certificate without key": (certificate, ""),
            "key without certificate": ("", key),
            "not PEM": ("MIIBszCCAVmgAwIBAgIU", key)}[what]
    result, out = run_tls_tasks(tmp_path, *pair)
    assert result.returncode != 0
    assert "go together, in PEM" in out
    assert not (tmp_path / "tls").exists()

