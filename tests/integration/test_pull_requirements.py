"""files/pull-requirements.txt, the hash-pinned Ansible that pull-mode rigs install: its lines
are all exact pins with sha256 hashes matching scripts/pin-pull-requirements.sh, and a real pip
with --require-hashes (in a throwaway venv, against the package index) takes it whole and
refuses a copy with a wrong hash."""

import itertools
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
REQUIREMENTS = ROOT / "files/pull-requirements.txt"
SCRIPT = ROOT / "scripts/pin-pull-requirements.sh"
PIN_LINE = re.compile(
    r"^(?P<name>[a-z0-9][a-z0-9._-]*)==(?P<version>[A-Za-z0-9.+!-]+)"
    r"(?: ; (?P<marker>[^\\]+?))?"
    r"(?P<hashes>(?: --hash=sha256:[0-9a-f]{64})+)$"
)


def requirement_lines(text):
    """The file's requirements, one logical line each: continuations joined, comments gone."""
    joined = re.sub(r"\s*\\\n\s*", " ", text)
    lines = (line.split("#", 1)[0].strip() for line in joined.splitlines())
    return [line for line in lines if line]


def script_pin(name):
    """A NAME=value pin from the top of the regeneration script."""
    match = re.search(rf"^{name}=(\S+)$", SCRIPT.read_text(), re.MULTILINE)
    assert match, f"{name} is not pinned in {SCRIPT.name}"
    return match.group(1)


def parsed_pins():
    pins = {}
    for line in requirement_lines(REQUIREMENTS.read_text()):
        match = PIN_LINE.match(line)
        assert match, f"not an exact pin with sha256 hashes: {line[:120]}"
        pins[match["name"]] = match
    return pins


def index_only_env():
    """pip sees the public index alone: this machine's local wheel folders and mirrors
    would offer other files than a rig gets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def pip_dry_run(pip, requirements, *extra):
    return subprocess.run(
        [
            str(pip),
            "install",
            "--require-hashes",
            "--dry-run",
            "--ignore-installed",
            *extra,
            "-r",
            str(requirements),
        ],
        env=index_only_env(),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def venv_pip(tmp_path_factory):
    venv = tmp_path_factory.mktemp("pull-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    return venv / "bin/pip"


def test_every_line_is_an_exact_pin_with_hashes():
    pins = parsed_pins()
    assert {"ansible", "ansible-core", "jinja2", "pyyaml", "cryptography"} <= set(pins)
    for match in pins.values():
        assert match["hashes"].count("--hash=sha256:") >= 1


def test_ansible_pins_match_the_script_and_dev_requirements():
    pins = parsed_pins()
    ansible, core = script_pin("ANSIBLE_VERSION"), script_pin("ANSIBLE_CORE_VERSION")
    assert pins["ansible"]["version"] == ansible
    assert pins["ansible-core"]["version"] == core
    dev = (ROOT / "requirements-dev.txt").read_text().splitlines()
    assert f"ansible=={ansible}" in dev and f"ansible-core=={core}" in dev


def test_header_says_require_hashes_and_how_it_was_made():
    lines = REQUIREMENTS.read_text().splitlines()
    header = "\n".join(itertools.takewhile(lambda line: line.startswith("#"), lines))
    assert "--require-hashes" in header
    assert "scripts/pin-pull-requirements.sh" in header


def test_pip_takes_the_whole_file_with_require_hashes(venv_pip):
    result = pip_dry_run(venv_pip, REQUIREMENTS)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    would_install = result.stdout.rsplit("Would install", 1)[-1].split()
    installed = {w.lower().replace("_", "-") for w in would_install}
    # This machine is CPython, so the marked pins (off PyPy only) install here too.
    for name, match in parsed_pins().items():
        assert f"{name}-{match['version']}" in installed, f"{name} missing: {would_install}"


def test_pip_refuses_a_wrong_hash(venv_pip, tmp_path):
    packaging = parsed_pins()["packaging"]
    # Flip every hash of the one package, so no file of it can still match.
    wrong = re.sub(
        r"sha256:([0-9a-f])",
        lambda m: "sha256:" + ("1" if m.group(1) == "0" else "0"),
        packaging["hashes"],
    )
    altered = tmp_path / "altered.txt"
    altered.write_text(f"packaging=={packaging['version']}{wrong}\n")
    result = pip_dry_run(venv_pip, altered, "--no-deps", "--no-cache-dir")
    assert result.returncode != 0
    assert "DO NOT MATCH THE HASHES" in result.stderr, result.stderr[-2000:]
