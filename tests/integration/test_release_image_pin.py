"""What a release starts is what was judged (issue 42, item 1): the release's compose file names
its image by repo digest or id, never by a tag an owner's `docker pull` or `docker load` can move,
and a tag of the release's own keeps that image through `docker image prune` while the release is
kept. The functions are the role's (module_utils/vllm_dual_fast_domain/release.py); the Docker part
runs on the engine `make setup` starts, with images the test makes and removes."""

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.vllm_dual_fast_domain import release
from docker_engine import docker
from test_release_secrets import render, role_vars

ROOT = Path(__file__).parents[2]
IMAGE_ID = "sha256:" + "1" * 64
DIGEST = "sha256:" + "2" * 64


@pytest.mark.parametrize("identity, image, expected", [
    ({"image_id": IMAGE_ID, "image_digest": DIGEST}, "vllm/vllm-openai:v0.27.1",
     f"vllm/vllm-openai@{DIGEST}"),
    ({"image_id": IMAGE_ID, "image_digest": DIGEST}, "reg:5000/x:tag", f"reg:5000/x@{DIGEST}"),
    ({"image_id": IMAGE_ID, "image_digest": ""}, "vdf-vllm-double:latest", IMAGE_ID),
    ({"image_id": "", "image_digest": ""}, "x:1", "x:1"),       # nothing known yet: check mode
])
def test_a_release_names_its_image_by_what_it_is(identity, image, expected):
    assert release.image_reference(identity, image) == expected


def test_each_release_keeps_its_image_under_its_own_tag():
    assert release.image_keep_tag("/opt/vllm-dual-fast/releases/0123456789abcdef/") == \
        "vllm-dual-fast-release:0123456789abcdef"



def engine_up():
    try:
        return docker("info", check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def dangling():
    return docker("images", "--quiet", "--filter", "dangling=true").stdout.split()


@pytest.mark.skipif(not engine_up(), reason="needs the Docker engine make setup starts")
def test_a_rollback_starts_the_judged_image_after_the_tag_moved(tmp_path):
    """Before: compose.yml named the tag, so after a re-pulled tag a rollback started the new
    build under the old release's name, and the old build was dangling (what `docker image
    prune` removes) once its tag had moved."""
    run = uuid.uuid4().hex[:8]
    tag, keep = f"vdf-pin-test-{run}:latest", f"vllm-dual-fast-release:pintest{run}"
    made = []

    def build(label):
        box = docker("create", "vdf-base:debian12", "true").stdout.strip()
        try:
            docker("commit", "--change", f"LABEL vdf.pin-test={label}", box, tag)
        finally:
            docker("rm", box)
        image_id = docker("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()
        made.append(image_id)
        return image_id

    try:
        judged = build("judged")
        read = docker("image", "inspect", "--format", "{{.Id}} {{json .RepoDigests}}",
                      tag).stdout
        identity = release.release_identity(read, tag, "main")
        ref = release.image_reference(identity, tag)
        assert ref == judged
        compose = render("compose.yml.j2", {**role_vars(), "vllm_dual_fast_image": tag,
                                            "_vllm_dual_fast_image_ref": ref})
        (tmp_path / "compose.yml").write_text(compose)
        (tmp_path / "vllm.env").write_text("")
        (tmp_path / "api-key").write_text("k")
        config = json.loads(docker("compose", "--file", str(tmp_path / "compose.yml"),
                                   "config", "--format", "json").stdout)
        named = config["services"]["vllm"]["image"]
        assert named == judged and tag not in yaml.safe_dump(config["services"]["vllm"])
        rebuilt = build("rebuilt")                     # the owner's pull moves the tag
        assert rebuilt != judged
        # What `docker image prune` takes: the dangling images (no container uses these). Not
        # run here: it would take this machine's other dangling images too.
        short = judged[len("sha256:"):][:12]
        assert short in dangling()                     # untagged by the pull: prune takes it
        docker("tag", judged, keep)                    # deploy.yml's keep tag
        assert short not in dangling(), "the keep tag did not hold it"
        box = docker("create", named, "true").stdout.strip()
        try:
            started = docker("inspect", "--format", "{{.Image}}", box).stdout.strip()
        finally:
            docker("rm", box)
        assert started == judged, "the release started the build the tag moved to"
    finally:
        for name in (tag, keep, *made):
            docker("rmi", "--force", name, check=False)
