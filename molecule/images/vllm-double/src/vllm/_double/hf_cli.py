"""`hf download` / `huggingface-cli download` of the vLLM test double: fake, resumable weights.

`hf download ORG/NAME [--revision R] [--cache-dir D | --local-dir D] [--token T] ...` writes a
small fake snapshot in Hugging Face's cache layout:
  <cache>/models--ORG--NAME/refs/<revision>        (the fake commit hash; none for a hash)
  <cache>/models--ORG--NAME/snapshots/<hash>/config.json
where <cache> is --cache-dir, else $HF_HUB_CACHE, else $HF_HOME/hub, else
~/.cache/huggingface/hub; with --local-dir, config.json lands in that folder. Resumable: a
snapshot that is already complete is left alone ("already present"). It prints the
snapshot's path on stdout, as the real command does; the token is never printed.
`vllm serve MODEL [--revision R]` of the double finds the weights the same way (refs/R, or the
hash itself; R defaults to main) and, with HF_HUB_OFFLINE=1, fails when they are missing, as
vLLM does.
Besides config.json the snapshot holds `model.safetensors`, written in chunks through
`model.safetensors.incomplete` as a real download grows a blob: an interrupted download resumes
from the bytes already there (stderr says "resuming at N bytes"), a finished one is left alone.
Test knobs (env): VLLM_DOUBLE_HF_FAIL=1 fails like a network error (exit 1),
VLLM_DOUBLE_HF_DELAY_S sleeps before writing. A rig-side file, `$HF_HOME/vllm-double.json`
(the host's model cache, which the role mounts there), sets the weights' size and how long the
whole download takes: {"weights_mb": 64, "download_s": 40} (defaults 1 MB, 0 s), and how long
the rest of a resumed one takes, however much is left: "resume_s" (default: its share of
download_s), so tests on a rig can make a download take a known time without touching the role.
Only those top-level keys are read here: "by_version" (per-release overrides) is vllm serve's
alone (server.rig_knobs).
"""

import argparse
import hashlib
import json
import os
import sys
import time


def hub_cache(cache_dir=None) -> str:
    if cache_dir:
        return cache_dir
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                     "huggingface")
    return os.path.join(home, "hub")


def repo_folder(repo_id: str) -> str:
    return "models--" + repo_id.replace("/", "--")


def is_commit(revision: str) -> bool:
    return len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)


def fake_commit(repo_id: str, revision: str) -> str:
    """The snapshot folder: the revision itself when it is a commit hash, else a stable fake."""
    if is_commit(revision):
        return revision
    return hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()  # noqa: S324 (not security)


def write_config(folder: str, repo_id: str, revision: str) -> bool:
    """Writes config.json into folder unless present; True when it wrote."""
    path = os.path.join(folder, "config.json")
    if os.path.isfile(path):
        return False
    os.makedirs(folder, exist_ok=True)
    config = {"_vllm_double": "fake snapshot written by the vllm-double hf command",
              "_name_or_path": repo_id, "_revision": revision,
              "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
    with open(path + ".incomplete", "w") as f:
        json.dump(config, f, indent=2)
    os.replace(path + ".incomplete", path)
    return True


def knobs() -> dict:
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache",
                                                     "huggingface")
    try:
        with open(os.path.join(home, "vllm-double.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def write_weights(folder: str, size: int, duration_s: float, resume_s=None) -> bool:
    """Grows folder/model.safetensors to `size` bytes over `duration_s`, resuming a partial
    file (its rest over `resume_s` when given); True when it wrote anything."""
    path = os.path.join(folder, "model.safetensors")
    if os.path.isfile(path):
        return False
    os.makedirs(folder, exist_ok=True)
    part = path + ".incomplete"
    have = os.path.getsize(part) if os.path.isfile(part) else 0
    if have:
        sys.stderr.write(f"resuming at {have} bytes of {size}\n")
    chunk = max(size // 50, 1)
    # seconds per byte: the whole file over duration_s, or what is left over resume_s
    pace = resume_s / (size - have) if have and resume_s is not None and have < size \
        else duration_s / size
    with open(part, "ab") as f:
        while have < size:
            n = min(chunk, size - have)
            f.write(b"\0" * n)
            f.flush()
            have += n
            time.sleep(pace * n)
    os.replace(part, path)
    return True


def download(repo_id: str, revision: str = "main", cache_dir=None, local_dir=None) -> tuple:
    """(path, wrote) for the fake snapshot of repo_id."""
    if local_dir:
        return local_dir, write_config(local_dir, repo_id, revision)
    repo = os.path.join(hub_cache(cache_dir), repo_folder(repo_id))
    commit = fake_commit(repo_id, revision)
    snapshot = os.path.join(repo, "snapshots", commit)
    knob = knobs()
    resume_s = knob.get("resume_s")
    wrote = write_weights(snapshot, int(float(knob.get("weights_mb", 1)) * 1024 * 1024),
                          float(knob.get("download_s", 0)),
                          None if resume_s is None else float(resume_s))
    wrote = write_config(snapshot, repo_id, revision) or wrote
    if not is_commit(revision):  # as huggingface_hub: a branch or tag gets a ref, a hash none
        os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
        with open(os.path.join(repo, "refs", revision.replace("/", "--")), "w") as f:
            f.write(commit)
    return snapshot, wrote


def resolve_model(model: str, download_dir=None, revision=None) -> dict:
    """Where `vllm serve MODEL` would find its weights: {'path'} or {'error'} or {'remote'}."""
    if os.path.isdir(model):
        return {"path": model}
    if model.startswith(("/", "./", "../")):
        return {"error": f"OSError: model path {model} does not exist"}
    revision = revision or "main"
    repo = os.path.join(hub_cache(download_dir), repo_folder(model))
    commit = revision if is_commit(revision) else None
    if commit is None:
        try:
            with open(os.path.join(repo, "refs", revision.replace("/", "--"))) as f:
                commit = f.read().strip()
        except OSError:
            commit = None
    snapshot = os.path.join(repo, "snapshots", commit) if commit else None
    if snapshot and os.path.isfile(os.path.join(snapshot, "config.json")):
        return {"path": snapshot}
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return {"error": (f"OSError: We couldn't connect to the Hub to load {model} and revision "
                          f"{revision} is not in the cache at {hub_cache(download_dir)} "
                          "(HF_HUB_OFFLINE=1)")}
    return {"remote": model, "note": "vllm-double: would download; no weights needed"}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hf", description="vllm-double stand-in for hf "
                                     "download (writes a fake snapshot; not huggingface_hub)")
    sub = parser.add_subparsers(dest="command", required=True)
    dl = sub.add_parser("download")
    dl.add_argument("repo_id")
    dl.add_argument("filenames", nargs="*")
    dl.add_argument("--repo-type", choices=["model", "dataset", "space"], default="model")
    dl.add_argument("--revision", default="main")
    dl.add_argument("--include", nargs="*")
    dl.add_argument("--exclude", nargs="*")
    dl.add_argument("--cache-dir")
    dl.add_argument("--local-dir")
    dl.add_argument("--token")
    dl.add_argument("--max-workers", type=int, default=8)
    dl.add_argument("--quiet", action="store_true")
    dl.add_argument("--force-download", action="store_true")
    args = parser.parse_args(argv)
    if "/" not in args.repo_id:
        sys.stderr.write(f"Repository Not Found for {args.repo_id}\n")
        return 1
    if os.environ.get("VLLM_DOUBLE_HF_FAIL"):
        sys.stderr.write("ConnectionError: vllm-double: injected download failure\n")
        return 1
    time.sleep(float(os.environ.get("VLLM_DOUBLE_HF_DELAY_S", "0") or 0))
    path, wrote = download(args.repo_id, args.revision, args.cache_dir, args.local_dir)
    if not args.quiet:
        sys.stderr.write(("downloaded " if wrote else "already present ") + args.repo_id + "\n")
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
