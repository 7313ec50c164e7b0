#!/usr/bin/python
"""Read what APT and dpkg hold on the rig, in one module run (was: up to four tasks in
driver.yml, driver_holds.yml and container_stack.yml, each a round trip to the rig, on every
run: `apt-mark showhold`, `dpkg-query --show`, once per URL a grep of the apt sources, and the
slurp of the role's record of its holds).

It only reads. What the readings mean stays in the role's filters and tasks (driver_holds.yml,
container_stack.yml, driver_cuda_repo.yml): each command's reading is returned as the command
task it replaces registered it, and each file as {path, exists, content}."""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_dual_fast_command import run_command

DOCUMENTATION = r"""
module: vllm_dual_fast_apt_reads
short_description: Read APT's holds, dpkg's installed packages, the owner's apt sources and files
options:
  read:
    description: What to read with APT's and dpkg's own commands (held, installed).
    type: list
    elements: str
    default: []
  owner_source_urls:
    description: >-
      Repository URLs to look for in the owner's apt sources (not the role's own
      vllm-dual-fast-* files); one result per URL, in order.
    type: list
    elements: str
    default: []
  apt_dir:
    description: The apt configuration folder whose sources are searched.
    type: path
    default: /etc/apt
  files:
    description: Small text files to read (the role's records); a missing one is exists false.
    type: list
    elements: path
    default: []
"""

RETURN = r"""
held:
  description: "{rc, stdout, ...} of apt-mark showhold"
  type: dict
installed:
  description: >-
    {rc, stdout, ...} of dpkg-query --show --showformat='${db:Status-Status} ${Package}\\n'
  type: dict
owner_sources:
  description: >-
    One {rc, stdout, ...} of grep -rlF per URL, in owner_source_urls' order: stdout names the
    owner's source files that mention the URL (rc 1 and no stdout when none does).
  type: list
files:
  description: "One {path, exists (bool), content (text, '' when missing)} per file, in order"
  type: list
"""

HELD = ["apt-mark", "showhold"]
INSTALLED = ["dpkg-query", "--show", "--showformat=${db:Status-Status} ${Package}\\n"]
MAX_FILE_BYTES = 1024 * 1024


def owner_source_search(url, apt_dir):
    """The grep that finds an owner's own source of `url`: Docker's and NVIDIA's install
    documents write docker.list / nvidia-container-toolkit.list (NVIDIA's with `$(ARCH)` in the
    URI), cuda-keyring writes cuda-<distro>-<arch>.list, and deb822 files are *.sources."""
    bare = url.rstrip("/")
    by_arch = bare[: -len(bare.rsplit("/", 1)[-1])] + "$(ARCH)" if bare.endswith(
        ("/amd64", "/arm64")) else bare
    return ["grep", "-rlF", "--include=sources.list", "--include=*.list", "--include=*.sources",
            "--exclude=vllm-dual-fast-*", "-e", bare, "-e", by_arch, apt_dir]


def read_file(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return {"path": path, "exists": True, "content": handle.read(MAX_FILE_BYTES)}
    except FileNotFoundError:
        return {"path": path, "exists": False, "content": ""}


def read_apt(read=(), owner_source_urls=(), apt_dir="/etc/apt", files=(), runner=run_command):
    found = {}
    if "held" in read:
        found["held"] = runner(HELD, 60)
    if "installed" in read:
        found["installed"] = runner(INSTALLED, 60)
    if owner_source_urls:
        found["owner_sources"] = [runner(owner_source_search(url, apt_dir), 60)
                                  for url in owner_source_urls]
    if files:
        found["files"] = [read_file(path) for path in files]
    return found


def failed_reading(found):
    """The first reading that failed as its task would have failed: dpkg and apt-mark not
    answering, or grep's error (rc 2; rc 1 is 'no match')."""
    for name in ("held", "installed"):
        if name in found and found[name]["rc"] != 0:
            return f"{' '.join(found[name]['cmd'][:2])} failed: {found[name]['stderr'][:300]}"
    for search in found.get("owner_sources", []):
        if search["rc"] > 1:
            return f"searching the apt sources failed: {search['stderr'][:300]}"
    return ""


def main():
    module = AnsibleModule(
        argument_spec={
            "read": {"type": "list", "elements": "str", "default": [],
                     "choices": ["held", "installed"]},
            "owner_source_urls": {"type": "list", "elements": "str", "default": []},
            "apt_dir": {"type": "path", "default": "/etc/apt"},
            "files": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        found = read_apt(params["read"], params["owner_source_urls"], params["apt_dir"],
                         params["files"])
    except (OSError, UnicodeDecodeError) as err:
        module.fail_json(msg=f"reading a file failed: {err}")
    failure = failed_reading(found)
    if failure:
        module.fail_json(msg=failure, **found)
    module.exit_json(changed=False, **found)


if __name__ == "__main__":
    main()
