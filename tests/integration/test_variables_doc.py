"""docs/variables.md is generated from the roles' meta/argument_specs.yml (scripts/
variables-doc.py) and must be what they give: a variable added, retyped or redescribed in a spec
and not in the reference fails here, in `make test`."""

import importlib.util
import pathlib
import shutil
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts/variables-doc.py"
spec = importlib.util.spec_from_file_location("variables_doc", SCRIPT)
variables_doc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(variables_doc)


def test_the_checked_in_reference_is_what_the_specs_give():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                          text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_every_variable_of_every_spec_has_a_row():
    text = (ROOT / "docs/variables.md").read_text()
    for role in variables_doc.ROLES:
        specs = yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())
        for name in specs["argument_specs"]["main"]["options"]:
            assert f"| `{name}` |" in text, name


def test_a_variable_added_to_a_spec_changes_the_reference(tmp_path):
    for role in variables_doc.ROLES:
        (tmp_path / "roles" / role / "meta").mkdir(parents=True)
        shutil.copy(ROOT / "roles" / role / "meta/argument_specs.yml",
                    tmp_path / "roles" / role / "meta/argument_specs.yml")
    path = tmp_path / "roles/vllm_dual_fast/meta/argument_specs.yml"
    specs = yaml.safe_load(path.read_text())
    specs["argument_specs"]["main"]["options"]["vllm_dual_fast_new_knob"] = {
        "type": "int", "default": 3, "choices": [1, 3], "description": "A knob | with a pipe."}
    path.write_text(yaml.safe_dump(specs))
    text = variables_doc.render(tmp_path)
    assert text != variables_doc.render(ROOT)
    assert ("| `vllm_dual_fast_new_knob` | int | `3` | A knob \\| with a pipe. "
            "(one of `1`, `3`) |") in text
