#!/usr/bin/python
"""Read the rig's release state in one module run.

A deploy read it with two `stat` tasks (the `current` and `last-good` links) and three `slurp`
tasks each decoded in its own `set_fact` (the rig's last report, the last good release's verdict,
the speed reference); verify read `current` and its manifest the same way. This module reads all
of it at once and returns it parsed; the domain library's release module
(module_utils/vllm_dual_fast_domain/release.py: release_switch, release_baseline) decides from
it, as before, and names the folder each link names for both (link_target). It only reads."""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.vllm_dual_fast_domain.release import link_target

DOCUMENTATION = r"""
module: vllm_dual_fast_release_state
short_description: Read the rig's release links, reports and the linked releases' files
description:
  - Reads the C(current) and C(last-good) links as C(stat) does (islnk, lnk_target, lnk_source,
    path), the rig's last health report and speed reference, and for the release each link
    names its verdict.json and manifest.json. A file that is missing or not a JSON object reads
    as an empty object.
options:
  current_link: {description: The link to the release Compose serves., type: path, required: true}
  last_good_link:
    description: The link to the release that last passed health.
    type: path
    required: true
  report: {description: The rig's last health report (report.json)., type: path, required: true}
  speed_reference: {description: The rig's speed reference., type: path, required: true}
"""

RETURN = r"""
state:
  description: >-
    {current, last_good: a stat result's C(stat) of each link; current_release,
    last_good_release: the folder each names ('' when it is no link); report, speed_reference:
    the files' objects; releases: {release folder: {verdict, manifest}} for each link's target}.
  type: dict
"""


def link_stat(path):
    """What ansible.builtin.stat says of a link that the release filters read."""
    stat = {"path": path, "exists": os.path.lexists(path), "islnk": os.path.islink(path)}
    if stat["islnk"]:
        stat["lnk_target"] = os.readlink(path)
        stat["lnk_source"] = os.path.realpath(path)
    return stat


def json_object(path):
    """The JSON object in a file; {} when it is missing, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def read_state(current_link, last_good_link, report, speed_reference):
    links = {"current": link_stat(current_link), "last_good": link_stat(last_good_link)}
    releases = {}
    for stat in links.values():
        folder = link_target(stat)
        if folder and folder not in releases:
            releases[folder] = {"verdict": json_object(os.path.join(folder, "verdict.json")),
                                "manifest": json_object(os.path.join(folder, "manifest.json"))}
    return {**links, "current_release": link_target(links["current"]),
            "last_good_release": link_target(links["last_good"]), "report": json_object(report),
            "speed_reference": json_object(speed_reference), "releases": releases}


def main():
    module = AnsibleModule(
        argument_spec={
            "current_link": {"type": "path", "required": True},
            "last_good_link": {"type": "path", "required": True},
            "report": {"type": "path", "required": True},
            "speed_reference": {"type": "path", "required": True},
        },
        supports_check_mode=True,    # it only reads
    )
    params = module.params
    module.exit_json(changed=False, state=read_state(
        params["current_link"], params["last_good_link"], params["report"],
        params["speed_reference"]))


if __name__ == "__main__":
    main()
