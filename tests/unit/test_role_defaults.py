"""argument_specs.yml documents every variable once: each one has a default in defaults/main.yml,
and where that default is a plain value (not a template) the spec states the same value."""

from pathlib import Path

import yaml

ROLE = Path(__file__).parents[2] / "roles/vllm_dual_fast"
SPEC = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())


def is_template(value):
    return "{{" in str(value)


def test_every_default_is_specified_and_every_option_has_a_default():
    assert set(DEFAULTS) == set(SPEC["options"])


def test_spec_defaults_match_the_role_defaults():
    mismatched = {
        name: (option.get("default"), DEFAULTS[name])
        for name, option in SPEC["options"].items()
        if not is_template(DEFAULTS[name]) and option.get("default") != DEFAULTS[name]
    }
    assert mismatched == {}


def test_every_option_is_typed_and_described():
    for name, option in SPEC["options"].items():
        assert option.get("type"), name
        assert str(option.get("description", "")).strip(), name


def test_loading_the_image_archive_waits_as_long_as_a_download_may():
    # community.docker's default API read timeout is 60 s: make demo's 3.5 GB archive of the real
    # vLLM timed out loading on the simulated rig, as a 10 GB vllm-openai archive would on a rig.
    tasks = yaml.safe_load((ROLE / "tasks/model.yml").read_text())
    load = [t for t in tasks if "community.docker.docker_image_load" in t]
    assert len(load) == 1
    assert load[0]["community.docker.docker_image_load"].get("timeout") == \
        "{{ vllm_dual_fast_download_timeout }}"
    assert DEFAULTS["vllm_dual_fast_download_timeout"] >= 3600
