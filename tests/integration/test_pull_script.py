"""Pull mode's script (roles/vllm_dual_fast/templates/usr/local/sbin/vllm-dual-fast-pull.j2),
rendered and run here with the real ansible-pull of this venv against a local git repository,
and a loopback web server started by the test that accepts PUT (the fleet scenario uploads to
nginx on a rig; this covers the script's decisions run by run)."""

import base64
import http.server
import json
import os
import pathlib
import platform
import shlex
import shutil
import stat
import subprocess
import sys
import threading
import time

import jinja2
import jsonschema
import pytest
import yaml
from ansible_runner import run_playbook
from vllm_double_fixtures import load_file_module

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "roles/vllm_dual_fast/templates/usr/local/sbin/vllm-dual-fast-pull.j2"
VENV_BIN = pathlib.Path(sys.executable).parent
VAULT_PASSWORD = "fleet-vault-password"  # noqa: S105 (the test vault's own)
RIG_A_PASSWORD = "rig-a-password"  # noqa: S105 (the test vault's own)
GIT = ["git", "-c", "user.name=fleet", "-c", "user.email=fleet@localhost"]


def utc_in(days: float) -> str:
    """The UTC time `days` from now, as a Valid-Until line gives it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + days * 86400))


VALID = "a week from now"  # the default Valid-Until of a test's commits and tags


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


def uploaded(server, path="/reports/rig-a.json") -> dict:
    """The report an upload carried: the rig's signed envelope (files/schemas/
    signed-report.schema.json) holds it as JSON text."""
    return json.loads(json.loads(server.bodies[path])["report"])


class Fleet:
    """A fleet repository with a playbook that logs each apply, and the rig's pull settings."""

    def __init__(self, tmp: pathlib.Path):
        self.tmp = tmp
        self.repo = tmp / "fleet"
        self.state = tmp / "state"
        self.runs = tmp / "runs.log"
        self.report = tmp / "report.json"
        self.failed_report = tmp / "report-failed.json"
        self.keys = Keys(tmp / "keys")
        self.signers = tmp / "allowed_signers"
        self.gpg_keys = tmp / "pull-gpg-keys.asc"
        self.pull_vars = tmp / "pull-vars.yml"
        self.pull_vars.write_text("{}\n")
        self.script = tmp / "vllm-dual-fast-pull"
        self.script.write_text(
            jinja2.Template(SCRIPT.read_text()).render(
                ansible_managed="rendered by tests/integration/test_pull_script.py"
            )
        )
        self.script.chmod(0o755)
        self.repo.mkdir()
        self.git("init", "-q", "-b", "main")
        # The role's filters: a heartbeat stopped in preflight writes its report as the role does.
        (self.repo / "ansible.cfg").write_text(
            "[defaults]\nretry_files_enabled = false\n"
            f"filter_plugins = {ROOT / 'roles/vllm_dual_fast/filter_plugins'}\n")
        # The GPU double's fault file: while it exists, a heartbeat's preflight finds a GPU lost.
        self.gpu_lost = tmp / "gpu-lost"
        (self.repo / "pull.yml").write_text(f"""---
- name: Apply the fleet's release (a stand-in for playbooks/pull.yml)
  hosts: all
  connection: local
  gather_facts: false
  vars_files:
    - release.yml
    - ["host_vars/{{{{ inventory_hostname }}}}.yml", release.yml]  # as playbooks/pull.yml
  tasks:
    - name: Write the report of a check stopped in preflight, as tasks/preflight_report.yml does
      ansible.builtin.copy:
        dest: {self.report}
        content: >-
          {{{{ {{}} | vllm_dual_fast_stopped_report(inventory_hostname,
                   '/opt/vllm-dual-fast/releases/' ~ release,
                   'preflight: the NVIDIA driver is loaded but cannot reach a GPU, '
                   ~ 'which fell off the bus.',
                   now(utc=true).isoformat(), check='preflight') | to_nice_json }}}}
        mode: "0644"
      when:
        - vllm_dual_fast_stages | default([]) == ['preflight', 'verify']
        - "'{self.gpu_lost}' is exists"
    - name: Stop there, as preflight does with a GPU lost
      ansible.builtin.fail:
        msg: the NVIDIA driver is loaded but cannot reach a GPU
      when:
        - vllm_dual_fast_stages | default([]) == ['preflight', 'verify']
        - "'{self.gpu_lost}' is exists"
    - name: Write a fresh report, as the verify stage does (a heartbeat)
      ansible.builtin.copy:
        dest: {self.report}
        content: '{{{{ {{"host": inventory_hostname, "release": release, "healthy": true,
                    "checked_at": now(utc=true).isoformat()}} | to_json }}}}'
        mode: "0644"
      when: vllm_dual_fast_stages | default([]) == ['preflight', 'verify']
    - name: Stop here on a health check
      ansible.builtin.meta: end_play
      when: vllm_dual_fast_stages | default([]) == ['preflight', 'verify']
    - name: Log this apply
      ansible.builtin.shell: echo "{{{{ release }}}} {{{{ secret | default('') }}}}" >> {self.runs}
    - name: Write the rig's allowed signers from the commit, as the pulled pull stage does
      ansible.builtin.copy:
        dest: {self.signers}
        content: "{{{{ signers_text }}}}"
        mode: "0644"
      when: signers_text is defined
    - name: Wait, for a test sampling what runs
      ansible.builtin.command: sleep {{{{ slow | default(0) }}}}
      changed_when: false
    - name: Fail before the switch (a registry or disk failure)
      ansible.builtin.fail:
        msg: release {{{{ release }}}} cannot be downloaded
      when: fails_before_switch | default(false)
    - name: Keep the failed release's report, as the role's rollback does
      ansible.builtin.copy:
        dest: {self.failed_report}
        content: '{{{{ {{"release": release, "healthy": false}} | to_json }}}}'
        mode: "0644"
      when: broken | default(false)
    - name: Fail when the release is broken
      ansible.builtin.fail:
        msg: release {{{{ release }}}} fails health
      when: broken | default(false)
""")
        self.env_file = tmp / "pull.env"
        # ansible-pull as a logging wrapper of the real one: a test sees whether it started.
        self.bin = tmp / "bin"
        self.bin.mkdir()
        self.pulls = tmp / "ansible-pull-calls.log"
        wrapper = self.bin / "ansible-pull"
        wrapper.write_text(
            f'#!/bin/sh\necho "$*" >>{self.pulls}\numask >{tmp / "ansible-pull-umask"}\n'
            f'exec {VENV_BIN}/ansible-pull "$@"\n'
        )
        wrapper.chmod(0o755)
        (self.bin / "ansible-playbook").symlink_to(VENV_BIN / "ansible-playbook")

    def git(self, *args):
        return subprocess.run(
            GIT + ["-C", str(self.repo), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    def commit(self, release: str, broken: bool = False, extra: str = "", sign="owner",
               valid_until=VALID) -> str:
        """A commit of release `release`, signed with SSH key `sign` ("owner", "stranger"),
        with GPG ("gpg"), or unsigned (None); its message carries Valid-Until (what a
        branch-enrolled rig reads) unless valid_until is None."""
        (self.repo / "release.yml").write_text(
            f"release: {release}\nbroken: {str(broken).lower()}\n{extra}"
        )
        self.git("add", "-A")
        self.git(*self.keys.sign_args(sign), "commit", "-qm",
                 signed_message(f"release {release}", valid_until))
        return self.git("rev-parse", "HEAD")

    def tag(self, at: str = "HEAD", name: str = "live", sign="owner", valid_until=VALID,
            env=None) -> str:
        """`name` moved to `at` as the owner moves the fleet's tag (scripts/sign-fleet-ref):
        an annotated tag signed with `sign` (None: annotated, unsigned) whose message carries
        Valid-Until (None: none). Returns the tag object."""
        kind = "-s" if sign else "-a"
        subprocess.run(GIT + ["-C", str(self.repo), *self.keys.sign_args(sign), "tag", "-f",
                              kind, "-m", signed_message(f"fleet {name}", valid_until), name,
                              at], check=True, capture_output=True, text=True,
                       env={**os.environ, **(env or {})})
        return self.git("rev-parse", f"refs/tags/{name}")

    def live_at(self, release: str, settings: dict | None = None, **commit_args) -> str:
        """The first commit, of release `release`, with the tag `live` on it (signed by the
        commit's signer, the owner for an unsigned commit); the rig's settings follow it."""
        commit = self.commit(release, **commit_args)
        self.tag(sign=commit_args.get("sign", "owner") or "owner")
        self.settings("live", **(settings or {}))
        return commit

    def applied_r1_then_r2(self) -> tuple:
        """Releases r1 then r2 applied through the tag `live`: (c1, c2), the rig at c2."""
        c1 = self.live_at("r1")
        assert self.run().returncode == 0
        c2 = self.commit("r2")
        self.tag()
        assert self.run().returncode == 0
        return c1, c2

    def settings(self, ref: str, url: str = "", vault_pass: str = "", repo: str = "", **more):
        vault_file = self.tmp / "vault-pass"
        if vault_pass:
            vault_file.write_text(vault_pass + "\n")
        self.signers.write_text(f'owner namespaces="git" {self.keys.public("owner")}\n')
        self.gpg_keys.write_text(self.keys.gpg_public())
        values = {
            "VDF_PULL_REPO": repo or f"file://{self.repo}",
            "VDF_PULL_REF": ref,
            "VDF_PULL_REF_KIND": "tag",
            "VDF_PULL_REPORT_KEY": self.keys.folder / "rig-a",
            "VDF_PULL_PLAYBOOK": "pull.yml",
            "VDF_PULL_REPORT_URL": url,
            "VDF_PULL_STATE_DIR": self.state,
            "VDF_PULL_HELPER": ROOT / "files/pull_report.py",
            "VDF_PULL_REPORT": self.report,
            "VDF_PULL_FAILED_REPORT": self.failed_report,
            "VDF_PULL_ANSIBLE_BIN": self.bin,
            "VDF_PULL_VAULT_PASS_FILE": vault_file,
            "VDF_PULL_RIG": "rig-a",
            "VDF_PULL_ALLOWED_SIGNERS": self.signers,
            "VDF_PULL_GPG_KEYS": self.gpg_keys,
            "VDF_PULL_VARS": self.pull_vars,
            "VDF_PULL_RETRY_BASE_S": 0,
            "VDF_PULL_RETRY_MAX_S": 3600,
            "VDF_PULL_CHECK_TIMEOUT_S": 0,
            "VDF_PULL_MAX_VALID_DAYS": 31,
        }
        values.update(more)
        self.env_file.write_text("".join(f"{k}={shlex.quote(str(v))}\n" for k, v in values.items()))

    def ansible_pull_calls(self) -> int:
        return len(self.pulls.read_text().splitlines()) if self.pulls.exists() else 0

    def pull_state(self) -> dict:
        return json.loads((self.state / "pull.json").read_text())

    def run(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env["VDF_PULL_ENV"] = str(self.env_file)
        env["HOME"] = str(self.tmp)
        # python3 here is a pyenv shim Ansible's discovery cannot run (a rig's is /usr/bin's).
        env["ANSIBLE_PYTHON_INTERPRETER"] = sys.executable
        env.pop("GNUPGHOME", None)  # the script's own keyring, not the signer's
        return subprocess.run(
            [str(self.script)], env=env, capture_output=True, text=True, timeout=300, cwd=self.tmp
        )

    def start(self):
        """The script running in the background (a test samples what runs meanwhile)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env.update(
            VDF_PULL_ENV=str(self.env_file),
            HOME=str(self.tmp),
            ANSIBLE_PYTHON_INTERPRETER=sys.executable,
        )
        env.pop("GNUPGHOME", None)
        return subprocess.Popen(
            [str(self.script)],
            env=env,
            cwd=self.tmp,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def applied_releases(self):
        return self.runs.read_text().split("\n")[:-1] if self.runs.exists() else []


def signed_message(subject: str, valid_until=VALID) -> str:
    """A commit's or tag's message with the fleet's Valid-Until line (None: without one)."""
    if valid_until is None:
        return subject
    return f"{subject}\n\nValid-Until: {utc_in(7) if valid_until == VALID else valid_until}"


class Keys:
    """Real signing keys: SSH keys "owner" (allowed) and "stranger" (not), and a GPG key."""

    def __init__(self, folder: pathlib.Path):
        folder.mkdir()
        self.folder = folder
        for name in ("owner", "stranger", "rig-a", "rig-b"):
            subprocess.run(
                [
                    "ssh-keygen",
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    name,
                    "-f",
                    str(folder / name),
                ],
                check=True,
            )
        self.gnupg = folder / "gnupg"
        self.gnupg.mkdir(mode=0o700)
        subprocess.run(
            [
                "gpg",
                "--batch",
                "--quiet",
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
                "--quick-gen-key",
                "gpg-owner@fleet",
                "ed25519",
                "sign",
                "never",
            ],
            check=True,
            env={**os.environ, "GNUPGHOME": str(self.gnupg)},
            capture_output=True,
        )

    def public(self, name: str) -> str:
        return (self.folder / f"{name}.pub").read_text().strip()

    def gpg_public(self) -> str:
        return subprocess.run(
            ["gpg", "--armor", "--export", "gpg-owner@fleet"],
            check=True,
            text=True,
            capture_output=True,
            env={**os.environ, "GNUPGHOME": str(self.gnupg)},
        ).stdout

    def sign_args(self, sign) -> list:
        if sign is None:
            return ["-c", "commit.gpgsign=false"]
        if sign == "gpg":
            os.environ["GNUPGHOME"] = str(self.gnupg)  # git's gpg finds the secret key here
            return ["-c", "commit.gpgsign=true", "-c", "user.signingkey=gpg-owner@fleet"]
        return [
            "-c",
            "commit.gpgsign=true",
            "-c",
            "gpg.format=ssh",
            "-c",
            f"user.signingkey={self.folder / sign}",
        ]


@pytest.fixture
def fleet(tmp_path):
    yield Fleet(tmp_path)
    # gpg starts an agent per home folder that outlives the test, each holding inotify
    # instances: 60 of them used up the 128 a user may have, and the Molecule rigs' systemd,
    # started after pytest in make test, could no longer start.
    for home in tmp_path.rglob("gnupg"):
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], check=False,
                       capture_output=True)


def test_a_release_is_applied_once_then_nothing_is_done_while_the_ref_stays(fleet):
    commit = fleet.live_at("r1")
    first, second = fleet.run(), fleet.run()
    assert first.returncode == 0, first.stdout + first.stderr
    assert second.returncode == 0, second.stdout + second.stderr
    assert fleet.applied_releases() == ["r1 "]
    assert (fleet.state / "applied").read_text().strip() == commit
    assert f"live is still {commit}; nothing to do" in second.stdout


def test_a_failed_release_is_not_applied_again_until_the_ref_moves(fleet):
    fleet.live_at("r1", broken=True)
    first, second = fleet.run(), fleet.run()
    assert (first.returncode, second.returncode) == (1, 1)
    assert fleet.applied_releases() == ["r1 "]  # the second run did not switch and fail again
    assert "which failed here; nothing done until the ref moves" in second.stderr
    fixed = fleet.commit("r2")
    fleet.tag()
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
    fleet.settings("live", VDF_PULL_REF_KIND="branch")
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert fleet.applied_releases() == ["r1 "]
    assert (fleet.state / "applied").read_text().strip() == wanted


def test_a_signed_annotated_tag_resolves_to_its_commit(fleet):
    commit = fleet.commit("r1")
    tag = fleet.tag()
    assert tag != commit
    fleet.settings("live")
    assert fleet.run().returncode == 0
    assert (fleet.state / "applied").read_text().strip() == commit
    pull = fleet.pull_state()
    assert (pull["state"], pull["tag_signer"], pull["applied_commit"]) == ("applied", "owner",
                                                                          commit)


def test_a_ref_the_repository_lacks_applies_nothing(fleet):
    fleet.commit("r1")
    fleet.settings("no-such-ref")
    result = fleet.run()
    assert result.returncode == 1
    assert "the fleet repository has no refs/tags/no-such-ref" in result.stderr
    assert fleet.applied_releases() == []


def _vaulted(secret: str, tmp: pathlib.Path, vault_id: str = "", password=VAULT_PASSWORD) -> str:
    password_file = tmp / "encrypt-pass"
    password_file.write_text(password)
    return subprocess.run(
        [
            str(VENV_BIN / "ansible-vault"),
            "encrypt_string",
            "--vault-id",
            f"{vault_id}@{password_file}" if vault_id else str(password_file),
            secret,
            "--name",
            "secret",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def test_vaulted_fleet_vars_are_read_with_the_rigs_vault_password(fleet):
    fleet.live_at("r1", extra=_vaulted("s3cr3t-token", fleet.tmp),
                  settings=dict(vault_pass=VAULT_PASSWORD))
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert fleet.applied_releases() == ["r1 s3cr3t-token"]


def test_without_the_vault_password_the_run_fails_and_says_so(fleet):
    fleet.live_at("r1", extra=_vaulted("s3cr3t-token", fleet.tmp))
    result = fleet.run()
    assert result.returncode == 1
    assert "failed" in result.stderr
    assert "s3cr3t-token" not in result.stdout + result.stderr


def test_each_run_uploads_the_report_tagged_with_its_commit_and_exit_status(fleet):
    server = PutServer()
    fleet.report.write_text(json.dumps({"host": "rig-a", "release": "old", "healthy": True}))
    good = fleet.live_at("r1", settings=dict(url=server.url()))
    assert fleet.run().returncode == 0
    ((path, _),) = server.bodies.items()
    sent = uploaded(server, path)
    assert path.startswith("/reports/") and path.endswith(".json")
    assert (sent["release"], sent["pull"]["commit"], sent["pull"]["rc"]) == ("old", good, 0)
    broken = fleet.commit("r2", broken=True)
    fleet.tag()
    assert fleet.run().returncode == 1
    sent = uploaded(server, path)
    # The failed run left the old report in place: its tag says the new commit failed.
    assert (sent["release"], sent["pull"]["commit"], sent["pull"]["rc"]) == ("old", broken, 1)
    server.shutdown()


def test_a_failed_upload_fails_the_run_and_the_next_run_uploads(fleet):
    server = PutServer()
    fleet.report.write_text(json.dumps({"host": "rig-a", "release": "r1"}))
    commit = fleet.commit("r1")
    fleet.tag()
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
    pull = uploaded(server)["pull"]
    assert (pull["commit"], pull["rc"]) == (commit, 0)
    server.shutdown()


def test_a_second_run_while_one_holds_the_lock_exits_2(fleet):
    fleet.live_at("r1")
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


# --- signatures: only commits an allowed signer signed run ------------------------------------


def test_a_commit_signed_with_an_allowed_gpg_key_applies(fleet):
    commit = fleet.live_at("r1", sign="gpg")
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert fleet.applied_releases() == ["r1 "]
    assert fleet.pull_state()["state"] == "applied"
    assert "gpg-owner@fleet" in fleet.pull_state()["signer"]
    assert (fleet.state / "applied").read_text().strip() == commit
    assert "--verify-commit" in fleet.pulls.read_text()


@pytest.mark.parametrize(
    ("sign", "signer", "reason"),
    [(None, "", "not signed"), ("stranger", "SHA256:", "No principal matched")],
)
def test_an_unsigned_or_unknown_signers_commit_is_refused_and_nothing_of_it_runs(
    fleet, sign, signer, reason
):
    server = PutServer()
    fleet.live_at("r1", settings=dict(url=server.url()))
    assert fleet.run().returncode == 0
    bad = fleet.commit("r2-evil", sign=sign)
    fleet.tag()
    first, second = fleet.run(), fleet.run()
    assert (first.returncode, second.returncode) == (1, 1)
    assert fleet.applied_releases() == ["r1 "]  # nothing of the refused commit ran
    assert fleet.ansible_pull_calls() == 1  # ansible-pull never started for it
    assert f"refused live ({bad})" in first.stderr
    assert "refused here" in second.stderr and "until the ref moves" in second.stderr
    pull = uploaded(server)["pull"]
    assert (pull["state"], pull["commit"]) == ("refused", bad)
    assert pull["signer"].startswith(signer) and reason in pull["reason"]
    good = fleet.commit("r3")
    fleet.tag()
    assert fleet.run().returncode == 0
    assert fleet.applied_releases() == ["r1 ", "r3 "]
    assert fleet.pull_state()["commit"] == good
    server.shutdown()


def test_a_signer_added_to_the_allowed_list_lets_a_refused_commit_apply(fleet):
    fleet.live_at("r1", sign="stranger")
    assert fleet.run().returncode == 1
    fleet.signers.write_text(
        fleet.signers.read_text() + f'stranger namespaces="git" {fleet.keys.public("stranger")}\n'
    )
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert fleet.applied_releases() == ["r1 "]


def test_a_gpg_key_removed_from_the_list_no_longer_verifies(fleet):
    fleet.live_at("r1", sign="gpg")
    assert fleet.run().returncode == 0
    fleet.commit("r2", sign="gpg")
    fleet.tag()
    fleet.gpg_keys.write_text("")  # the owner rotated the GPG key out
    assert fleet.run().returncode == 1
    assert fleet.pull_state()["state"] == "refused"
    assert fleet.applied_releases() == ["r1 "]


# --- forward only: a commit applies only when it descends from the one applied last ----------


def _moved_back(fleet, server, old):
    """The run after the ref moved back to `old`: refused, nothing of it ran."""
    result = fleet.run()
    assert result.returncode == 1, result.stdout + result.stderr
    pull = fleet.pull_state()
    assert (pull["state"], pull["commit"]) == ("refused", old)
    return pull, result


@pytest.mark.parametrize("sign", ["owner", "gpg"])
def test_the_tag_moved_back_to_an_older_signed_commit_is_refused(fleet, sign):
    server = PutServer()
    c1 = fleet.live_at("r1", sign=sign, settings=dict(url=server.url()))
    assert fleet.run().returncode == 0
    c2 = fleet.commit("r2", sign=sign)
    fleet.tag(sign=sign)
    assert fleet.run().returncode == 0
    fleet.tag(c1, sign=sign)  # a signer's own older tag, put back by the host or a member
    pull, result = _moved_back(fleet, server, c1)
    assert pull["reason"] == f"not a descendant of {c2}"
    assert pull["signer"]  # the commit's signer, as a refusal names it
    assert f"refused live ({c1})" in result.stderr
    assert fleet.applied_releases() == ["r1 ", "r2 "]
    assert fleet.ansible_pull_calls() == 2  # nothing of c1 ran again
    assert (fleet.state / "applied").read_text().strip() == c2
    sent = uploaded(server)["pull"]
    assert (sent["state"], sent["commit"], sent["reason"]) == (
        "refused", c1, f"not a descendant of {c2}")
    again = fleet.run()  # refused again, said once
    assert again.returncode == 1 and "refused here" in again.stderr
    fleet.git("checkout", "-q", c2)
    c3 = fleet.commit("r3", sign=sign)  # forward again: the owner signs a new commit on c2
    fleet.tag(sign=sign)
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert fleet.applied_releases() == ["r1 ", "r2 ", "r3 "]
    assert (fleet.state / "applied").read_text().strip() == c3
    server.shutdown()


def test_a_branch_named_like_the_tag_does_not_move_a_rig_enrolled_on_the_tag(fleet):
    c1, c2 = fleet.applied_r1_then_r2()
    fleet.git("branch", "live", c1)  # refs/heads/live at c1, refs/tags/live still at c2
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert fleet.pull_state()["commit"] == c2
    assert fleet.applied_releases() == ["r1 ", "r2 "]
    assert (fleet.state / "applied").read_text().strip() == c2


def test_a_tag_named_like_the_branch_does_not_move_a_rig_enrolled_on_the_branch(fleet):
    c1 = fleet.commit("r1")
    fleet.git("branch", "live")
    fleet.settings("live", VDF_PULL_REF_KIND="branch")
    assert fleet.run().returncode == 0
    fleet.tag(c1)  # a signed tag named like the branch, left behind at c1
    fleet.git("checkout", "-q", "live")
    c2 = fleet.commit("r2")
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert (fleet.state / "applied").read_text().strip() == c2
    assert fleet.applied_releases() == ["r1 ", "r2 "]


def test_a_full_ref_names_its_kind(fleet):
    c1 = fleet.live_at("r1")
    fleet.commit("r-branch")
    fleet.git("branch", "live")  # a branch named like the tag, further on
    fleet.settings("refs/tags/live", VDF_PULL_REF_KIND="branch")  # the full ref wins
    assert fleet.run().returncode == 0
    assert (fleet.state / "applied").read_text().strip() == c1
    assert fleet.applied_releases() == ["r1 "]


def test_a_force_push_that_drops_the_applied_commit_is_refused(fleet):
    server = PutServer()
    c1 = fleet.commit("r1")
    fleet.settings("main", url=server.url(), VDF_PULL_REF_KIND="branch")
    assert fleet.run().returncode == 0
    c2 = fleet.commit("r2")
    assert fleet.run().returncode == 0
    fleet.git("reset", "-q", "--hard", c1)  # c2 dropped from the branch
    c3 = fleet.commit("r3")  # signed by the owner, on top of c1
    pull, _ = _moved_back(fleet, server, c3)
    assert pull["reason"] == f"not a descendant of {c2}"
    assert fleet.applied_releases() == ["r1 ", "r2 "]
    assert (fleet.state / "applied").read_text().strip() == c2
    server.shutdown()


def test_a_signer_removed_since_cannot_sign_on_top_of_the_commit_that_allowed_them(fleet):
    both = (f'owner namespaces="git" {fleet.keys.public("owner")}\n'
            f'stranger namespaces="git" {fleet.keys.public("stranger")}\n')
    owner_only = f'owner namespaces="git" {fleet.keys.public("owner")}\n'

    def signers(text):  # release.yml's signers_text, which the stand-in pull stage writes
        return "signers_text: |\n" + "".join(f"  {line}\n" for line in text.splitlines())

    c1 = fleet.live_at("r1", extra=signers(both))
    fleet.signers.write_text(both)  # the rig was enrolled with both
    assert fleet.run().returncode == 0
    c2 = fleet.commit("r2", extra=signers(owner_only))  # the owner removes the stranger
    fleet.tag()
    assert fleet.run().returncode == 0
    assert fleet.signers.read_text() == owner_only
    fleet.tag(c1)  # back to the commit that allowed the stranger
    assert fleet.run().returncode == 1
    assert fleet.signers.read_text() == owner_only  # nothing of c1 ran: no signer came back
    fleet.git("checkout", "-q", c1)
    c3 = fleet.commit("r3-evil", sign="stranger", extra=signers(both))
    fleet.tag()
    assert fleet.run().returncode == 1
    pull = fleet.pull_state()
    assert (pull["state"], pull["commit"]) == ("refused", c3)
    assert pull["reason"] == f"not a descendant of {c2}"
    assert fleet.applied_releases() == ["r1 ", "r2 "]
    assert (fleet.state / "applied").read_text().strip() == c2
    assert fleet.signers.read_text() == owner_only


PULL_PLAYBOOK = ROOT / "playbooks/pull.yml"
ENROLMENT_ONLY = ("pull-vars.yml", "vault-pass", "pull-enrolment.yml")


def pulled_pull_stage(tmp_path, group_vars: dict, enrolled: dict) -> tuple:
    """What a pulled run's pull stage writes of the rig's signers and settings: pull_mode.yml's
    own "Write ..." and "Record ..." tasks, under playbooks/pull.yml's own vars_files (the
    rig's enrolment file, then the fleet's group_vars from the checkout) and its
    _vllm_dual_fast_pulled_run, with /etc/vllm-dual-fast/ under tmp_path/etc. Returns that
    folder and the bytes of the files only an enrolment writes, as they were before the run."""
    etc, playbooks = tmp_path / "etc", tmp_path / "checkout/playbooks"
    group = tmp_path / "checkout/inventory/group_vars/rig3090"
    for folder in (etc, playbooks, group):
        folder.mkdir(parents=True)
    (group / "main.yml").write_text(yaml.safe_dump(group_vars))
    (etc / "pull-enrolment.yml").write_text(yaml.safe_dump(enrolled))
    (etc / "pull-vars.yml").write_text("vllm_dual_fast_max_num_batched_tokens: 2048\n")
    (etc / "vault-pass").write_text("the enrolment's vault password\n")
    before = {name: (etc / name).read_bytes() for name in ENROLMENT_ONLY}
    [pulled_play] = yaml.safe_load(PULL_PLAYBOOK.read_text())
    assert pulled_play["roles"][0]["vars"]["_vllm_dual_fast_pulled_run"] is True

    def here(path):
        return json.loads(json.dumps(path).replace("/etc/vllm-dual-fast/", f"{etc}/"))

    tasks = [t for t in yaml.safe_load(PULL_TASKS.read_text())
             if t["name"].startswith(("Write the allowed", "Write the fleet's vault password",
                                      "Write this rig's own variables", "Record the pull"))]
    assert len(tasks) == 5
    for task in tasks:
        task["ansible.builtin.copy"].update(owner=None, group=None,
                                            dest=here(task["ansible.builtin.copy"]["dest"]))
    play = [{"name": "A pulled run's pull stage", "hosts": "all", "gather_facts": False,
             "vars_files": here(pulled_play["vars_files"]),
             "vars": {"_vllm_dual_fast_pulled_run": True,
                      **{f"_vllm_dual_fast_pull_{name}_file": str(etc / file) for name, file in (
                          ("allowed_signers", "allowed_signers"),
                          ("gpg_keys", "pull-gpg-keys.asc"), ("vault_pass", "vault-pass"),
                          ("enrolment", "pull-enrolment.yml"))},
                      # What would change the enrolment's files, were a pulled run to write them.
                      "vllm_dual_fast_pull_vault_password": "a password from the fleet",
                      "vllm_dual_fast_pull_local_vars": {"vllm_dual_fast_max_num_seqs": 1},
                      "_vllm_dual_fast_pull_settings": {"vllm_dual_fast_pull_ref": "other"}},
             "tasks": tasks}]
    result, output = run_playbook(playbooks, play, inventory=("-i", "rig-a,", "-c", "local"))
    assert result.returncode == 0, output
    return etc, before


def test_a_pulled_commit_rotates_the_signers_and_the_new_signers_commit_applies(fleet, tmp_path):
    # The fleet scenario's signer rotation, moved here (issue 44): the owner adds a deputy in the
    # fleet's group_vars; the pulled run rewrites the rig's allowed signers from them (the
    # enrolment's list loses) and leaves what only an enrolment writes as it was; a commit the
    # deputy signs then applies.
    owner = {"name": "owner", "ssh_key": fleet.keys.public("owner")}
    deputy = {"name": "deputy", "ssh_key": fleet.keys.public("stranger")}
    etc, enrolled = pulled_pull_stage(
        tmp_path / "rotation", {"vllm_dual_fast_pull_allowed_signers": [owner, deputy]},
        {"vllm_dual_fast_pull_allowed_signers": [owner], "vllm_dual_fast_pull_gpg_keys": []})
    assert {name: (etc / name).read_bytes() for name in ENROLMENT_ONLY} == enrolled
    rotated = (etc / "allowed_signers").read_text()
    assert [line.split()[0] for line in rotated.splitlines()] == ["owner", "deputy"]
    fleet.live_at("r1")
    assert fleet.run().returncode == 0
    # The rotating commit carries what its pull stage writes (the stand-in writes it).
    rotation = fleet.commit("r2", extra="signers_text: |\n" + "".join(
        f"  {line}\n" for line in rotated.splitlines()))
    fleet.tag()
    assert fleet.run().returncode == 0
    assert fleet.signers.read_text() == rotated
    assert fleet.pull_state()["commit"] == rotation
    by_deputy = fleet.commit("r3", sign="stranger")
    fleet.tag()
    run = fleet.run()
    assert run.returncode == 0, run.stdout + run.stderr
    pull = fleet.pull_state()
    assert (pull["state"], pull["commit"]) == ("applied", by_deputy)
    assert pull["signer"].startswith("deputy SHA256:"), pull["signer"]
    assert fleet.applied_releases() == ["r1 ", "r2 ", "r3 "]


def test_a_commit_the_ref_pins_by_hash_must_descend_too(fleet):
    c1, c2 = fleet.applied_r1_then_r2()
    fleet.settings(c1)  # pinned to the older commit's hash
    assert fleet.run().returncode == 1
    assert fleet.pull_state()["reason"] == f"not a descendant of {c2}"
    fleet.settings(c2)
    assert fleet.run().returncode == 0
    assert fleet.applied_releases() == ["r1 ", "r2 "]


ENROLMENT_PIN_TASKS = ("Resolve the ref to the commit this enrolment pins",
                       "Stop an enrolment without a commit to pin",
                       "Pin the enrolment's commit", "Forget the commit last applied")


def enrolment_pin_play(fleet, pulled_run, anchor_repo=None, **more):
    """pull_mode.yml's own tasks that pin the ref's commit and forget the one last applied, on
    this fleet's state, with vars/main.yml's own expressions of the ref and the pin; the
    controller's clone is the fleet repository itself unless anchor_repo says otherwise."""
    tasks = [t for t in yaml.safe_load(PULL_TASKS.read_text())
             if t["name"].startswith(ENROLMENT_PIN_TASKS)]
    assert len(tasks) == len(ENROLMENT_PIN_TASKS)
    role_vars = yaml.safe_load(ROLE_VARS.read_text())
    return [{"name": "An enrolment" if not pulled_run else "A pulled run", "hosts": "all",
             "gather_facts": False,
             "vars": {"_vllm_dual_fast_pull_state_dir": str(fleet.state),
                      "_vllm_dual_fast_pulled_run": pulled_run,
                      "vllm_dual_fast_pull_ref": "live", "vllm_dual_fast_pull_ref_kind": "tag",
                      "vllm_dual_fast_pull_anchor": "",
                      "vllm_dual_fast_pull_anchor_repo": str(anchor_repo or fleet.repo),
                      **{k: role_vars[k] for k in ("_vllm_dual_fast_pull_full_ref",
                                                   "_vllm_dual_fast_pull_pin")},
                      **more},
             "tasks": tasks}]


@pytest.mark.parametrize("pulled_run", [False, True])
def test_only_an_enrolment_resets_the_commit_counted_as_applied(fleet, tmp_path, pulled_run):
    c1, _ = fleet.applied_r1_then_r2()
    fleet.tag(c1)  # the owner moves the tag back on purpose, then enrols the rig again
    (tmp_path / "play").mkdir()
    result, output = run_playbook(tmp_path / "play", enrolment_pin_play(fleet, pulled_run))
    assert result.returncode == 0, output
    run = fleet.run()
    if pulled_run:  # a pulled run never resets it: still refused
        assert run.returncode == 1 and fleet.pull_state()["state"] == "refused"
        assert fleet.applied_releases() == ["r1 ", "r2 "]
        assert not (fleet.state / "anchor").exists()
    else:  # the owner enrolled the rig again: it takes the ref as the controller saw it
        assert run.returncode == 0, run.stdout + run.stderr
        assert fleet.applied_releases() == ["r1 ", "r2 ", "r1 "]
        assert (fleet.state / "applied").read_text().strip() == c1
        assert (fleet.state / "anchor").read_text().strip() == c1


def test_after_an_enrolment_an_older_commit_the_host_serves_is_refused(fleet, tmp_path):
    # Re-enrolment used to forget the forward-only anchor: the first run after it took any
    # signed commit the host served. The controller now pins what it resolves for the ref.
    c1, c2 = fleet.applied_r1_then_r2()
    (tmp_path / "play").mkdir()
    result, output = run_playbook(tmp_path / "play", enrolment_pin_play(fleet, False))
    assert result.returncode == 0, output
    assert (fleet.state / "anchor").read_text().strip() == c2
    assert not (fleet.state / "applied").exists()
    fleet.tag(c1)  # the host serves the older signed release to the freshly enrolled rig
    run = fleet.run()
    assert run.returncode == 1
    pull = fleet.pull_state()
    assert (pull["state"], pull["commit"]) == ("refused", c1)
    assert pull["reason"] == f"not a descendant of {c2}, the commit pinned at enrolment"
    assert fleet.applied_releases() == ["r1 ", "r2 "]
    fleet.tag(c2)
    assert fleet.run().returncode == 0
    assert fleet.applied_releases() == ["r1 ", "r2 ", "r2 "]


def test_an_enrolment_whose_controller_cannot_resolve_the_ref_stops_before_any_change(
        fleet, tmp_path):
    c1, c2 = fleet.applied_r1_then_r2()
    empty = tmp_path / "owners-clone"
    subprocess.run(["git", "init", "-q", str(empty)], check=True)
    (tmp_path / "play").mkdir()
    result, output = run_playbook(tmp_path / "play",
                                  enrolment_pin_play(fleet, False, anchor_repo=empty))
    assert result.returncode != 0
    assert "An enrolment pins the commit refs/tags/live names on the controller" in output
    assert (fleet.state / "applied").read_text().strip() == c2  # nothing changed
    assert not (fleet.state / "anchor").exists()
    # Given by hand, the pin is taken as it is.
    result, output = run_playbook(tmp_path / "play", enrolment_pin_play(
        fleet, False, anchor_repo=empty, vllm_dual_fast_pull_anchor=c1))
    assert result.returncode == 0, output
    assert (fleet.state / "anchor").read_text().strip() == c1


# --- steering and freezing: the tag must be signed as itself, and its signature expires ------


@pytest.mark.parametrize("how", ["lightweight", "unsigned", "stranger", "other-name",
                                 "tag-of-tag"])
def test_a_tag_not_signed_as_the_followed_tag_is_refused_and_nothing_of_it_runs(fleet, how):
    # The signature covers the commit, not the ref: anyone who can push could point the tag at
    # any owner-signed descendant, a work-in-progress commit included (tried here with real
    # git and ssh signatures before this check: the WIP commit was applied).
    fleet.live_at("r1")
    assert fleet.run().returncode == 0
    wip = fleet.commit("r2-wip")  # signed by the owner, named by no release
    if how == "lightweight":
        fleet.git("tag", "-f", "live", wip)
        reason = "live is a lightweight tag, not a signed annotated one (git tag -s)"
    elif how == "unsigned":
        fleet.tag(wip, sign=None)
        reason = "tag live: "
    elif how == "stranger":
        fleet.tag(wip, sign="stranger")
        reason = "tag live: "
    elif how == "other-name":
        other = fleet.tag(wip, name="wip-review")  # the owner's own signed tag of another name
        fleet.git("update-ref", "refs/tags/live", other)
        reason = "the tag under live was signed as wip-review"
    else:
        inner = fleet.tag(wip, name="inner")
        fleet.tag(inner)  # a signed "live" that names the tag "inner", not the commit
        reason = "the tag live names another tag, not the commit"
    run = fleet.run()
    assert run.returncode == 1
    pull = fleet.pull_state()
    assert (pull["state"], pull["commit"]) == ("refused", wip)
    assert pull["reason"].startswith(reason), pull["reason"]
    assert fleet.applied_releases() == ["r1 "]
    assert fleet.ansible_pull_calls() == 1
    fleet.tag(wip)  # the owner signs it as live: now it applies
    run = fleet.run()
    assert run.returncode == 0, run.stdout + run.stderr
    assert fleet.applied_releases() == ["r1 ", "r2-wip "]


def test_a_signature_past_its_valid_until_is_expired_until_the_owner_signs_again(fleet):
    server = PutServer()
    commit = fleet.live_at("r1", settings=dict(url=server.url()))
    assert fleet.run().returncode == 0
    # What a frozen host keeps serving: the tag as signed ten days ago, valid for a week.
    old = {"GIT_COMMITTER_DATE": f"{int(time.time()) - 10 * 86400} +0000"}
    until = utc_in(-3)
    fleet.tag(valid_until=until, env=old)
    run = fleet.run()
    assert run.returncode == 1
    assert f"expired at {until}" in run.stderr
    pull = uploaded(server)["pull"]
    assert (pull["state"], pull["commit"], pull["valid_until"]) == ("expired", commit, until)
    assert pull["reason"].startswith("the fleet's signature expired at ")
    assert pull["applied_commit"] == commit  # still serving what it applied
    assert fleet.ansible_pull_calls() == 1
    fleet.tag()  # re-signed at the same commit, valid for another week: a heartbeat
    run = fleet.run()
    assert run.returncode == 0, run.stdout + run.stderr
    pull = uploaded(server)["pull"]
    assert (pull["state"], pull["commit"]) == ("unchanged", commit)
    assert fleet.applied_releases() == ["r1 "]
    server.shutdown()


# Times as days from now, made in the test: a time in a parameter would give each pytest-xdist
# worker another test id, and xdist refuses to run workers that collected different tests.
@pytest.mark.parametrize(("kind", "commit_until", "tag_until", "reason"), [
    ("tag", VALID, None, "no signed Valid-Until (a YYYY-MM-DDTHH:MM:SSZ line in the tag's"),
    ("tag", VALID, "next tuesday", "no signed Valid-Until"),
    ("tag", VALID, 40, "is more than 31 days after it was signed"),
    ("branch", None, None, "no signed Valid-Until (a YYYY-MM-DDTHH:MM:SSZ line in the branch's"),
    ("branch", -1, None, "expired"),
], ids=["tag-without", "tag-not-a-time", "tag-too-far", "branch-without", "branch-past"])
def test_a_ref_without_a_signed_valid_until_in_bounds_applies_nothing(
        fleet, kind, commit_until, tag_until, reason):
    def when(until):
        return utc_in(until) if isinstance(until, int) else until

    commit = fleet.commit("r1", valid_until=when(commit_until))
    if kind == "tag":
        fleet.tag(valid_until=when(tag_until))
        fleet.settings("live")
    else:
        fleet.settings("main", VDF_PULL_REF_KIND="branch")
    run = fleet.run()
    assert run.returncode == 1
    pull = fleet.pull_state()
    assert pull["commit"] == commit
    assert reason in (pull["state"] if reason == "expired" else pull["reason"])
    assert fleet.applied_releases() == []


def sign_fleet_ref(fleet, *args):
    """scripts/sign-fleet-ref run by the owner in the fleet repository (signing as the owner)."""
    for key, value in (("user.name", "fleet"), ("user.email", "fleet@localhost"),
                       ("gpg.format", "ssh"),
                       ("user.signingkey", str(fleet.keys.folder / "owner"))):
        fleet.git("config", key, value)
    return subprocess.run([str(ROOT / "scripts/sign-fleet-ref"), *args], cwd=fleet.repo,
                          capture_output=True, text=True, check=False)


def test_the_owners_sign_tool_makes_the_tag_rigs_take_and_renews_it(fleet):
    commit = fleet.commit("r1")
    made = sign_fleet_ref(fleet, "-d", "14", "live")
    assert made.returncode == 0, made.stderr
    fleet.settings("live")
    run = fleet.run()
    assert run.returncode == 0, run.stdout + run.stderr
    pull = fleet.pull_state()
    assert (pull["state"], pull["commit"], pull["tag_signer"]) == ("applied", commit, "owner")
    until = time.mktime(time.strptime(pull["valid_until"], "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
    assert 13.9 * 86400 < until - time.time() <= 14 * 86400
    fleet.commit("r2-not-tagged")  # renewing re-signs the commit the tag names, not HEAD
    assert sign_fleet_ref(fleet, "-d", "7", "live").returncode == 0
    run = fleet.run()
    assert run.returncode == 0, run.stdout + run.stderr
    assert fleet.pull_state()["state"] == "unchanged"
    assert fleet.applied_releases() == ["r1 "]
    assert sign_fleet_ref(fleet, "-d", "40", "live").returncode == 0
    assert fleet.run().returncode == 1
    assert "more than 31 days" in fleet.pull_state()["reason"]
    assert sign_fleet_ref(fleet, "-d", "0", "live").returncode == 2


def test_a_rig_pinned_to_a_commit_hash_needs_no_valid_until(fleet):
    commit = fleet.commit("r1", valid_until=None)
    fleet.settings(commit)
    run = fleet.run()
    assert run.returncode == 0, run.stdout + run.stderr
    assert fleet.applied_releases() == ["r1 "]


# --- failures: before the switch retried, a failed release waits for the ref -----------------


def test_a_failed_release_is_recorded_as_release_failed(fleet):
    commit = fleet.live_at("r1", broken=True)
    assert fleet.run().returncode == 1
    pull = fleet.pull_state()
    assert (pull["state"], pull["commit"]) == ("release-failed", commit)
    assert (fleet.state / "failed").read_text().strip() == commit


def test_a_failure_before_the_switch_is_retried_with_a_growing_delay(fleet):
    commit = fleet.live_at("r1", extra="fails_before_switch: true\n",
                           settings=dict(VDF_PULL_RETRY_BASE_S=600))
    first = fleet.run()
    assert first.returncode == 1
    pull = fleet.pull_state()
    assert (pull["state"], pull["commit"], pull["attempts"]) == ("failed", commit, 1)
    assert "before the switch" in pull["reason"] and "next_try" in pull
    assert not (fleet.state / "failed").exists()  # not marked failed: tried again
    waiting = fleet.run()
    assert waiting.returncode == 1 and "next try in" in waiting.stderr
    assert fleet.ansible_pull_calls() == 1  # the delay is not over: nothing started
    key, attempts, next_try = (fleet.state / "retry").read_text().split()
    (fleet.state / "retry").write_text(f"{key} {attempts} 0\n")  # as if the delay passed
    before = time.time()
    assert fleet.run().returncode == 1
    assert fleet.ansible_pull_calls() == 2
    _, attempts, next_try = (fleet.state / "retry").read_text().split()
    assert attempts == "2" and int(next_try) - before >= 1200 - 5  # the delay doubled
    fleet.git("rm", "-q", "release.yml")
    fixed = fleet.commit("r1")  # the owner fixed the release; the ref moves
    fleet.tag()
    assert fleet.run().returncode == 0
    assert (fleet.state / "applied").read_text().strip() == fixed
    assert not (fleet.state / "retry").exists()


def test_a_change_of_the_rigs_pull_vars_applies_while_the_commit_stays(fleet):
    fleet.live_at("r1")
    assert fleet.run().returncode == 0
    assert fleet.run().returncode == 0
    fleet.pull_vars.write_text("vllm_dual_fast_max_num_seqs: 4\n")
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "applying live" in result.stdout
    assert fleet.applied_releases() == ["r1 ", "r1 "]


def test_a_release_failed_under_old_vars_is_tried_again_with_new_vars(fleet):
    fleet.live_at("r1", broken=True)
    assert fleet.run().returncode == 1
    assert fleet.run().returncode == 1
    fleet.pull_vars.write_text("vllm_dual_fast_max_num_seqs: 4\n")
    fleet.run()
    assert fleet.applied_releases() == ["r1 ", "r1 "]


# --- heartbeats and identity ------------------------------------------------------------------


def test_with_nothing_to_apply_a_health_check_refreshes_the_report(fleet):
    server = PutServer()
    fleet.live_at("r1", settings=dict(url=server.url(), VDF_PULL_CHECK_TIMEOUT_S=120))
    fleet.report.write_text(json.dumps({"host": "rig-a", "checked_at": "2020-01-01T00:00:00Z"}))
    assert fleet.run().returncode == 0
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "health check exit 0" in result.stdout
    sent = uploaded(server)
    assert sent["checked_at"] > "2026"  # a new checked_at, not 2020's
    assert sent["pull"]["state"] == "unchanged"
    server.shutdown()


HEALTH_SCHEMA = ROOT / "files/schemas/health-report.schema.json"


def test_a_heartbeat_whose_check_fails_uploads_the_new_unhealthy_report(fleet):
    # The fleet scenario's heartbeats after a crash and with a GPU lost, moved here (issue 44):
    # the check fails, and the run uploads the report that check wrote, not the one before it
    # (what the check writes: tests/unit/test_health_report.py, tests/integration/
    # test_gpu_facts.py).
    server = PutServer()
    commit = fleet.live_at("r1", settings=dict(url=server.url(), VDF_PULL_CHECK_TIMEOUT_S=120))
    assert fleet.run().returncode == 0
    assert fleet.run().returncode == 0
    before = uploaded(server)
    assert before["healthy"] is True and before["pull"]["check_rc"] == 0
    fleet.gpu_lost.write_text('{"fault": "gpu-lost"}')
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr  # nothing to apply: not failed
    assert "health check exit 0" not in result.stdout
    sent = uploaded(server)
    jsonschema.validate(sent, json.loads(HEALTH_SCHEMA.read_text()))
    assert sent["healthy"] is False and sent["checked_at"] > before["checked_at"]
    assert sent["release"] == before["release"] == "r1"  # the release serving, unhealthy
    [failure] = sent["failures"]
    assert failure["check"] == "preflight" and "cannot reach a GPU" in failure["line"]
    assert (sent["pull"]["state"], sent["pull"]["commit"]) == ("unchanged", commit)
    assert sent["pull"]["check_rc"] != 0
    assert fleet.applied_releases() == ["r1 "]
    server.shutdown()


def test_the_rig_is_named_by_its_settings_not_its_hostname(fleet):
    server = PutServer()
    fleet.live_at("r1", settings=dict(url=server.url(), VDF_PULL_RIG="club-rig-7"))
    assert fleet.run().returncode == 0
    (path,) = server.bodies
    assert path == "/reports/club-rig-7.json"
    assert uploaded(server, path)["host"] == "club-rig-7"
    assert "--inventory localhost,club-rig-7, --limit club-rig-7" in fleet.pulls.read_text()


# --- secrets: neither the repository token nor the report URL leaks ---------------------------

TOKEN = "ghp_fleetTOKEN0123456789"  # noqa: S105 (the test server's own)
SIGNATURE = "X-Amz-Signature=presignedSIG0123456789"


class AuthGitServer(http.server.ThreadingHTTPServer):
    """git's dumb HTTP transport over loopback, answering only with Basic auth fleet:TOKEN,
    each request a little slow so a test can see what runs meanwhile."""

    def __init__(self, git_dir: pathlib.Path):
        expected = "Basic " + base64.b64encode(f"fleet:{TOKEN}".encode()).decode()
        self.authorized = 0
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(git_dir), **kwargs)

            def do_GET(self):  # noqa: N802 (http.server's naming)
                time.sleep(0.2)
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="fleet"')
                    self.end_headers()
                    return
                server.authorized += 1
                super().do_GET()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


def _sample_ps(process, seen: set):
    while process.poll() is None:
        seen.update(
            subprocess.run(
                ["ps", "-eo", "args"], capture_output=True, text=True
            ).stdout.splitlines()
        )
        time.sleep(0.05)


def test_neither_the_repository_token_nor_the_report_url_reaches_argv_or_a_readable_file(fleet):
    fleet.commit("r1", extra="slow: 2\n")
    fleet.tag()
    fleet.git("update-server-info")  # the dumb transport's refs list
    git_server, reports = AuthGitServer(fleet.repo / ".git"), PutServer()
    port = git_server.server_address[1]
    report_url = f"{reports.url()}rig-a.json?X-Amz-Credential=fleet&{SIGNATURE}"
    fleet.settings(
        "live",
        url=report_url,
        repo=f"http://fleet:{TOKEN}@127.0.0.1:{port}/",
    )
    seen = set()
    process = fleet.start()
    _sample_ps(process, seen)
    out, err = process.communicate()
    assert process.returncode == 0, out + err
    assert git_server.authorized > 0  # git got the token, from the credentials file
    assert fleet.applied_releases() == ["r1 "]
    assert any("ansible-pull" in args for args in seen)  # the sampling saw the run
    for secret in (TOKEN, SIGNATURE):
        assert not [args for args in seen if secret in args]
        assert secret not in out + err  # the journal gets stdout and stderr
    assert [path for path in reports.bodies if SIGNATURE in path]  # the upload used the URL
    assert stat.S_IMODE(fleet.state.stat().st_mode) == 0o700
    assert stat.S_IMODE((fleet.state / "checkout").stat().st_mode) == 0o700
    holders = set()
    for path in fleet.state.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, path  # root's alone
            data = path.read_bytes()
            if TOKEN.encode() in data or SIGNATURE.encode() in data:
                holders.add(path.name)
    assert holders == {"git-credentials", "curl.conf"}
    for config in (fleet.state / "checkout/.git/config", fleet.state / "repo.git/config"):
        assert "127.0.0.1" not in config.read_text()  # no remote URL kept, with or without token
    git_server.shutdown()
    reports.shutdown()


# --- the role's own checks of pull mode's variables (tasks/pull_mode.yml) ---------------------

PULL_TASKS = ROOT / "roles/vllm_dual_fast/tasks/pull_mode.yml"
ROLE_VARS = ROOT / "roles/vllm_dual_fast/vars/main.yml"
SSH_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFleetOwnerKeyForTheTestOnly0123456789abcd owner"
GOOD = {
    "vllm_dual_fast_pull_repo_url": "https://git.example.org/club/fleet.git",
    "vllm_dual_fast_pull_ref": "fleet-live",
    "vllm_dual_fast_pull_allowed_signers": [{"name": "owner", "ssh_key": SSH_KEY}],
    "vllm_dual_fast_pull_gpg_keys": [],
    "vllm_dual_fast_pull_ref_kind": "tag",
    "vllm_dual_fast_pull_report_url": "",
}


def _checks(tmp_path, **changes):
    """Runs pull_mode.yml's "Refuse ..." checks alone with GOOD's variables changed."""
    tasks = [t for t in yaml.safe_load(PULL_TASKS.read_text()) if t["name"].startswith("Refuse")]
    play = [
        {
            "name": "Pull mode's checks",
            "hosts": "all",
            "gather_facts": False,
            "vars": {**GOOD, **changes},
            "tasks": tasks,
        }
    ]
    result, output = run_playbook(tmp_path, play, inventory=("-i", "rig-a,", "-c", "local"))
    return result.returncode, output


@pytest.mark.parametrize(
    "url",
    [
        "https://git.example.org/club/fleet.git",
        "ssh://git@git.example.org/club/fleet.git",
        "git@git.example.org:club/fleet.git",
        "/srv/fleet",
    ],
)
def test_https_ssh_scp_like_and_local_urls_are_accepted(tmp_path, url):
    rc, output = _checks(tmp_path, vllm_dual_fast_pull_repo_url=url)
    assert rc == 0, output


@pytest.mark.parametrize(
    "url",
    [
        "http://git.example.org/club/fleet.git",
        "git://git.example.org/club/fleet.git",
        "file:///srv/fleet",
        "relative/fleet",
        "ftp://git.example.org/fleet",
    ],
)
def test_other_urls_are_refused(tmp_path, url):
    rc, output = _checks(tmp_path, vllm_dual_fast_pull_repo_url=url)
    assert rc != 0
    assert "http:// and git:// are refused" in output


@pytest.mark.parametrize(
    "changes",
    [
        {"vllm_dual_fast_pull_allowed_signers": []},
        {"vllm_dual_fast_pull_allowed_signers": [{"name": "two words", "ssh_key": SSH_KEY}]},
        {"vllm_dual_fast_pull_allowed_signers": [{"name": "owner", "ssh_key": "not a key"}]},
        {"vllm_dual_fast_pull_allowed_signers": [], "vllm_dual_fast_pull_gpg_keys": ["junk"]},
    ],
)
def test_pull_mode_without_a_valid_signer_is_refused(tmp_path, changes):
    rc, output = _checks(tmp_path, **changes)
    assert rc != 0
    assert "applies only signed commits" in output


@pytest.mark.parametrize("changes", [
    {"vllm_dual_fast_pull_ref": "refs/tags/fleet-live"},
    {"vllm_dual_fast_pull_ref": "refs/heads/main"},
    {"vllm_dual_fast_pull_ref": "main", "vllm_dual_fast_pull_ref_kind": "branch"},
    {"vllm_dual_fast_pull_ref": "ab" * 20},
    {"vllm_dual_fast_pull_report_url": "https://share.example.org/reports/rig-a.json?X-Sig=1"},
    {"vllm_dual_fast_pull_report_url": "https://share.example.org/reports/"},
])
def test_refs_of_one_kind_and_the_rigs_own_report_url_are_accepted(tmp_path, changes):
    rc, output = _checks(tmp_path, **changes)
    assert rc == 0, output


@pytest.mark.parametrize(("changes", "message"), [
    ({"vllm_dual_fast_pull_ref_kind": "either"}, "must be tag or branch"),
    ({"vllm_dual_fast_pull_ref": "refs/remotes/origin/live"}, "must be a tag or branch name"),
    ({"vllm_dual_fast_pull_ref": "fleet live"}, "must be a tag or branch name"),
    ({"vllm_dual_fast_pull_ref": "--upload-pack=x"}, "must be a tag or branch name"),
    ({"vllm_dual_fast_pull_report_url": "https://share.example.org/reports/rig-b.json"},
     "must end in /rig-a.json"),
    ({"vllm_dual_fast_pull_report_url": "https://share.example.org/all-reports.json"},
     "must end in /rig-a.json"),
])
def test_a_ref_of_no_one_kind_or_another_rigs_report_url_is_refused(tmp_path, changes, message):
    rc, output = _checks(tmp_path, **changes)
    assert rc != 0
    assert message in output


def test_a_gpg_key_alone_is_a_signer(tmp_path):
    armored = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ\n-----END PGP PUBLIC KEY BLOCK-----"
    rc, output = _checks(
        tmp_path, vllm_dual_fast_pull_allowed_signers=[], vllm_dual_fast_pull_gpg_keys=[armored]
    )
    assert rc == 0, output


def test_a_repository_that_cannot_be_fetched_is_a_failure_before_the_switch(fleet):
    fleet.live_at("r1", settings=dict(repo=str(fleet.tmp / "no-such-repository")))
    result = fleet.run()
    assert result.returncode == 1
    pull = fleet.pull_state()
    assert pull["state"] == "failed"
    assert pull["reason"].startswith("cannot fetch the fleet repository: ")
    assert fleet.ansible_pull_calls() == 0
    assert not (fleet.state / "failed").exists()
    fleet.settings("live")  # the repository is back
    assert fleet.run().returncode == 0
    assert fleet.applied_releases() == ["r1 "]


def test_a_rig_named_like_its_machine_checks_out_once(fleet):
    # ansible-pull's checkout step runs for every inventory host named like this machine or
    # localhost: the rig alone then, or two clones would race into one folder.
    fleet.live_at("r1", settings=dict(VDF_PULL_RIG=platform.node()))
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"--inventory {platform.node()}, " in fleet.pulls.read_text()
    assert fleet.applied_releases() == ["r1 "]


def test_each_rig_reads_only_its_own_vaulted_host_vars_with_its_own_vault_id(fleet):
    # The layout docs/pull-mode.md gives: host_vars/<rig>.yml vaulted with --vault-id <rig>@...
    (fleet.repo / "host_vars").mkdir()
    (fleet.repo / "host_vars/rig-a.yml").write_text(
        _vaulted("rig-a-token", fleet.tmp, "rig-a", RIG_A_PASSWORD)
    )
    (fleet.repo / "host_vars/rig-b.yml").write_text(
        _vaulted("rig-b-token", fleet.tmp, "rig-b", "rig-b-password")  # noqa: S106
    )
    fleet.live_at("r1", settings=dict(vault_pass=RIG_A_PASSWORD))
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert fleet.applied_releases() == ["r1 rig-a-token"]
    assert "--vault-id rig-a@" in fleet.pulls.read_text()


def render_signer_files(tmp_path, ssh_signers, gpg_keys):
    """pull_mode.yml's own "Write the allowed ..." tasks run into tmp_path: (allowed signers
    file, GPG keys file)."""
    tasks = [t for t in yaml.safe_load(PULL_TASKS.read_text())
             if t["name"].startswith("Write the allowed")]
    # A folder of its own: the fleet's files (Fleet.signers, Fleet.gpg_keys) are what the
    # script reads, and the test copies these onto them.
    (tmp_path / "role").mkdir()
    signers, keys = tmp_path / "role/allowed_signers", tmp_path / "role/pull-gpg-keys.asc"
    for task in tasks:
        task["ansible.builtin.copy"].update(owner=None, group=None)
    play = [{"name": "Pull mode's signer files", "hosts": "all", "gather_facts": False,
             "vars": {"_vllm_dual_fast_pull_allowed_signers_file": str(signers),
                      "_vllm_dual_fast_pull_gpg_keys_file": str(keys),
                      "vllm_dual_fast_pull_allowed_signers": ssh_signers,
                      "vllm_dual_fast_pull_gpg_keys": gpg_keys},
             "tasks": tasks}]
    result, output = run_playbook(tmp_path, play)
    assert result.returncode == 0, output
    return signers, keys


def test_the_roles_signer_files_verify_the_owners_commits(fleet, tmp_path):
    signers, gpg_keys = render_signer_files(
        tmp_path, [{"name": "owner", "ssh_key": fleet.keys.public("owner")},
                   {"name": "deputy", "ssh_key": SSH_KEY}], [fleet.keys.gpg_public()])
    assert stat.S_IMODE(signers.stat().st_mode) == 0o644
    fleet.commit("r1")
    fleet.tag(name="ssh")
    fleet.commit("r2", sign="gpg")
    fleet.tag(sign="gpg")
    fleet.settings("ssh")
    fleet.signers.write_text(signers.read_text())
    fleet.gpg_keys.write_text(gpg_keys.read_text())
    assert fleet.run().returncode == 0
    fleet.settings("live")
    fleet.signers.write_text(signers.read_text())
    fleet.gpg_keys.write_text(gpg_keys.read_text())
    assert fleet.run().returncode == 0
    assert fleet.applied_releases() == ["r1 ", "r2 "]


def test_ssh_signers_alone_verify_with_the_roles_empty_gpg_key_file(fleet, tmp_path):
    # What the role writes with vllm_dual_fast_pull_gpg_keys: [] (the fleet scenario's setting):
    # a file holding one newline, which gpg refuses to import ("no valid OpenPGP data"): every
    # run of a rig with SSH signers only failed on it.
    signers, gpg_keys = render_signer_files(
        tmp_path, [{"name": "owner", "ssh_key": fleet.keys.public("owner")}], [])
    fleet.live_at("r1")
    fleet.signers.write_text(signers.read_text())
    fleet.gpg_keys.write_text(gpg_keys.read_text())
    run = fleet.run()
    assert run.returncode == 0, run.stdout + run.stderr
    assert fleet.applied_releases() == ["r1 "]


def test_no_gpg_agent_outlives_a_run(fleet):
    fleet.live_at("r1", sign="gpg")
    assert fleet.run().returncode == 0
    home = str(fleet.state / "gnupg")
    agents = subprocess.run(["pgrep", "-f", f"gpg-agent --homedir {home}"], capture_output=True,
                            text=True, check=False)
    assert agents.stdout.strip() == "", "the pull run left a gpg-agent running"


def test_the_role_runs_under_the_usual_umask_not_the_scripts(fleet):
    # The script keeps its own files root's alone (umask 077); the role it applies installs
    # packages, writes release files and runs apt's scripts as a push run would, under 022.
    fleet.live_at("r1")
    assert fleet.run().returncode == 0
    assert (fleet.tmp / "ansible-pull-umask").read_text().strip() == "0022"
    assert stat.S_IMODE((fleet.state / "pull.json").stat().st_mode) == 0o600


# --- a rig speaks only for itself: its uploads are signed with its own key --------------------

fleet_report = load_file_module("fleet_report")
SIGNED_SCHEMA = ROOT / "files/schemas/signed-report.schema.json"


def rig_keys_file(fleet, **names) -> pathlib.Path:
    """The fleet's list of rig keys: {rig name: the key file whose public half it holds}."""
    path = fleet.tmp / "pull-rig-keys"
    path.write_text("".join(f'{rig} namespaces="vllm-dual-fast-report" '
                            f"{fleet.keys.public(key)}\n" for rig, key in names.items()))
    return path


def fleet_rows(tmp: pathlib.Path, uploads: dict, keys: pathlib.Path, pushed=None,
               more=()) -> dict:
    """files/fleet_report.py over pulled/<name> = body (and the pushed reports
    pushed/<name> = text, with more of its arguments): its JSON result."""
    pulled, reports, out = tmp / "pulled", tmp / "pushed", tmp / "out"
    for folder in (pulled, reports):
        folder.mkdir(parents=True)
    for name, body in uploads.items():
        (pulled / name).write_bytes(body)
    for name, text in (pushed or {}).items():
        (reports / name).write_text(text)
    assert fleet_report.main(["--reports", str(reports), "--pulled", str(pulled),
                              "--rig-keys", str(keys), "--out", str(out),
                              "--stale-after", "1e9", *more]) == 0
    [written] = out.glob("fleet-*.json")
    return json.loads(written.read_text())


def test_each_upload_is_signed_with_the_rigs_own_key_and_verifies_as_that_rig(fleet):
    server = PutServer()
    fleet.report.write_text(json.dumps({"host": "rig-a", "release": "r0", "healthy": True,
                                        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                    time.gmtime())}))
    fleet.live_at("r1", settings=dict(url=server.url()))
    assert fleet.run().returncode == 0
    body = server.bodies["/reports/rig-a.json"]
    envelope = json.loads(body)
    jsonschema.validate(envelope, json.loads(SIGNED_SCHEMA.read_text()))
    assert envelope["signature"].startswith("-----BEGIN SSH SIGNATURE-----")
    keys = rig_keys_file(fleet, **{"rig-a": "rig-a", "rig-b": "rig-b"})
    sig = fleet.tmp / "upload.sig"
    sig.write_text(envelope["signature"])
    verify = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(keys), "-I", "rig-a",
                             "-n", "vllm-dual-fast-report", "-s", str(sig)],
                            input=envelope["report"].encode(), capture_output=True, check=False)
    assert verify.returncode == 0, verify.stderr
    result = fleet_rows(fleet.tmp / "verified", {"rig-a.json": body}, keys)
    [row] = result["rows"]
    assert (row["host"], row["state"], row["verified"]) == ("rig-a", "healthy", True)
    assert row["pull_state"] == "applied"
    # The same upload under another rig's name speaks for no one.
    result = fleet_rows(fleet.tmp / "misnamed", {"rig-b.json": body}, keys)
    assert result["rows"] == []
    [apart] = result["not_verified"]
    assert apart["rig"] == "rig-b" and "signature does not verify" in apart["why"]
    # A rig whose key is not in the list (not enrolled) is listed apart too.
    result = fleet_rows(fleet.tmp / "stranger", {"rig-a.json": body},
                        rig_keys_file(fleet, **{"rig-a": "rig-b"}))
    assert result["rows"] == [] and "does not verify" in result["not_verified"][0]["why"]
    server.shutdown()


def test_a_rig_without_its_key_uploads_unsigned_and_counts_nowhere(fleet):
    server = PutServer()
    fleet.live_at("r1", settings=dict(url=server.url(),
                                      VDF_PULL_REPORT_KEY=fleet.tmp / "no-such-key"))
    result = fleet.run()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "uploading the report unsigned: this rig has no report key" in result.stderr
    body = server.bodies["/reports/rig-a.json"]
    envelope = json.loads(body)
    jsonschema.validate(envelope, json.loads(SIGNED_SCHEMA.read_text()))
    assert envelope["signature"] is None
    rows = fleet_rows(fleet.tmp / "report", {"rig-a.json": body},
                      rig_keys_file(fleet, **{"rig-a": "rig-a"}))
    assert rows["rows"] == [] and rows["not_verified"][0]["why"].startswith("unsigned")
    server.shutdown()


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def test_a_signed_refusal_counts_and_its_forgeries_are_listed_apart(fleet):
    # The fleet scenario's forgeries, moved here (issue 44): the rig's signed upload of a
    # refusal counts as its own; the same upload under a name the rig keys file lacks, and one
    # with the refusal made to read "applied" after signing, are listed apart, counted nowhere,
    # and the rig's row (from its pushed report) says its upload did not verify.
    server = PutServer()
    fleet.report.write_text(json.dumps({"host": "rig-a", "release": "r2", "healthy": True,
                                        "checked_at": now_utc()}))
    c1 = fleet.live_at("r1", settings=dict(url=server.url()))
    assert fleet.run().returncode == 0
    c2 = fleet.commit("r2")
    fleet.tag()
    assert fleet.run().returncode == 0
    fleet.tag(c1)
    assert fleet.run().returncode == 1  # not a descendant of c2: refused
    signed = server.bodies["/reports/rig-a.json"]
    envelope = json.loads(signed)
    changed = dict(envelope, report=envelope["report"].replace('"state": "refused"',
                                                               '"state": "applied"'))
    assert changed["report"] != envelope["report"]
    keys = rig_keys_file(fleet, **{"rig-a": "rig-a"})
    pushed = {"rig-a.json": json.dumps({"schema_version": 2, "host": "rig-a", "release": "r0",
                                        "checked_at": "2026-01-01T00:00:00Z", "healthy": True,
                                        "failures": []})}
    counted = fleet_rows(fleet.tmp / "signed", {"rig-a.json": signed}, keys, pushed)
    [row] = counted["rows"]
    assert (row["report_from"], row["verified"], row["state"]) == ("pulled", True,
                                                                   "pull-refused")
    assert f"not a descendant of {c2[:10]}" in row["reason"]
    assert counted["not_verified"] == []
    forged = fleet_rows(fleet.tmp / "forged", {"rig-b.json": signed,
                                               "rig-a.json": json.dumps(changed).encode()},
                        keys, pushed)
    why = {apart["file"]: apart["why"] for apart in forged["not_verified"]}
    assert sorted(why) == ["rig-a.json", "rig-b.json"]
    assert "not in the rig keys file" in why["rig-b.json"]
    assert "signature does not verify" in why["rig-a.json"]
    assert [r for r in forged["rows"] if r["report_from"] == "pulled"] == []
    assert [r for r in forged["rows"] if r["state"] == "pull-refused"] == []
    [row] = forged["rows"]
    assert row["host"] == "rig-a" and "uploaded report not verified" in (row["reason"] or "")
    server.shutdown()


def test_a_frozen_rigs_signed_upload_is_flagged_off_the_owners_newest_commit(fleet, capsys):
    # The fleet scenario's frozen tag and the fleet report against the owner's newest commit,
    # moved here (issue 44): the rig refuses the expired tag, keeps serving what it applied,
    # and the report of its signed upload names it as not on the ref's commit.
    server = PutServer()
    fleet.report.write_text(json.dumps({"host": "rig-a", "release": "r1", "healthy": True,
                                        "checked_at": now_utc()}))
    applied = fleet.live_at("r1", settings=dict(url=server.url()))
    assert fleet.run().returncode == 0
    old = {"GIT_COMMITTER_DATE": f"{int(time.time()) - 10 * 86400} +0000"}
    fleet.tag(valid_until=utc_in(-3), env=old)
    assert fleet.run().returncode == 1
    assert fleet.pull_state()["state"] == "expired"
    newest = fleet.commit("r2-wip")  # the owner's newest, which a frozen host withholds
    capsys.readouterr()
    result = fleet_rows(fleet.tmp / "report", {"rig-a.json": server.bodies["/reports/rig-a.json"]},
                        rig_keys_file(fleet, **{"rig-a": "rig-a"}),
                        more=("--ref-commit", newest, "--print"))
    printed = capsys.readouterr().out
    [row] = result["rows"]
    assert (row["state"], row["verified"], row["off_ref"]) == ("pull-refused", True, True)
    assert row["pull_applied_commit"] == applied
    assert f"Not on the ref's commit {newest[:12]}" in printed
    assert f"- rig-a: applied {applied[:12]}, pull expired" in printed
    assert fleet.applied_releases() == ["r1 "]
    server.shutdown()


def enrolment_key_play(tmp_path, pulled_run: bool, keys: pathlib.Path, key: pathlib.Path):
    """pull_mode.yml's own tasks that make the rig's key and add it to the controller's list."""
    names = ("Make this rig's own report-signing key", "Read its public half",
             "Add this rig's key to the fleet's list")
    tasks = [t for t in yaml.safe_load(PULL_TASKS.read_text()) if t["name"].startswith(names)]
    assert len(tasks) == 3
    return [{"name": "Enrol rig-a's key", "hosts": "all", "gather_facts": False,
             "vars": {"_vllm_dual_fast_pull_report_key": str(key),
                      "_vllm_dual_fast_pull_report_namespace": "vllm-dual-fast-report",
                      "vllm_dual_fast_pull_rig_keys_file": str(keys),
                      "_vllm_dual_fast_pulled_run": pulled_run},
             "tasks": tasks}]


def test_an_enrolment_makes_the_rigs_key_once_and_the_controller_lists_it(tmp_path):
    keys, key = tmp_path / "inventory/pull-rig-keys", tmp_path / "state/report-key"
    key.parent.mkdir()
    rig = ("-i", "rig-a,", "-c", "local")
    result, output = run_playbook(tmp_path, enrolment_key_play(tmp_path, True, keys, key),
                                  inventory=rig)
    assert result.returncode == 0, output
    assert not key.exists() and not keys.exists()  # a pulled run makes no key
    result, output = run_playbook(tmp_path, enrolment_key_play(tmp_path, False, keys, key),
                                  inventory=rig)
    assert result.returncode == 0, output
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    public = (tmp_path / "state/report-key.pub").read_text().strip()
    assert keys.read_text() == f'rig-a namespaces="vllm-dual-fast-report" {public}\n'
    first = key.read_bytes()
    keys.write_text('rig-b namespaces="vllm-dual-fast-report" ssh-ed25519 AAAA rig-b\n'
                    'rig-a namespaces="vllm-dual-fast-report" ssh-ed25519 AAAAold rig-a\n')
    result, output = run_playbook(tmp_path, enrolment_key_play(tmp_path, False, keys, key),
                                  inventory=rig)
    assert result.returncode == 0, output
    assert key.read_bytes() == first  # enrolled again: the same key, its line put right
    assert keys.read_text() == ('rig-b namespaces="vllm-dual-fast-report" ssh-ed25519 AAAA '
                                f'rig-b\nrig-a namespaces="vllm-dual-fast-report" {public}\n')


def test_the_rig_keys_file_defaults_to_the_checkouts_inventory_from_any_playbook(tmp_path):
    """An enrolment can run through site.yml (at the root) or a playbook under playbooks/: the
    fleet's list of rig keys is the checkout's inventory/pull-rig-keys either way, never a file
    beside whatever folder holds the playbook. A copy of the role, in a checkout of its own,
    reads its default in the role's context (where pull_mode.yml's task reads it) from a play in
    another folder."""
    checkout, elsewhere = tmp_path / "checkout", tmp_path / "elsewhere"
    role = checkout / "roles" / "vllm_dual_fast"
    shutil.copytree(ROOT / "roles" / "vllm_dual_fast", role)
    out = tmp_path / "rig-keys-path.txt"
    (role / "tasks" / "vdf_read_rig_keys_default.yml").write_text(yaml.safe_dump([{
        "name": "Write the default", "ansible.builtin.copy": {
            "dest": str(out), "mode": "0644",
            "content": "{{ vllm_dual_fast_pull_rig_keys_file }}"}}]))
    elsewhere.mkdir()
    play = [{"name": "Read the role's default", "hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": "In the role", "ansible.builtin.include_role": {
                 "name": "vllm_dual_fast", "tasks_from": "vdf_read_rig_keys_default"}}]}]
    result, output = run_playbook(elsewhere, play,
                                  env={"ANSIBLE_ROLES_PATH": str(checkout / "roles")})
    assert result.returncode == 0, output
    assert pathlib.Path(out.read_text()).resolve() == checkout / "inventory" / "pull-rig-keys"
