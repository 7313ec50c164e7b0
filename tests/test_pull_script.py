"""Pull mode's script (roles/vllm_dual_fast/templates/usr/local/sbin/vllm-dual-fast-pull.j2),
rendered and run here with the real ansible-pull of this venv against a local git repository,
and a loopback web server started by the test that accepts PUT (the fleet scenario uploads to
nginx on a rig; this covers the script's decisions run by run)."""

import http.server
import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import jinja2
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "roles/vllm_dual_fast/templates/usr/local/sbin/vllm-dual-fast-pull.j2"
VENV_BIN = pathlib.Path(sys.executable).parent
VAULT_PASSWORD = "fleet-vault-password"  # noqa: S105 (the test vault's own)
GIT = ["git", "-c", "user.name=fleet", "-c", "user.email=fleet@localhost"]


class PutServer(http.server.ThreadingHTTPServer):
    """A loopback web server keeping each PUT body by path (the fleet's report share)."""

    def __init__(self):
        self.bodies = {}
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_PUT(self):  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", 0))
                server.bodies[self.path] = self.rfile.read(length)
                self.send_response(201)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def url(self):
        return f"http://127.0.0.1:{self.server_address[1]}/reports/"


class Fleet:
    """A fleet repository with a playbook that logs each apply, and the rig's pull settings."""

    def __init__(self, tmp: pathlib.Path):
        self.tmp = tmp
        self.repo = tmp / "fleet"
        self.state = tmp / "state"
        self.runs = tmp / "runs.log"
        self.report = tmp / "report.json"
        self.script = tmp / "vllm-dual-fast-pull"
        self.script.write_text(
            jinja2.Template(SCRIPT.read_text()).render(
                ansible_managed="rendered by tests/test_pull_script.py"
            )
        )
        self.script.chmod(0o755)
        self.repo.mkdir()
        self.git("init", "-q", "-b", "main")
        (self.repo / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = false\n")
        (self.repo / "pull.yml").write_text(f"""---
- name: Apply the fleet's release (a stand-in for playbooks/pull.yml)
  hosts: all
  connection: local
  gather_facts: false
  vars_files: [release.yml]
  tasks:
    - name: Log this apply
      ansible.builtin.shell: echo "{{{{ release }}}} {{{{ secret | default('') }}}}" >> {self.runs}
    - name: Fail when the release is broken
      ansible.builtin.fail:
        msg: release {{{{ release }}}} fails health
      when: broken | default(false)
""")
        self.env_file = tmp / "pull.env"

    def git(self, *args):
        return subprocess.run(
            GIT + ["-C", str(self.repo), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    def commit(self, release: str, broken: bool = False, extra: str = "") -> str:
        (self.repo / "release.yml").write_text(
            f"release: {release}\nbroken: {str(broken).lower()}\n{extra}"
        )
        self.git("add", "-A")
        self.git("commit", "-qm", f"release {release}")
        return self.git("rev-parse", "HEAD")

    def settings(self, ref: str, url: str = "", vault_pass: str = ""):
        vault_file = self.tmp / "vault-pass"
        if vault_pass:
            vault_file.write_text(vault_pass + "\n")
        self.env_file.write_text(
            f"VDF_PULL_REPO=file://{self.repo}\nVDF_PULL_REF={ref}\nVDF_PULL_PLAYBOOK=pull.yml\n"
            f"VDF_PULL_REPORT_URL={url}\nVDF_PULL_STATE_DIR={self.state}\n"
            f"VDF_PULL_REPORT={self.report}\nVDF_PULL_ANSIBLE_BIN={VENV_BIN}\n"
            f"VDF_PULL_VAULT_PASS_FILE={vault_file}\n"
        )

    def run(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env["VDF_PULL_ENV"] = str(self.env_file)
        env["HOME"] = str(self.tmp)
        # python3 here is a pyenv shim Ansible's discovery cannot run (a rig's is /usr/bin's).
        env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
        return subprocess.run(
            [str(self.script)], env=env, capture_output=True, text=True, timeout=300, cwd=self.tmp
        )

    def applied_releases(self):
        return self.runs.read_text().split("\n")[:-1] if self.runs.exists() else []


@pytest.fixture
def fleet(tmp_path):
    return Fleet(tmp_path)


def test_a_release_is_applied_once_then_nothing_is_done_while_the_ref_stays(fleet):
    commit = fleet.commit("r1")
    fleet.git("tag", "live")
    fleet.settings("live")
    first, second = fleet.run(), fleet.run()
    assert first.returncode == 0, first.stdout + first.stderr
    assert second.returncode == 0, second.stdout + second.stderr
    assert fleet.applied_releases() == ["r1 "]
    assert (fleet.state / "applied").read_text().strip() == commit
    assert f"live is still {commit}; nothing to do" in second.stdout


def test_a_failed_release_is_not_applied_again_until_the_ref_moves(fleet):
    fleet.commit("r1", broken=True)
    fleet.git("tag", "live")
    fleet.settings("live")
    first, second = fleet.run(), fleet.run()
    assert (first.returncode, second.returncode) == (1, 1)
    assert fleet.applied_releases() == ["r1 "]  # the second run did not switch and fail again
    assert "which failed here; nothing done until the ref moves" in second.stderr
    fixed = fleet.commit("r2")
    fleet.git("tag", "-f", "live")
    third = fleet.run()
    assert third.returncode == 0, third.stdout + third.stderr
    assert fleet.applied_releases() == ["r1 ", "r2 "]
    assert (fleet.state / "applied").read_text().strip() == fixed
    assert not (fleet.state / "failed").exists()


def test_the_ref_is_matched_exactly_not_by_its_last_path_part(fleet):
    wanted = fleet.commit("r1")
    fleet.git("branch", "live")
    fleet.commit("r-old")
    fleet.git("branch", "old/live")  # refs/heads/old/live sorts after refs/heads/live
    fleet.git("checkout", "-q", "live")
    fleet.settings("live")
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert fleet.applied_releases() == ["r1 "]
    assert (fleet.state / "applied").read_text().strip() == wanted


def test_an_annotated_tag_resolves_to_its_commit(fleet):
    commit = fleet.commit("r1")
    fleet.git("tag", "-a", "-m", "fleet release 1", "live")
    fleet.settings("live")
    assert fleet.run().returncode == 0
    assert (fleet.state / "applied").read_text().strip() == commit


def test_a_ref_the_repository_lacks_applies_nothing(fleet):
    fleet.commit("r1")
    fleet.settings("no-such-ref")
    result = fleet.run()
    assert result.returncode == 1
    assert "no-such-ref names no branch or tag" in result.stderr
    assert fleet.applied_releases() == []


def _vaulted(secret: str, tmp: pathlib.Path) -> str:
    password_file = tmp / "encrypt-pass"
    password_file.write_text(VAULT_PASSWORD)
    return subprocess.run(
        [
            str(VENV_BIN / "ansible-vault"),
            "encrypt_string",
            "--vault-password-file",
            str(password_file),
            secret,
            "--name",
            "secret",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_vaulted_fleet_vars_are_read_with_the_rigs_vault_password(fleet):
    fleet.commit("r1", extra=_vaulted("s3cr3t-token", fleet.tmp))
    fleet.git("tag", "live")
    fleet.settings("live", vault_pass=VAULT_PASSWORD)
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert fleet.applied_releases() == ["r1 s3cr3t-token"]


def test_without_the_vault_password_the_run_fails_and_says_so(fleet):
    fleet.commit("r1", extra=_vaulted("s3cr3t-token", fleet.tmp))
    fleet.git("tag", "live")
    fleet.settings("live")
    result = fleet.run()
    assert result.returncode == 1
    assert "failed" in result.stderr
    assert "s3cr3t-token" not in result.stdout + result.stderr


def test_each_run_uploads_the_report_tagged_with_its_commit_and_exit_status(fleet):
    server = PutServer()
    fleet.report.write_text(json.dumps({"host": "rig-a", "release": "old", "healthy": True}))
    good = fleet.commit("r1")
    fleet.git("tag", "live")
    fleet.settings("live", url=server.url())
    assert fleet.run().returncode == 0
    ((path, body),) = server.bodies.items()
    uploaded = json.loads(body)
    assert path.startswith("/reports/") and path.endswith(".json")
    assert (uploaded["release"], uploaded["pull"]["commit"], uploaded["pull"]["rc"]) == (
        "old",
        good,
        0,
    )
    broken = fleet.commit("r2", broken=True)
    fleet.git("tag", "-f", "live")
    assert fleet.run().returncode == 1
    uploaded = json.loads(server.bodies[path])
    # The failed run left the old report in place: its tag says the new commit failed.
    assert (uploaded["release"], uploaded["pull"]["commit"], uploaded["pull"]["rc"]) == (
        "old",
        broken,
        1,
    )
    server.shutdown()


def test_a_failed_upload_fails_the_run_and_the_next_run_uploads(fleet):
    server = PutServer()
    fleet.report.write_text(json.dumps({"host": "rig-a", "release": "r1"}))
    commit = fleet.commit("r1")
    fleet.git("tag", "live")
    down = PutServer()
    down_url = down.url()
    down.shutdown()
    down.server_close()  # a loopback port with nothing listening
    fleet.settings("live", url=down_url)
    first = fleet.run()
    assert first.returncode == 1
    assert "report upload failed" in first.stderr
    assert (fleet.state / "applied").read_text().strip() == commit  # applied all the same
    fleet.settings("live", url=server.url())
    second = fleet.run()
    assert second.returncode == 0, second.stdout + second.stderr
    assert fleet.applied_releases() == ["r1 "]
    (body,) = server.bodies.values()
    pull = json.loads(body)["pull"]
    assert (pull["commit"], pull["rc"]) == (commit, 0)
    server.shutdown()


def test_a_second_run_while_one_holds_the_lock_exits_2(fleet):
    fleet.commit("r1")
    fleet.git("tag", "live")
    fleet.settings("live")
    fleet.state.mkdir()
    lock = str(fleet.state / "lock")
    holder = subprocess.Popen(["flock", lock, "sleep", "30"])
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["flock", "-n", lock, "true"]).returncode == 0:
            assert time.monotonic() < deadline, "the holder never took the lock"
            time.sleep(0.05)
        result = fleet.run()
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2
    assert "another run holds the lock" in result.stdout
    assert fleet.applied_releases() == []
