"""The Makefile's virtualenv target, run for real in a temporary folder holding a copy of the
Makefile and requirements files that name only pip (already in every new virtualenv, so nothing is
downloaded)."""

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).parents[2]


def make_venv(folder):
    return subprocess.run(["make", "--no-print-directory", "venv"], cwd=folder, capture_output=True,
                          text=True, timeout=300, check=False)


def test_venv_passes_when_the_requirements_changed_but_everything_is_installed(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "requirements-dev.txt").write_text("pip\n")
    (tmp_path / "requirements-test.txt").write_text("# nothing more\n")
    first = make_venv(tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    stamp = tmp_path / ".venv/.installed"
    assert stamp.exists()
    # A changed requirements file whose packages are all there already: pip prints no
    # "Collecting" line, which the output filter must not take for a failure.
    (tmp_path / "requirements-test.txt").write_text("# nothing more, said differently\n")
    again = make_venv(tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert stamp.stat().st_mtime_ns >= (tmp_path / "requirements-test.txt").stat().st_mtime_ns
    assert "Nothing to be done" in make_venv(tmp_path).stdout                # and now nothing to do


def test_bytecode_compiles_the_plugins_ansible_loads_where_python_writes_none(tmp_path):
    """Ansible loads the role's filter plugins in the worker it forks for each task; with
    PYTHONDONTWRITEBYTECODE set Python compiled them from source there every time. `make
    bytecode` writes their bytecode once, the variable set or not."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    plugins = {"roles/vllm_dual_fast/filter_plugins/a_filter.py", "plugins/strategy/a_strategy.py",
               "molecule/shared/progress/a_callback.py",
               "roles/vllm_dual_fast/module_utils/vllm_dual_fast_domain/a_part.py"}
    for plugin in plugins:
        (tmp_path / plugin).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / plugin).write_text("VALUE = 1\n")
    (tmp_path / ".venv/bin").mkdir(parents=True)
    (tmp_path / ".venv/bin/python").symlink_to(shutil.which("python3"))
    (tmp_path / ".venv/.installed").touch()
    run = subprocess.run(["make", "--no-print-directory", "-o", "venv", "bytecode"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False,
                         env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert run.returncode == 0, run.stdout + run.stderr
    compiled = {str(p.parent.parent.relative_to(tmp_path) / (p.name.split(".")[0] + ".py"))
                for p in tmp_path.rglob("__pycache__/*.pyc")}
    assert compiled == plugins
