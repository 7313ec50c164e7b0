#!/usr/bin/env python3
"""Tests a candidate nginx file inside the host's whole nginx configuration before it replaces
the installed one (the role's template `validate:`): `nginx -t` on one site file alone proves
nothing, and a bad file reloaded would take down a working proxy.

The configuration folder is copied to a temporary one, the candidate put at the target's place
in the copy, the copy's own absolute paths (`include /etc/nginx/...`) pointed at the copy, and
`nginx -t` run on the copy's main file. The installed configuration is never touched.

    nginx_check.py --nginx-dir /etc/nginx --target /etc/nginx/conf.d/site.conf CANDIDATE

Exit codes: 0 the whole configuration with the candidate is valid; 2 nginx refused it (its
message on stderr); 1 unexpected (no nginx, the target outside the folder). Standard library only.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def relative_target(nginx_dir: Path, target: Path) -> Path:
    """The target's path inside the configuration folder; a target outside it is an error."""
    return target.resolve().relative_to(nginx_dir.resolve())


def repoint(copy_dir: Path, nginx_dir: Path) -> None:
    """Points absolute references to the installed folder at the copy, in every text file."""
    prefix = str(nginx_dir.resolve()).rstrip("/") + "/"
    for path in copy_dir.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        if prefix in text:
            path.write_text(text.replace(prefix, str(copy_dir) + "/"))


def stage(nginx_dir: Path, target: Path, candidate: Path, work: Path) -> Path:
    """The copy of the configuration with the candidate in the target's place; its main file."""
    copy_dir = work / "nginx"
    # Symlinks (sites-enabled/*, modules-enabled/*) are copied as the files they point at.
    shutil.copytree(nginx_dir, copy_dir, symlinks=False, ignore_dangling_symlinks=True)
    placed = copy_dir / relative_target(nginx_dir, target)
    placed.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(candidate, placed)
    repoint(copy_dir, nginx_dir)
    return copy_dir / "nginx.conf"


def check(nginx_dir: Path, target: Path, candidate: Path, nginx: str = "nginx") -> tuple:
    """(exit code, nginx's message) for the configuration with the candidate in place."""
    with tempfile.TemporaryDirectory(prefix="vdf-nginx-check-") as work:
        main_file = stage(nginx_dir, target, candidate, Path(work))
        result = subprocess.run(
            # nginx's own prefix stays: `load_module modules/...` lines are relative to it.
            [nginx, "-t", "-q", "-c", str(main_file)],
            capture_output=True, text=True, timeout=60, check=False)
    return (0 if result.returncode == 0 else 2), (result.stdout + result.stderr).strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nginx-dir", type=Path, default=Path("/etc/nginx"))
    parser.add_argument("--target", type=Path, required=True,
                        help="the file the candidate replaces")
    parser.add_argument("--nginx", default=os.environ.get("NGINX", "nginx"), help="nginx binary")
    parser.add_argument("candidate", type=Path)
    args = parser.parse_args(argv)
    try:
        code, message = check(args.nginx_dir, args.target, args.candidate, args.nginx)
    except (OSError, ValueError, subprocess.SubprocessError) as err:
        print(f"nginx_check: could not test the candidate: {err}", file=sys.stderr)
        return 1
    if code:
        print(f"nginx_check: the configuration with {args.target} replaced is refused:\n{message}",
              file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
