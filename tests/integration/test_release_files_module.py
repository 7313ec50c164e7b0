"""The module that writes a set of files in one run (library/vllm_dual_fast_files.py): a
release's files, and the engine guard's and the metrics collector's under /. Only what differs
is rewritten, what drifted is put back, a kept file stays, nothing is written in check mode, a
path may not leave the root, a file's content never reaches the output, a file its validate
command refuses replaces nothing, links are put back, and folders that exist are left alone
unless the role owns them."""

import base64
import grp
import importlib.util
import json
import os
import pwd

import pytest
from ansible_runner import ROLE, run_playbook

_PATH = ROLE / "library/vllm_dual_fast_files.py"
_spec = importlib.util.spec_from_file_location("vdf_files", _PATH)
files_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(files_module)

SECRET = "sk-not-for-logs-7f3a"  # noqa: S105 (a test string that must not reach the output)
OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def _files(**changes):
    files = {
        "compose.yml": {"content": "services: {}\n", "mode": "0644"},
        "api-key": {"content": SECRET, "mode": "0600"},
        "checks/patcher.py": {"content": "print('check')\n", "mode": "0644"},
        "manifest.json": {"content": '{"created_at": "first"}\n', "mode": "0644", "keep": True},
    }
    files.update(changes)
    return files


def _write(tmp_path, root, files, check=False, **options):
    task = {"vllm_dual_fast_files": {"root": str(root), "files": files, "owner": OWNER,
                                     "group": GROUP, **options},
            "register": "written"}
    plays = [{"hosts": "localhost", "gather_facts": False,
              "tasks": [task, {"ansible.builtin.debug": {
                  "msg": "WRITTEN={{ written | to_json | b64encode }}"}}]}]
    result, out = run_playbook(tmp_path, plays, env={"ANSIBLE_LIBRARY": str(ROLE / "library")},
                               args=["--check"] if check else [])
    line = next((ln for ln in out.splitlines() if "WRITTEN=" in ln), None)
    if line is None:
        return result, out, None
    encoded = line.split("WRITTEN=", 1)[1].strip().strip('"')
    return result, out, json.loads(base64.b64decode(encoded))


def test_first_run_writes_all_then_nothing_and_drift_is_put_back(tmp_path):
    root = tmp_path / "release"
    result, out, written = _write(tmp_path, root, _files())
    assert result.returncode == 0, out
    assert written["changed"] and sorted(written["written"]) == sorted(_files())
    assert (root / "api-key").read_text() == SECRET
    assert oct((root / "api-key").stat().st_mode & 0o777) == "0o600"
    assert (root / "checks").is_dir()
    assert SECRET not in out

    result, out, written = _write(tmp_path, root, _files())
    assert result.returncode == 0 and not written["changed"] and written["written"] == [], out

    (root / "compose.yml").unlink()                       # removed by hand
    (root / "checks/patcher.py").write_text("edited\n")   # edited by hand
    os.chmod(root / "api-key", 0o644)                     # opened up by hand
    result, out, written = _write(tmp_path, root, _files())
    assert written["changed"]
    assert sorted(written["written"]) == ["api-key", "checks/patcher.py", "compose.yml"]
    assert (root / "compose.yml").read_text() == "services: {}\n"
    assert (root / "checks/patcher.py").read_text() == "print('check')\n"
    assert oct((root / "api-key").stat().st_mode & 0o777) == "0o600"
    assert not list(root.glob(".vdf-*")), "a temporary file was left behind"


def test_a_kept_file_keeps_its_first_content(tmp_path):
    root = tmp_path / "release"
    _write(tmp_path, root, _files())
    later = _files(**{"manifest.json": {"content": '{"created_at": "later"}\n', "mode": "0644",
                                        "keep": True}})
    result, out, written = _write(tmp_path, root, later)
    assert result.returncode == 0 and not written["changed"], out
    assert json.loads((root / "manifest.json").read_text())["created_at"] == "first"


def test_check_mode_reports_what_it_would_write_and_writes_nothing(tmp_path):
    root = tmp_path / "release"
    result, out, written = _write(tmp_path, root, _files(), check=True)
    assert result.returncode == 0, out
    assert written["changed"] and len(written["written"]) == len(_files())
    assert not root.exists()


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "checks/../../escape", "."])
def test_a_path_outside_the_root_is_refused(path):
    with pytest.raises(ValueError, match="is not a path inside the root"):
        files_module.wanted_files(_files(**{path: {"content": "x", "mode": "0644"}}))


def test_the_module_refuses_it_before_anything_is_written(tmp_path):
    root = tmp_path / "release"
    escaping = _files(**{"../escape": {"content": "x", "mode": "0644"}})
    result, out, _ = _write(tmp_path, root, escaping)
    assert result.returncode != 0
    assert "is not a path inside the root" in out
    assert not root.exists() and not (tmp_path / "escape").exists()


def test_needs_write_compares_bytes_mode_and_owner(tmp_path):
    path = tmp_path / "f"
    uid, gid = os.getuid(), os.getgid()
    assert files_module.needs_write(str(path), b"a", 0o644, uid, gid, False)
    path.write_bytes(b"a")
    os.chmod(path, 0o644)
    assert not files_module.needs_write(str(path), b"a", 0o644, uid, gid, False)
    assert files_module.needs_write(str(path), b"b", 0o644, uid, gid, False)     # same size
    assert files_module.needs_write(str(path), b"a", 0o600, uid, gid, False)
    assert files_module.needs_write(str(path), b"a", 0o644, uid + 1, gid, False)
    assert not files_module.needs_write(str(path), b"b", 0o600, uid, gid, True)  # kept
    link = tmp_path / "link"
    link.symlink_to(path)
    assert files_module.needs_write(str(link), b"a", 0o644, uid, gid, False)


def test_a_file_its_validate_command_refuses_replaces_nothing(tmp_path):
    # The engine guard's script is checked with `sh -n` before it replaces the one in place: a
    # broken script must never be what Docker's drop-in runs at its next start.
    root = tmp_path / "sys"
    good = {"usr/local/sbin/guard": {"content": "#!/bin/sh\necho ok\n", "mode": "0755",
                                     "validate": "sh -n %s"}}
    result, out, written = _write(tmp_path, root, good)
    assert result.returncode == 0 and written["written"] == ["usr/local/sbin/guard"], out
    broken = {"usr/local/sbin/guard": {"content": "#!/bin/sh\nif then fi (\n", "mode": "0755",
                                       "validate": "sh -n %s"}}
    result, out, _ = _write(tmp_path, root, broken)
    assert result.returncode != 0 and "guard: its validate command refused it" in out, out
    assert (root / "usr/local/sbin/guard").read_text() == "#!/bin/sh\necho ok\n"
    assert not list((root / "usr/local/sbin").glob(".vdf-*")), "a temporary file was left"


def test_links_are_put_in_place_and_back_and_existed_names_what_was_there(tmp_path):
    root = tmp_path / "sys"
    unit = {"etc/systemd/system/x.timer": {"content": "[Timer]\n", "mode": "0644"}}
    wants = {"etc/systemd/system/timers.target.wants/x.timer": "/etc/systemd/system/x.timer"}
    result, out, written = _write(tmp_path, root, unit, links=wants)
    assert result.returncode == 0 and written["existed"] == [], out
    assert written["linked"] == list(wants)
    link = root / "etc/systemd/system/timers.target.wants/x.timer"
    assert os.readlink(link) == "/etc/systemd/system/x.timer"
    result, out, written = _write(tmp_path, root, unit, links=wants)
    assert not written["changed"] and written["existed"] == list(unit), out
    link.unlink()
    link.symlink_to("/elsewhere")                      # pointed elsewhere by hand
    result, out, written = _write(tmp_path, root, unit, links=wants)
    assert written["changed"] and written["linked"] == list(wants)
    assert os.readlink(link) == "/etc/systemd/system/x.timer"


def test_existing_folders_are_left_alone_but_the_role_s_own(tmp_path):
    # Under / the parents of a unit or script are the system's (/usr/local/sbin is 2775 on some
    # hosts): they must not be chmod-ed; the role's own folders are kept at 0755.
    root = tmp_path / "sys"
    (root / "usr/local/sbin").mkdir(parents=True)
    os.chmod(root / "usr/local/sbin", 0o2775)    # noqa: S103 (the folder as some hosts have it)
    (root / "usr/local/lib/vdf").mkdir(parents=True)
    os.chmod(root / "usr/local/lib/vdf", 0o700)
    files = {"usr/local/sbin/guard": {"content": "x\n", "mode": "0755"},
             "usr/local/lib/vdf/tool.py": {"content": "y\n", "mode": "0755"},
             "etc/new/settings.env": {"content": "z\n", "mode": "0644"}}
    result, out, written = _write(tmp_path, root, files, keep_existing_folders=True,
                                  folders=["usr/local/lib/vdf"])
    assert result.returncode == 0, out
    assert oct((root / "usr/local/sbin").stat().st_mode & 0o7777) == "0o2775"
    assert oct((root / "usr/local/lib/vdf").stat().st_mode & 0o7777) == "0o755"
    assert oct((root / "etc/new").stat().st_mode & 0o7777) == "0o755"    # made, as asked
    os.chmod(root / "usr/local/lib/vdf", 0o700)        # the role's own folder, drifted
    result, out, written = _write(tmp_path, root, files, keep_existing_folders=True,
                                  folders=["usr/local/lib/vdf"])
    assert written["changed"] and written["written"] == [], out
    assert oct((root / "usr/local/lib/vdf").stat().st_mode & 0o7777) == "0o755"
