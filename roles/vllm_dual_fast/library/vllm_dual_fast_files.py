#!/usr/bin/python
"""Write a set of small files under one folder in one module run.

A release is about ten small files; written by a loop of `copy` tasks they cost a module run
each (most of an unchanged run's time on stock Ansible). This module compares each file's bytes,
mode and owner with what is asked and rewrites only those that differ, each through a temporary
file in the same folder renamed over the old one (never half-written). Files marked `keep`
are written only when absent (a manifest that keeps its first created_at); a file with a
`validate` command is checked in its temporary copy first, and nothing is replaced when the check
fails. `links` puts symbolic links in place (systemd's wants/ links that enable a unit without
a daemon-reload). With `keep_existing_folders` a folder that exists is left as it is (system
folders such as /usr/local/sbin), and only missing ones are made."""

import grp
import os
import pwd
import shlex
import subprocess
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
    description: >-
      Relative path to C({content, mode, keep, validate}); C(keep) true writes only an absent
      file; C(validate) is a command run on the temporary copy (C(%s)) before it replaces the file.
    type: dict
    required: true
  links:
    description: Relative path of a symbolic link to the absolute path it names.
    type: dict
    default: {}
  keep_existing_folders:
    description: >-
      Leave folders that exist as they are and make only missing ones (with dir_mode), but for
      those named in C(folders).
    type: bool
    default: false
  folders:
    description: Relative folders made and kept at dir_mode and the owner, whatever else is kept.
    type: list
    elements: str
    default: []
  owner: {description: Owner of the files and folders., type: str, default: root}
  group: {description: Group of the files and folders., type: str, default: root}
  dir_mode: {description: Mode of the folders it creates or finds., type: str, default: "0755"}
"""

RETURN = r"""
written: {description: The relative paths written (or that would be in check mode)., type: list}
existed: {description: The relative paths of the files that were there before this run., type: list}
linked: {description: The links put in place (or that would be in check mode)., type: list}
"""


def wanted_files(files):
    """{relative path: (bytes, mode int, keep, validate)} from the module's `files`; refuses a
    path that leaves the root."""
    wanted = {}
    for rel, spec in files.items():
        content = str(spec.get("content", "")).encode()
        mode = int(str(spec.get("mode", "0644")), 8)
        wanted[inside(rel)] = (content, mode, bool(spec.get("keep", False)),
                               str(spec.get("validate") or ""))
    return wanted


def inside(rel):
    """rel normalised, refused when it leaves the root."""
    norm = os.path.normpath(rel)
    if os.path.isabs(norm) or norm == ".." or norm.startswith("../") or norm == ".":
        raise ValueError(f"{rel!r} is not a path inside the root")
    return norm


def link_needs_setting(path, target):
    """Whether path is not yet a symbolic link naming target."""
    return not (os.path.islink(path) and os.readlink(path) == target)


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


class ValidationFailed(Exception):
    """A file's validate command refused its new content."""


def write_atomically(path, content, mode, uid, gid, validate=""):
    folder = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".vdf-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        os.chown(tmp, uid, gid)
        os.chmod(tmp, mode)
        if validate:
            argv = [tmp if word == "%s" else word for word in shlex.split(validate)]
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                said = (done.stderr or done.stdout).strip()[:400]
                raise ValidationFailed(f"{path}: its validate command refused it"
                                       f" (exit {done.returncode}): {said}")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def folder_differs(path, mode, uid, gid):
    st = os.stat(path)
    return (st.st_mode & 0o7777) != mode or st.st_uid != uid or st.st_gid != gid


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
            "links": {"type": "dict", "default": {}},
            "keep_existing_folders": {"type": "bool", "default": False},
            "folders": {"type": "list", "elements": "str", "default": []},
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
    try:
        links = {inside(rel): target for rel, target in params["links"].items()}
        owned = {os.path.join(root, inside(rel)) for rel in params["folders"]}
    except ValueError as error:
        module.fail_json(msg=f"vllm_dual_fast_files: {error}")
    folders = sorted({root} | owned | {os.path.dirname(os.path.join(root, rel))
                                       for rel in list(wanted) + list(links)})
    existed = [rel for rel in sorted(wanted) if os.path.lexists(os.path.join(root, rel))]
    written = [rel for rel, (content, mode, keep, _) in sorted(wanted.items())
               if needs_write(os.path.join(root, rel), content, mode, uid, gid, keep)]
    linked = [rel for rel, target in sorted(links.items())
              if link_needs_setting(os.path.join(root, rel), target)]
    folders_changed = [f for f in folders if not os.path.isdir(f)
                       or (f in owned and folder_differs(f, dir_mode, uid, gid))]
    if module.check_mode:
        module.exit_json(changed=bool(written or linked or folders_changed), written=written,
                         existed=existed, linked=linked)
    if params["keep_existing_folders"]:
        changed_folders = [f for f in folders_changed if ensure_folder(f, dir_mode, uid, gid)]
    else:
        changed_folders = [f for f in folders if ensure_folder(f, dir_mode, uid, gid)]
    try:
        for rel in written:
            content, mode, _, validate = wanted[rel]
            write_atomically(os.path.join(root, rel), content, mode, uid, gid, validate)
    except ValidationFailed as error:
        module.fail_json(msg=f"vllm_dual_fast_files: {error}; nothing of it was replaced")
    for rel in linked:
        path = os.path.join(root, rel)
        if os.path.lexists(path):
            os.unlink(path)
        os.symlink(links[rel], path)
    module.exit_json(changed=bool(written or linked or changed_folders), written=written,
                     existed=existed, linked=linked)


if __name__ == "__main__":
    main()
