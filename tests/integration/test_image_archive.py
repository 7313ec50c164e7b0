"""An offline rig's image archive (vllm_dual_fast_image_archive): named by its manifest
(lookup_plugins/vllm_dual_fast_image_archive_id.py), copied to the rig only when Docker lacks the
image or loaded another archive, and recorded once loaded (tasks/model.yml). Before, the copy
module hashed the whole archive on the controller and on the rig every run: 5 s of an
unchanged site.yml for the CPU build's 3.5 GB (bench/noop)."""

import importlib.util
import io
import json
import tarfile

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible_runner import ROLE, run_playbook

spec = importlib.util.spec_from_file_location(
    "archive_id", ROLE / "lookup_plugins/vllm_dual_fast_image_archive_id.py")
lookup = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lookup)

MODEL_TASKS = yaml.safe_load((ROLE / "tasks/model.yml").read_text())
COPY = next(t for t in MODEL_TASKS if t["name"].startswith("Copy the image archive"))
RECORD = next(t for t in MODEL_TASKS if t["name"] == "Record which archive Docker has loaded")


def archive(path, members):
    """A tarball holding members {name: bytes}, as `docker save` lays one out."""
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def saved_image(path, config="aa" * 32, layer=b"layer bytes"):
    manifest = json.dumps([{"Config": f"blobs/sha256/{config}", "RepoTags": ["img:1"],
                            "Layers": ["blobs/sha256/" + "bb" * 32]}]).encode()
    return archive(path, {f"blobs/sha256/{config}": b"{}", "blobs/sha256/" + "bb" * 32: layer,
                          "manifest.json": manifest, "index.json": b"{}"})


def test_an_archive_is_named_by_its_manifest(tmp_path):
    first = lookup.archive_id(saved_image(tmp_path / "a.tar"))
    again = lookup.archive_id(saved_image(tmp_path / "b.tar"))
    other = lookup.archive_id(saved_image(tmp_path / "c.tar", config="cc" * 32))
    assert first.startswith("sha256:") and len(first) == 71
    assert first == again and first != other


@pytest.mark.parametrize("members", [{"other.json": b"{}"}, None])
def test_a_file_docker_save_did_not_write_is_refused_by_name(tmp_path, members):
    path = tmp_path / "image.tar"
    if members is None:
        path.write_bytes(b"not a tarball at all" * 40)
    else:
        archive(path, members)
    with pytest.raises(AnsibleError, match="vllm_dual_fast_image_archive .*image.tar"):
        lookup.archive_id(path)


def run_copy(tmp_path, image_present, archive_loaded):
    """model.yml's copy and record tasks on this host, with what preflight read of the rig."""
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    source = saved_image(tmp_path / "image.tar")
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [COPY, RECORD]}]
    result, text = run_playbook(tmp_path, play, {
        "vllm_dual_fast_image_archive": str(source),
        "_vllm_dual_fast_state_dir": str(state),
        "_vllm_dual_fast_host_read": {"disk": {"image_present": image_present,
                                               "archive_loaded": archive_loaded}}})
    assert result.returncode == 0, text
    return lookup.archive_id(source), state, text


def test_docker_holding_the_image_of_this_archive_skips_the_copy(tmp_path):
    identity = lookup.archive_id(saved_image(tmp_path / "same.tar"))
    _, state, text = run_copy(tmp_path, True, identity)
    assert not (state / "image.tar").exists()
    assert not (state / "image.tar.loaded").exists()
    assert "changed=0" in text


@pytest.mark.parametrize("image_present, archive_loaded", [
    (False, "same"),        # Docker lost the image: copy and load again
    (True, "sha256:" + "0" * 64),   # another archive was loaded: this one is new
    (True, ""),             # a rig from before the record: copied once, then recorded
])
def test_a_new_archive_or_a_missing_image_is_copied_and_recorded(tmp_path, image_present,
                                                                 archive_loaded):
    if archive_loaded == "same":
        archive_loaded = lookup.archive_id(saved_image(tmp_path / "same.tar"))
    identity, state, _ = run_copy(tmp_path, image_present, archive_loaded)
    assert (state / "image.tar").read_bytes() == (tmp_path / "image.tar").read_bytes()
    assert (state / "image.tar.loaded").read_text() == identity + "\n"
