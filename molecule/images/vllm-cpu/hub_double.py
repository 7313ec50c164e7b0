"""TEST DOUBLE of the Hugging Face hub client (`hf download`) in the real-engine image: the hub is
unreachable here, so `hf download ORG/NAME [--revision R]` copies a model this image built
(/opt/vdf-hub/ORG/NAME, by make_model.py) into the hub cache's own layout, which the real vLLM
then reads offline (HF_HUB_OFFLINE=1, as the role serves):
  $HF_HOME/hub/models--ORG--NAME/blobs/<sha256>            each file once
  $HF_HOME/hub/models--ORG--NAME/snapshots/<commit>/NAME  a relative link to its blob
  $HF_HOME/hub/models--ORG--NAME/refs/R                   (not for a 40-hex revision)
A repository the image does not hold fails as the hub's 404 does (exit 1); a finished snapshot
is left alone; a new one is written under a temporary name and renamed, so an interrupted copy
is never taken for a download. It prints the snapshot's path, as the real command does.
"""

import argparse
import hashlib
import os
import shutil
import sys

HUB_ROOT = os.environ.get("VDF_HUB_ROOT", "/opt/vdf-hub")


def hub_cache() -> str:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                     "huggingface")
    return os.path.join(home, "hub")


def content_commit(source: str) -> str:
    """A commit-like name for the model's files: the same files, the same snapshot."""
    digest = hashlib.sha1()  # noqa: S324 (a name, as git's commit ids are)
    for name in sorted(os.listdir(source)):
        digest.update(name.encode() + b"\0")
        with open(os.path.join(source, name), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def file_hash(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download(repo_id: str, revision: str) -> tuple:
    """(snapshot path, wrote) of repo_id's copy in the hub cache."""
    source = os.path.join(HUB_ROOT, repo_id)
    if not os.path.isdir(source):
        raise LookupError(f"404 Client Error: Repository Not Found for url: "
                          f"https://huggingface.co/api/models/{repo_id}/revision/{revision}")
    commit = content_commit(source)
    repo = os.path.join(hub_cache(), "models--" + repo_id.replace("/", "--"))
    snapshot = os.path.join(repo, "snapshots", commit)
    wrote = False
    if not os.path.isdir(snapshot):
        # As huggingface_hub lays it out: each file a blob named by its hash, the snapshot a
        # folder of relative links to them.
        blobs = os.path.join(repo, "blobs")
        os.makedirs(blobs, exist_ok=True)
        part = snapshot + ".incomplete"
        shutil.rmtree(part, ignore_errors=True)
        os.makedirs(part)
        for name in sorted(os.listdir(source)):
            blob = os.path.join(blobs, file_hash(os.path.join(source, name)))
            if not os.path.isfile(blob):
                shutil.copyfile(os.path.join(source, name), blob + ".incomplete")
                os.replace(blob + ".incomplete", blob)
            os.symlink(os.path.relpath(blob, snapshot), os.path.join(part, name))
        os.replace(part, snapshot)
        wrote = True
    if not (len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)):
        os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
        with open(os.path.join(repo, "refs", revision.replace("/", "--")), "w") as f:
            f.write(commit)
    return snapshot, wrote


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hf", description="TEST DOUBLE of `hf download`: "
                                     "copies a model built into this image into the hub cache")
    sub = parser.add_subparsers(dest="command", required=True)
    dl = sub.add_parser("download")
    dl.add_argument("repo_id")
    dl.add_argument("--revision", default="main")
    dl.add_argument("--token")
    args = parser.parse_args(argv)
    try:
        path, wrote = download(args.repo_id, args.revision)
    except LookupError as exc:
        sys.stderr.write(f"{exc}\n")
        return 1
    sys.stderr.write(("downloaded " if wrote else "already present ") + args.repo_id + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
