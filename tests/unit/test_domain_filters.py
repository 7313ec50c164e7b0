"""The thin filter files (filter_plugins/) export what the role's YAML uses of the domain library
(module_utils/vllm_dual_fast_domain/) and nothing of their own: each name is the library's own
function, so the tests of the library are the tests of the filters."""

import importlib.util
import re

import pytest
from ansible.module_utils.vllm_dual_fast_domain import maintenance, pull, release, verdict
from ansible_runner import ROLE

ROOT = ROLE.parents[1]
THIN = {"vllm_dual_fast_release.py": release, "vllm_dual_fast_health.py": verdict,
        "vllm_dual_fast_maintenance.py": maintenance, "vllm_dual_fast_pull.py": pull}


def exported(name):
    spec = importlib.util.spec_from_file_location(f"thin_{name[:-3]}",
                                                  ROLE / "filter_plugins" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.FilterModule().filters()


def yaml_filter_names():
    """Every vllm_dual_fast_* filter the role's and playbooks' YAML applies (`| name`)."""
    found = set()
    for path in [*ROLE.rglob("*.yml"), *ROLE.rglob("*.j2"), *(ROOT / "playbooks").rglob("*.yml")]:
        found |= set(re.findall(r"\|\s*(vllm_dual_fast_\w+)", path.read_text()))
    return found


@pytest.mark.parametrize("name", sorted(THIN))
def test_a_thin_filter_exports_the_librarys_own_functions(name):
    for filter_name, function in exported(name).items():
        assert getattr(THIN[name], function.__name__) is function, filter_name


@pytest.mark.parametrize("name", sorted(THIN))
def test_a_thin_filter_exports_only_what_yaml_uses(name):
    assert set(exported(name)) <= yaml_filter_names()


@pytest.mark.parametrize("name", sorted(THIN))
def test_a_thin_filter_holds_no_logic_of_its_own(name):
    source = (ROLE / "filter_plugins" / name).read_text()
    assert re.findall(r"^def \w+", source, re.M) == []
