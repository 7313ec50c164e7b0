"""The monitoring role's alert rules (roles/vllm_dual_fast_monitoring/templates/etc/prometheus/
rules/vllm-dual-fast.rules.yml.j2), rendered by the real template module with the role's
defaults, checked and unit-tested by this machine's promtool (tests/promtool/*.test.yml, each
alert firing and not firing); every metric the rules name is one the rigs, vLLM or the pull
reports write, and every alert tells its severity, what it means and what to do first."""

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible_runner import run_playbook

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles/vllm_dual_fast_monitoring"
TEMPLATE = ROLE / "templates/etc/prometheus/rules/vllm-dual-fast.rules.yml.j2"
RULES = "vllm-dual-fast.rules.yml"
UNIT_TESTS = ROOT / "tests/promtool"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

_spec = importlib.util.spec_from_file_location("vdf_rig_metrics", ROOT / "files/rig_metrics.py")
rig_metrics = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rig_metrics)

# vLLM's own series (vllm/v1/metrics/loggers.py, PrometheusStatLogger; spec decoding's counters
# in vllm/v1/spec_decode/metrics.py); a histogram's series are its _bucket, _sum and _count.
VLLM_METRICS = {
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:generation_tokens_total",
    "vllm:kv_cache_usage_perc", "vllm:num_preemptions_total",
    "vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
}
VLLM_HISTOGRAMS = {"vllm:time_to_first_token_seconds"}
# What the monitoring host makes of pull rigs' uploads (files/pull_metrics.py).
PULL_METRICS = {"vdf_pull_report_timestamp_seconds", "vdf_pull_state"}
# What the engine guard's watch writes for node_exporter (its script, as the role renders it).
GUARD_METRICS = set(re.findall(
    r"^# TYPE (vdf_engine_guard_\w+) ", (ROOT / "roles/vllm_dual_fast/templates/usr/local/sbin/"
                                        "vllm-dual-fast-engine-guard.j2").read_text(), re.M))
# Prometheus' and Alertmanager's own series (jobs prometheus and alertmanager: the pipeline alerts).
PIPELINE_METRICS = {"alertmanager_notifications_failed_total",
                    "prometheus_rule_evaluation_failures_total",
                    "prometheus_notifications_dropped_total",
                    "prometheus_notifications_alertmanagers_discovered"}
KNOWN = (set(rig_metrics.METRICS) | VLLM_METRICS | PULL_METRICS | GUARD_METRICS | {"up"}
         | PIPELINE_METRICS
         | {h + suffix for h in VLLM_HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")})

# PromQL words that are not series: aggregations, set and matching operators, modifiers.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "offset", "bool", "atan2", "inf", "nan",
}
# A name, not inside another word or number, and not a function call.
NAME = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")
OVERRIDES = {
    "vllm_dual_fast_monitoring_gpu_temperature_celsius": 90,
    "vllm_dual_fast_monitoring_pcie_width_min": 8,
    "vllm_dual_fast_monitoring_xid_critical_codes": [31, 79, 48],
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """{"defaults": folder, "overridden": folder}, each with the rendered rules; one playbook run
    renders both (task vars win over the play's vars_files, as an inventory's would)."""
    tmp_path = tmp_path_factory.mktemp("monitoring-rules")
    folders = {"defaults": tmp_path / "defaults", "overridden": tmp_path / "overridden"}
    for folder in folders.values():
        folder.mkdir()
    tasks = [{"name": f"Render the rules ({name})",
              "ansible.builtin.template": {"src": str(TEMPLATE), "dest": str(folder / RULES),
                                           "mode": "0644"},
              **({"vars": OVERRIDES} if name == "overridden" else {})}
             for name, folder in folders.items()]
    result, out = run_playbook(tmp_path, [{
        "name": "Render the monitoring rules", "hosts": "localhost", "gather_facts": False,
        "vars_files": [str(ROLE / "defaults/main.yml")], "tasks": tasks}],
        env={"ANSIBLE_FILTER_PLUGINS": str(ROLE / "filter_plugins")})
    assert result.returncode == 0, out
    return folders


def promtool(*args, cwd):
    run = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60,
                         check=False, cwd=cwd)
    return run.returncode, run.stdout + run.stderr


def rules_of(folder):
    groups = yaml.safe_load((folder / RULES).read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def series_names(expr):
    """The series an expression selects: label matchers, label lists, ranges and offsets out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1 ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    return {name for name in NAME.findall(expr) if name not in PROMQL_WORDS}


def test_promtool_checks_the_rendered_rules(rendered):
    for folder in rendered.values():
        rc, out = promtool("check", "rules", RULES, cwd=folder)
        assert rc == 0, out


def test_promtool_unit_tests_pass(rendered):
    folder = rendered["defaults"]
    tests = sorted(UNIT_TESTS.glob("*.test.yml"))
    assert tests
    for test in tests:
        shutil.copy(test, folder / test.name)
    rc, out = promtool("test", "rules", *(test.name for test in tests), cwd=folder)
    assert rc == 0, out


def test_every_alert_fires_and_stays_quiet_in_a_unit_test(rendered):
    alerts = {rule["alert"] for rule in rules_of(rendered["defaults"])}
    firing, quiet = set(), set()
    for test in UNIT_TESTS.glob("*.test.yml"):
        for case in yaml.safe_load(test.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts - firing == set(), "never seen firing"
    assert alerts - quiet == {"VllmDualFastWatchdog"}, "never seen quiet"    # it never is
    assert (firing | quiet) - alerts == set(), "tested but not in the rules"


def test_every_series_named_is_one_that_is_written(rendered):
    named = set()
    for rule in rules_of(rendered["defaults"]):
        names = series_names(rule["expr"])
        assert names or rule["expr"].strip() == "vector(1)", rule["alert"]    # the watchdog
        named |= names
    assert named - KNOWN == set()
    # The parser sees what it should: a name before a matcher, a range, a parenthesis or the end.
    assert {"vdf_gpu_xid_total", "vllm:time_to_first_token_seconds_bucket", "up",
            "vdf_last_good_mtp_mean_acceptance_length", "vdf_gpu_pcie_link_width_max"} <= named
    assert series_names('rate(vdf_gpu_xid_totals{code="31"}[5m]) > 1e3 offset 10m') == {
        "vdf_gpu_xid_totals"}


def test_a_changed_threshold_lands_in_the_rules(rendered):
    by_name = {rule["alert"]: rule for rule in rules_of(rendered["overridden"])}
    defaults = {rule["alert"]: rule for rule in rules_of(rendered["defaults"])}
    assert by_name["VllmDualFastGpuTemperatureHigh"]["expr"].strip() == (
        "vdf_gpu_temperature_celsius >= 90")
    assert "90 °C or more" in by_name["VllmDualFastGpuTemperatureHigh"]["annotations"]["summary"]
    assert defaults["VllmDualFastGpuTemperatureHigh"]["expr"].strip() == (
        "vdf_gpu_temperature_celsius >= 83")
    assert "vdf_gpu_pcie_link_width < 8" in by_name["VllmDualFastGpuPcieLinkNarrow"]["expr"]
    assert "vdf_gpu_pcie_link_width_max" in defaults["VllmDualFastGpuPcieLinkNarrow"]["expr"]
    assert 'code=~"31|79|48"' in by_name["VllmDualFastGpuXidCritical"]["expr"]
    assert 'code!~"31|79|48"' in by_name["VllmDualFastGpuXid"]["expr"]


def test_every_variable_is_used_has_a_default_and_a_spec():
    """Every default is read by the rules or by another of the role's files, every variable the
    rules read has a default, and every default is in meta/argument_specs.yml (validated)."""
    defaults = set(yaml.safe_load((ROLE / "defaults/main.yml").read_text()))
    filters = set(re.findall(r'"(vllm_dual_fast_monitoring_\w+)":', (
        ROLE / "filter_plugins/vllm_dual_fast_monitoring.py").read_text()))
    in_rules = set(re.findall(r"\bvllm_dual_fast_monitoring_\w+", TEMPLATE.read_text())) - filters
    elsewhere = set()
    for path in [*ROLE.glob("tasks/*.yml"), *ROLE.rglob("templates/**/*.j2")]:
        if path != TEMPLATE:
            elsewhere |= set(re.findall(r"\bvllm_dual_fast_monitoring_\w+", path.read_text()))
    assert in_rules <= defaults
    assert defaults == in_rules | (elsewhere & defaults), defaults - in_rules - elsewhere
    specs = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())
    assert set(specs["argument_specs"]["main"]["options"]) == defaults


def test_every_alert_has_a_severity_a_summary_an_action_and_a_runbook(rendered):
    text = (rendered["defaults"] / RULES).read_text()
    assert "{{ $labels.rig }}" in text       # Prometheus' templates came through Jinja raw
    assert "{%" not in text and "{{ '" not in text
    readme = (ROLE / "README.md").read_text()
    groups = yaml.safe_load(text)["groups"]
    assert [group["name"] for group in groups] == ["vllm-dual-fast", "vllm-dual-fast-pipeline"]
    for group in groups:
        for rule in group["rules"]:
            name, annotations = rule["alert"], rule["annotations"]
            assert rule["labels"]["severity"] in (
                ("none",) if name == "VllmDualFastWatchdog" else ("critical", "warning")), name
            assert set(annotations) == {"summary", "action", "runbook_url"}, name
            if group["name"] == "vllm-dual-fast":    # the pipeline's are the host's own
                assert "{{ $labels.rig }}" in annotations["summary"], name
            if "vdf_gpu_" in rule["expr"]:
                assert re.search(r"\$labels\.(gpu|pci)\b", annotations["summary"]), name
            assert len(annotations["action"].split()) >= 10, name
            # the row of README.md that says what to do, anchored by the alert's name
            assert annotations["runbook_url"] == (
                f"roles/vllm_dual_fast_monitoring/README.md#{name.lower()}"), name
            assert f'<a id="{name.lower()}"></a>`{name}`' in readme, name
