#!/usr/bin/python
"""Write a set of small files under one folder in one module run.

A release is about ten small files; written by a loop of `copy` tasks they cost a module run
each (most of an unchanged run's time on stock Ansible). This module compares each file's bytes,
mode and owner with what is asked and rewrites only those that differ, each through a temporary
file in the same folder renamed over the old one (never half-written). Files marked `keep`
are written only when absent (a manifest that keeps its first created_at)."""

import grp
import os
import pwd
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: vllm_dual_fast_files
short_description: Write a set of small files under one folder, each only when it differs
description:
  - Creates I(root) and the folders the files need, then writes each file whose content, mode,
    owner or group differ from what is asked, atomically (temporary file and rename).
options:
  root: {description: The folder the files are written under., type: path, required: true}
  files:
    description: Relative path to C({content, mode, keep}); C(keep) true writes only an absent file.
    type: dict
    required: true
  owner: {description: Owner of the files and folders., type: str, default: root}
  group: {description: Group of the files and folders., type: str, default: root}
  dir_mode: {description: Mode of the folders it creates or finds., type: str, default: "0755"}
"""

RETURN = r"""
written: {description: The relative paths written (or that would be in check mode)., type: list}
"""


def wanted_files(files):
    """{relative path: (bytes, mode int, keep)} from the module's `files`; refuses a path that
    leaves the root."""
    wanted = {}
    for rel, spec in files.items():
        norm = os.path.normpath(rel)
        if os.path.isabs(norm) or norm == ".." or norm.startswith("../") or norm == ".":
            raise ValueError(f"{rel!r} is not a path inside the root")
        content = str(spec.get("content", "")).encode()
        mode = int(str(spec.get("mode", "0644")), 8)
        wanted[norm] = (content, mode, bool(spec.get("keep", False)))
    return wanted


def needs_write(path, content, mode, uid, gid, keep):
    """Whether the file at path must be (re)written to hold content with mode and owner."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return True
    if keep:
        return False
    if not os.path.isfile(path) or os.path.islink(path):
        return True
    if (st.st_mode & 0o7777) != mode or st.st_uid != uid or st.st_gid != gid:
        return True
    if st.st_size != len(content):
        return True
    with open(path, "rb") as handle:
        return handle.read() != content


def write_atomically(path, content, mode, uid, gid):
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".vdf-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chown(tmp, uid, gid)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def ensure_folder(path, mode, uid, gid):
    """Creates path (and its parents) when missing; returns whether it changed anything."""
    changed = False
    if not os.path.isdir(path):
        os.makedirs(path, mode=mode, exist_ok=True)
        changed = True
    st = os.stat(path)
    if (st.st_mode & 0o7777) != mode or st.st_uid != uid or st.st_gid != gid:
        os.chown(path, uid, gid)
        os.chmod(path, mode)
        changed = True
    return changed


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "files": {"type": "dict", "required": True, "no_log": True},
            "owner": {"type": "str", "default": "root"},
            "group": {"type": "str", "default": "root"},
            "dir_mode": {"type": "str", "default": "0755"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        wanted = wanted_files(params["files"])
        uid = pwd.getpwnam(params["owner"]).pw_uid
        gid = grp.getgrnam(params["group"]).gr_gid
    except (ValueError, KeyError) as error:
        module.fail_json(msg=f"vllm_dual_fast_files: {error}")
    dir_mode = int(params["dir_mode"], 8)
    root = params["root"]
    folders = sorted({root} | {os.path.dirname(os.path.join(root, rel)) for rel in wanted})
    written = [rel for rel, (content, mode, keep) in sorted(wanted.items())
               if needs_write(os.path.join(root, rel), content, mode, uid, gid, keep)]
    folders_changed = [f for f in folders if not os.path.isdir(f)]
    if module.check_mode:
        module.exit_json(changed=bool(written or folders_changed), written=written)
    changed_folders = [f for f in folders if ensure_folder(f, dir_mode, uid, gid)]
    for rel in written:
        content, mode, _ = wanted[rel]
        write_atomically(os.path.join(root, rel), content, mode, uid, gid)
    module.exit_json(changed=bool(written or changed_folders), written=written)


if __name__ == "__main__":
    main()
