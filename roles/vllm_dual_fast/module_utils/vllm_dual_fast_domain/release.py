"""The serving release as one explicit object: which release a run deploys, which one serves,
which one last passed health (`last-good`), and what a failure falls back to.

The rig keeps two links beside the release folders: `current` (what Compose serves; it may move
before health) and `last-good` (moved only by a passed health check). A run that finds `current`
different from `last-good` treats the release as new: it is judged again (gates included) and a
failure goes back to `last-good`, so an interrupted switch is never taken as proven."""

import hashlib
import json
import posixpath
import re


def link_target(stat):
    """The release a link names, from ansible.builtin.stat's result or the release state
    module's link_stat ('' when it is not a link): the link's own text (lnk_target, made
    absolute against the link's folder), as the role wrote it under the configured data root.
    Not the resolved path (lnk_source): with the data root under a symbolic link that names
    another folder than the release this run renders, and every run would look new and prune
    could take `current` or `last-good` for an old release."""
    stat = (stat or {}).get("stat", stat) or {}
    if not stat.get("islnk"):
        return ""
    target = stat.get("lnk_target") or ""
    if not target:
        return stat.get("lnk_source", "")
    if not posixpath.isabs(target):
        target = posixpath.join(posixpath.dirname(stat.get("path", "")), target)
    return posixpath.normpath(target)


def adopted_last_good(current, legacy_report):
    """A rig set up before `last-good` existed: `current` counts as last good when the rig's
    report says that very release was healthy, else nothing does."""
    report = legacy_report or {}
    if (current and report.get("release") == posixpath.basename(current)
            and str(report.get("healthy")).lower() == "true"):
        return current
    return ""


def release_switch(inputs):
    """One run's switch: {release, current, last_good, last_good_link, is_new, rollback_to,
    fallback}. inputs: release (the folder this run renders), current and last_good (stat
    results of the two links), legacy_report (the rig's report.json, for rigs without
    `last-good`).

    fallback says what a failed health check does: "restore" `last-good` (it differs from the
    failed release), "recheck" (the failed release is the last good one: check it again after a
    settle time and keep it serving either way), or "stop" (no release on the rig ever passed)."""
    release = inputs["release"]
    current = link_target(inputs.get("current"))
    last_good_link = link_target(inputs.get("last_good"))
    last_good = last_good_link or adopted_last_good(current, inputs.get("legacy_report"))
    if not last_good:
        fallback = "stop"
    elif last_good == release:
        fallback = "recheck"
    else:
        fallback = "restore"
    return {
        "release": release,
        "current": current,
        "last_good": last_good,
        "last_good_link": last_good_link,
        "is_new": release != last_good,
        "rollback_to": last_good if fallback == "restore" else "",
        "fallback": fallback,
    }


def release_baseline(verdict, legacy_report, last_good):
    """The report a new release's speed is compared with: the last good release's own verdict
    report, else (a rig from before verdicts) the rig's report when it is that release's."""
    report = (verdict or {}).get("report") or {}
    if report.get("release") == posixpath.basename(last_good or "") and last_good:
        return report
    return legacy_report or {}


_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _image_repo(image):
    """The repository of an image reference, without tag or digest (`vllm/vllm-openai:v1` ->
    `vllm/vllm-openai`; a registry's port is kept: `host:5000/x:y` -> `host:5000/x`)."""
    name = str(image or "").split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return name[:len(name) - len(last)] + last.split(":", 1)[0]


def release_identity(read, image, revision):
    """What a release runs, named by content: {image_id, image_digest, model_commit}. read: the
    output of `docker image inspect --format '{{.Id}} {{json .RepoDigests}}' IMAGE` (first line;
    empty when the image is not there yet) and of the model revision's ref file in the hub
    cache (second line; the commit the branch or tag was resolved to at download). image_digest
    is the repo digest of this image's repository after a pull ('' for a loaded or built
    image: its id names it); model_commit is the revision itself when that is a commit hash,
    else the resolved ref ('' before the weights are downloaded)."""
    lines = str(read or "").splitlines() + ["", ""]
    head = lines[0].strip().split(" ", 1)
    image_id = head[0] if head[0].startswith("sha256:") else ""
    try:
        digests = json.loads(head[1]) if len(head) > 1 else []
    except ValueError:
        digests = []
    repo = _image_repo(image)
    digest = next((d.split("@", 1)[1] for d in digests or []
                   if isinstance(d, str) and "@" in d and d.split("@", 1)[0] == repo), "")
    ref = lines[1].strip()
    revision = str(revision or "")
    commit = revision if _COMMIT.match(revision) else (ref if _COMMIT.match(ref) else "")
    return {"image_id": image_id, "image_digest": digest, "model_commit": commit}


def image_reference(identity, image):
    """How a release's compose file names its image: by what it is, never by a tag that can move.
    `repo@sha256:...` where Docker knows a repo digest (after a pull), else the image's id
    (`sha256:...`: a loaded or built image), else the tag as given (nothing is known of it yet:
    a check run before the first pull). A rollback then starts the very image that was judged,
    whatever an owner's `docker pull` or `docker load` did to the tag since."""
    identity = identity or {}
    if identity.get("image_digest"):
        return f"{_image_repo(image)}@{identity['image_digest']}"
    return identity.get("image_id") or str(image)


def image_keep_tag(release):
    """The tag that keeps a release's image on the rig while the release folder is kept:
    `docker image prune` removes an image whose tag moved away (dangling), and the last good
    release must still be startable after an owner re-pulled its tag. prune.yml drops the tag
    with the folder."""
    return f"vllm-dual-fast-release:{posixpath.basename(str(release or '').rstrip('/'))}"


def release_name(files, identity):
    """A release folder's name: the first 16 hex digits of the sha256 of what it holds (its
    files) and what it runs (release_identity). The same files over a re-pulled tag or a moved
    model branch are another release, judged again."""
    text = json.dumps({"files": files, "runs": identity}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _true(value):
    return str(value).lower() == "true"


def release_manifest(cfg):
    """What a release is, written beside its files: the id (the folder's name), image, model and
    revision, patch setting, serve flags, where it listens, and when it was created. Rollback,
    verify and health read it instead of this run's variables or the compose file."""
    manifest = dict(cfg)
    manifest["release"] = posixpath.basename(cfg["release"])
    for key in ("patch_enabled", "api_key_set", "race_exposed"):
        manifest[key] = _true(cfg.get(key))
    for key in ("port", "max_num_seqs"):
        manifest[key] = int(cfg[key])
    # Where health and smoke reach the engine itself: 127.0.0.1:engine_port behind the LAN
    # proxy (tasks/proxy.yml), else the published bind_address:port. A manifest written before
    # the proxy has neither key: its readers fall back to bind_address and port the same way.
    manifest["engine_port"] = int(cfg.get("engine_port", cfg["port"]))
    manifest["engine_address"] = cfg.get("engine_address") or cfg.get("bind_address", "127.0.0.1")
    return manifest


def release_verdict(report, healthy_at):
    """A passed health check, as the release folder keeps it: when, which gates, the report."""
    return {
        "release": report.get("release"),
        "healthy_at": healthy_at,
        "canary": report.get("canary", False),
        "gates": report.get("gates") or {},
        "report": report,
    }
