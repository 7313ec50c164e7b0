"""Installs the vLLM double into the image's Python (build step of the vllm-double image).

Copies src/vllm next to the real FlashInfer in site-packages, writes a minimal dist-info so
importlib.metadata.version("vllm") answers, and the console commands `vllm`, `hf` and
`huggingface-cli` (all doubles). Run again (the 0.33.0 image runs it after layout.py on the 0.27.1
image's tree), it replaces the package and any earlier vllm dist-info, so exactly one version is
installed. VLLM_DOUBLE_SITE_DIR and VLLM_DOUBLE_BIN_DIR move where it installs (tests).
"""

import glob
import os
import shutil
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
BIN_DIR = os.environ.get("VLLM_DOUBLE_BIN_DIR", "/usr/local/bin")
COMMANDS = {
    "vllm": "vllm.entrypoints.cli.main",
    "hf": "vllm._double.hf_cli",
    "huggingface-cli": "vllm._double.hf_cli",
}


def main() -> int:
    sys.path.insert(0, os.path.join(HERE, "src"))
    from vllm import __version__

    site = os.environ.get("VLLM_DOUBLE_SITE_DIR") or sysconfig.get_paths()["purelib"]
    target = os.path.join(site, "vllm")
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(os.path.join(HERE, "src", "vllm"), target,
                    ignore=shutil.ignore_patterns("__pycache__"))
    for old in glob.glob(os.path.join(site, "vllm-*.dist-info")):
        shutil.rmtree(old)
    info = os.path.join(site, f"vllm-{__version__}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(f"Metadata-Version: 2.1\nName: vllm\nVersion: {__version__}\n"
                "Summary: TEST DOUBLE of vLLM (vllm-double), not vLLM\n")
    with open(os.path.join(info, "INSTALLER"), "w") as f:
        f.write("vllm-double\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write("[console_scripts]\nvllm = vllm.entrypoints.cli.main:main\n")
    for name, module in COMMANDS.items():
        path = os.path.join(BIN_DIR, name)
        with open(path, "w") as f:
            f.write(f"#!{sys.executable}\n# vllm-double console command (test double)\n"
                    f"import sys\nfrom {module} import main\nsys.exit(main())\n")
        os.chmod(path, 0o755)  # noqa: S103 (a command on PATH)
    print(f"vllm-double {__version__} installed in {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
