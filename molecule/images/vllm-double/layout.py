#!/usr/bin/env python3
"""Lays the vLLM double's source tree out as one vLLM release (a build step of the image).

    python3 layout.py VERSION PACKAGE_DIR

VERSION is 0.27.1 (the tree as committed) or 0.33.0; PACKAGE_DIR is the `vllm` package folder of
a copy of src/ (the image's /opt/vllm-double/src/vllm, or a test's copy in its tmp folder). What
differs between the two, as in real vLLM:

    0.27.1  make_arg_parser in vllm/entrypoints/openai/cli_args.py, no vllm/entrypoints/common
    0.33.0  make_arg_parser in vllm/entrypoints/common/cli_args.py, no openai/cli_args.py

plus `__version__` in vllm/__init__.py (what `vllm --version`, /version and the dist-info
install_double.py writes report). The rest that differs by release keys on that version line
(vllm._double.release()): QUANTIZATION_METHODS, vllm.config.cache's cache dtypes and so the
--kv-cache-dtype choices (0.27.1) or any string (0.33.0), 0.33.0's --device-memory-utilization
and its --enable-/--disable- pairs (vllm.utils.argparse_utils.EnableDisableAction).
Idempotent and either way round: the 0.33.0 image is built FROM the 0.27.1 one by running this
again on the same tree, then install_double.py.

Standard library only. Exit codes: 0 laid out (or already so); 2 unknown VERSION, or a folder
that is not the double's package (nothing written); 1 unexpected.
"""

import os
import re
import shutil
import sys

EXIT_OK, EXIT_UNEXPECTED, EXIT_REFUSED = 0, 1, 2
# Release -> the entrypoints subpackage that holds cli_args.py (make_arg_parser).
PARSER_PACKAGE = {"0.27.1": "openai", "0.33.0": "common"}
VERSION_LINE = re.compile(r'^__version__ = "[^"]*"$', re.MULTILINE)
PACKAGE_INIT = '"""Part of the vLLM test double (vllm-double)."""\n'


class Refused(Exception):
    """The folder or the version is not one this script lays out."""


def parser_file(package_dir: str, subpackage: str) -> str:
    return os.path.join(package_dir, "entrypoints", subpackage, "cli_args.py")


def current_parser_package(package_dir: str) -> str:
    """'openai' or 'common': where cli_args.py is now; Refused when not exactly one place."""
    found = [p for p in sorted(set(PARSER_PACKAGE.values()))
             if os.path.isfile(parser_file(package_dir, p))]
    if len(found) != 1:
        raise Refused(f"{package_dir}: expected cli_args.py in exactly one of entrypoints/openai "
                      f"and entrypoints/common, found {found or 'none'}")
    return found[0]


def apply_layout(package_dir: str, version: str) -> list:
    """Lays package_dir out as `version`; returns what it changed (empty: already so)."""
    if version not in PARSER_PACKAGE:
        raise Refused(f"unknown layout {version!r}; known: {', '.join(PARSER_PACKAGE)}")
    init = os.path.join(package_dir, "__init__.py")
    try:
        with open(init, encoding="utf-8") as f:
            init_text = f.read()
    except OSError as exc:
        raise Refused(f"{package_dir} is not the vLLM double's package: {exc}") from exc
    if "IS_TEST_DOUBLE = True" not in init_text or not VERSION_LINE.search(init_text):
        raise Refused(f"{init} is not the vLLM double's (no IS_TEST_DOUBLE or __version__ line)")
    have, want = current_parser_package(package_dir), PARSER_PACKAGE[version]
    changes = []
    if have != want:
        source, target = parser_file(package_dir, have), parser_file(package_dir, want)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        target_init = os.path.join(os.path.dirname(target), "__init__.py")
        if not os.path.exists(target_init):
            with open(target_init, "w", encoding="utf-8") as f:
                f.write(PACKAGE_INIT)
        with open(source, encoding="utf-8") as f:
            text = f.read()
        text = text.replace(f"vllm.entrypoints.{have}.cli_args",
                            f"vllm.entrypoints.{want}.cli_args")
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
        os.unlink(source)
        changes.append(f"moved entrypoints/{have}/cli_args.py to entrypoints/{want}/cli_args.py")
        if have == "common":  # 0.27.1 has no vllm.entrypoints.common package at all
            shutil.rmtree(os.path.dirname(source))
            changes.append("removed entrypoints/common")
    new_init = VERSION_LINE.sub(f'__version__ = "{version}"', init_text, count=1)
    if new_init != init_text:
        with open(init, "w", encoding="utf-8") as f:
            f.write(new_init)
        changes.append(f"__version__ = {version}")
    return changes


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.stderr.write(f"usage: layout.py {{{','.join(PARSER_PACKAGE)}}} PACKAGE_DIR\n")
        return EXIT_REFUSED
    version, package_dir = argv
    try:
        changes = apply_layout(package_dir, version)
    except Refused as exc:
        sys.stderr.write(f"layout: refused: {exc}\n")
        return EXIT_REFUSED
    except Exception as exc:  # noqa: BLE001 (unexpected: say so, exit 1)
        sys.stderr.write(f"layout: error: {type(exc).__name__}: {exc}\n")
        return EXIT_UNEXPECTED
    print(f"vllm-double layout {version}: " + ("; ".join(changes) or "already so"))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
