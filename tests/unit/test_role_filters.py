"""The role's parsing filters, on the output shapes the real tools print."""

import importlib.util
from pathlib import Path

import pytest
from ansible.module_utils.vllm_dual_fast_domain import verdict as health
from vllm_double_fixtures import role_cfg, role_serve_args

_PATH = Path(__file__).parents[2] / "roles/vllm_dual_fast/filter_plugins/vllm_dual_fast.py"
_spec = importlib.util.spec_from_file_location("vdf_filters", _PATH)
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)
# The health check's parts live beside its verdict, in the domain library
# (module_utils/vllm_dual_fast_domain/verdict.py).

TWO_3090 = (
    "0, NVIDIA GeForce RTX 3090, 24576 MiB, 580.95.05, 00000000:01:00.0, 8.6\n"
    "1, NVIDIA GeForce RTX 3090, 24576 MiB, 580.95.05, 00000000:02:00.0, 8.6\n"
)


def test_nvidia_smi_csv_parses_both_gpus():
    gpus = filters.nvidia_smi_gpus(TWO_3090)
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[1] == {
        "index": 1,
        "name": "NVIDIA GeForce RTX 3090",
        "memory_mib": 24576,
        "driver_version": "580.95.05",
        "pci_bus_id": "00000000:02:00.0",
        "compute_cap": "8.6",
    }


def test_nvidia_smi_csv_rejects_a_shape_it_does_not_know():
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        filters.nvidia_smi_gpus("0, RTX 3090, 24576 MiB\n")


def test_lspci_keeps_only_nvidia_display_controllers():
    out = (
        "0000:00:02.0 VGA compatible controller [0300]: Intel Corporation UHD [8086:9bc5]\n"
        "0000:01:00.0 VGA compatible controller [0300]: NVIDIA Corporation GA102 [GeForce RTX 3090]"
        " [10de:2204] (rev a1)\n"
        "0000:01:00.1 Audio device [0403]: NVIDIA Corporation GA102 High Definition Audio"
        " [10de:1aef] (rev a1)\n"
        "0000:02:00.0 VGA compatible controller [0300]: NVIDIA Corporation GA102 [GeForce RTX 3090]"
        " [10de:2204] (rev a1)\n"
    )
    gpus = filters.lspci_nvidia_gpus(out)
    assert [g["pci_bus_id"] for g in gpus] == ["0000:01:00.0", "0000:02:00.0"]


@pytest.mark.parametrize(
    ("cell", "expected"), [("NV4", True), ("PHB", False), ("SYS", False), ("NODE", False)]
)
def test_topo_matrix_nvlink_detection(cell, expected):
    topo = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n"
        f"GPU0\t X \t{cell}\t0-15\t0\n"
        f"GPU1\t{cell}\t X \t0-15\t0\n\n"
        "Legend:\n  NV#  = Connection traversing a bonded set of # NVLinks\n"
    )
    assert filters.nvidia_topo_has_nvlink(topo) is expected


@pytest.mark.parametrize(
    ("cap", "minimum", "ok"),
    [("8.6", "8.6", True), ("8.9", "8.6", True), ("8.10", "8.9", True), ("7.5", "8.6", False),
     ("8.0", "8.6", False), ("12.0", "8.6", True)],
)
def test_compute_capability_compares_numerically(cap, minimum, ok):
    assert filters.compute_cap_at_least(cap, minimum) is ok


def test_daemon_json_merge_keeps_owner_keys_and_nested_values():
    owner = {
        "labels": ["mine"],
        "log-opts": {"max-size": "10m", "labels": "owner"},
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},
    }
    ours = {"log-driver": "json-file", "log-opts": {"max-size": "50m"}}
    merged = filters.daemon_json_merge(owner, ours)
    assert merged == {
        "labels": ["mine"],
        "log-driver": "json-file",
        "log-opts": {"max-size": "50m", "labels": "owner"},
        "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},
    }
    assert owner["log-opts"]["max-size"] == "10m", "the owner's dict must not be mutated"
    assert filters.daemon_json_merge(merged, {"log-opts": {"max-size": "50m"}}) == merged


REFERENCE = {
    "model": "Org/Model", "served_model_name": "m", "quantization": "", "revision": "main",
    "dtype": "bfloat16", "tensor_parallel_size": 2, "max_model_len": 65536,
    "gpu_memory_utilization": 0.9, "max_num_seqs": 4, "max_num_batched_tokens": 8192,
    "kv_cache_dtype": "fp8_e4m3", "prefix_caching": True, "chunked_prefill": True,
    "reasoning_parser": "qwen3", "tool_call_parser": "qwen3_coder", "tool_calling": True,
    "mtp": True,
    "mtp_num_speculative_tokens": 4, "nvlink": False, "w4a8": True, "patch_all_files": False,
    "extra_args": [],
}


def flag_value(args, flag):
    return args[args.index(flag) + 1]


def test_serve_args_carry_the_reference_configuration():
    args = filters.serve_args(REFERENCE)
    assert args[0] == "Org/Model"
    assert flag_value(args, "--tensor-parallel-size") == "2"
    assert flag_value(args, "--max-num-seqs") == "4"
    assert flag_value(args, "--kv-cache-dtype") == "fp8_e4m3"
    assert flag_value(args, "--speculative-config") == '{"method":"mtp","num_speculative_tokens":4}'
    assert "--enable-prefix-caching" in args and "--enable-chunked-prefill" in args
    assert "--disable-custom-all-reduce" in args


def test_prefix_caching_and_chunked_prefill_off_are_said_since_vllm_turns_both_on_by_default():
    # Found on the real vLLM 0.27.1 (the real_engine rig): with neither flag its V1 engine
    # caches prefixes, which with MTP on a CPU dies at the first request.
    args = filters.serve_args(dict(REFERENCE, prefix_caching=False, chunked_prefill=False))
    assert "--no-enable-prefix-caching" in args and "--enable-prefix-caching" not in args
    assert "--no-enable-chunked-prefill" in args and "--enable-chunked-prefill" not in args


def test_nvlink_keeps_custom_all_reduce_and_p2p():
    cfg = dict(REFERENCE, nvlink=True)
    assert "--disable-custom-all-reduce" not in filters.serve_args(cfg)
    assert "NCCL_P2P_DISABLE" not in filters.serve_environment(cfg)
    assert filters.serve_environment(REFERENCE)["NCCL_P2P_DISABLE"] == "1"


def test_mtp_off_drops_the_speculative_config_and_extra_args_are_appended():
    args = filters.serve_args(dict(REFERENCE, mtp=False, extra_args=["--seed", 7]))
    assert "--speculative-config" not in args
    assert args[-2:] == ["--seed", "7"]


def test_marlin_int8_is_absent_not_empty_when_w4a8_is_off():
    assert filters.serve_environment(REFERENCE)["VLLM_MARLIN_INPUT_DTYPE"] == "int8"
    assert "VLLM_MARLIN_INPUT_DTYPE" not in filters.serve_environment(dict(REFERENCE, w4a8=False))
    all_files = filters.serve_environment(dict(REFERENCE, patch_all_files=True))
    assert all_files["FI_PINQ_LIB_ALL"] == "1"


def test_entrypoint_patches_before_serving_and_reads_the_key_from_the_secret_file():
    script = filters.entrypoint_script(["Org/Model", "--speculative-config", '{"a":1}'], True, True)
    lines = script.splitlines()
    assert lines[0] == "set -e"
    assert lines[1] == "sh /opt/vdf-patches/install.sh"
    assert lines[2] == 'VLLM_API_KEY="$$(cat /run/secrets/vllm_api_key)"; export VLLM_API_KEY'
    assert lines[3] == "exec vllm serve Org/Model --speculative-config '{\"a\":1}'"
    assert "--api-key" not in script
    unpatched = filters.entrypoint_script(["Org/Model"], False, False)
    assert "install.sh" not in unpatched and "VLLM_API_KEY" not in unpatched
    assert "/run/secrets" not in unpatched


# --- the role's own settings (deploy.yml's _cfg from defaults/main.yml) ---------------------

def test_role_defaults_leave_the_quantization_to_the_checkpoint():
    assert role_cfg()["quantization"] == ""
    assert "--quantization" not in role_serve_args()


def test_empty_quantization_passes_no_flag_and_a_name_is_forced():
    assert "--quantization" not in filters.serve_args(REFERENCE)
    assert flag_value(role_serve_args(vllm_dual_fast_quantization="inc"), "--quantization") == "inc"


def test_tool_calling_passes_the_parser_with_auto_tool_choice():
    args = role_serve_args()
    assert "--enable-auto-tool-choice" in args
    assert flag_value(args, "--tool-call-parser") == "qwen3_coder"
    args = filters.serve_args(REFERENCE)
    assert "--enable-auto-tool-choice" in args and "--tool-call-parser" in args


@pytest.mark.parametrize("cfg", [
    dict(REFERENCE, tool_calling=False),
    dict(REFERENCE, tool_call_parser=""),  # auto tool choice without a parser is refused by vLLM
])
def test_tool_calling_off_or_no_parser_passes_neither_flag(cfg):
    args = filters.serve_args(cfg)
    assert "--enable-auto-tool-choice" not in args and "--tool-call-parser" not in args


def test_tool_calling_off_from_the_role_variable():
    args = role_serve_args(vllm_dual_fast_tool_calling=False)
    assert "--enable-auto-tool-choice" not in args and "--tool-call-parser" not in args


def test_model_revision_reaches_the_server_and_the_release():
    commit = "0123456789abcdef0123456789abcdef01234567"
    args = role_serve_args(vllm_dual_fast_model_revision=commit)
    assert flag_value(args, "--revision") == commit
    assert flag_value(args, "--tokenizer-revision") == commit
    assert flag_value(role_serve_args(), "--revision") == "main"
    scripts = {filters.entrypoint_script(role_serve_args(vllm_dual_fast_model_revision=rev),
                                         True, False) for rev in ("main", commit)}
    assert len(scripts) == 2, "a new revision must change the release's content"


def test_empty_revision_passes_neither_flag():
    args = filters.serve_args(dict(REFERENCE, revision=""))
    assert "--revision" not in args and "--tokenizer-revision" not in args


HEALTHY = {
    "smoke": {"ok": True, "failures": []}, "smoke_stderr": "", "concurrency": 4,
    "kernel_log": ["usb 1-1: new device"], "restarts_before": "0", "restarts_after": "0",
    "patch": {"status": "already-patched"},
}


def test_a_healthy_release_has_no_failures():
    assert health.health_failures(HEALTHY) == []
    assert health.health_failures(dict(HEALTHY, patch={"status": "upstream-fixed"})) == []


def test_each_failed_check_is_named():
    failures = health.health_failures(dict(
        HEALTHY,
        smoke={"ok": False, "failures": ["request 3: RemoteDisconnected"]},
        kernel_log=["NVRM: Xid (PCI:0000:01:00): 31, pid=42"],
        restarts_after="1",
        patch={},
        patch_stderr="Error response from daemon: Container 3f2a is restarting, wait until the"
                     " container is running",
    ))
    assert failures == [
        "smoke c=4 failed: request 3: RemoteDisconnected",
        "new kernel Xid lines: NVRM: Xid (PCI:0000:01:00): 31, pid=42",
        "container restart count went from 0 to 1",
        "FlashInfer patch status unknown: the container was not running when it was asked",
    ]


def test_patch_off_passes_an_upstream_fixed_image():
    checks = dict(HEALTHY, patch_enabled=False, race_exposed=True, max_num_seqs=4,
                  patch={"status": "upstream-fixed"})
    assert health.health_failures(checks) == []


def test_patch_off_refuses_a_pinned_image_when_mtp_and_four_sequences_expose_the_race():
    checks = dict(HEALTHY, patch_enabled=False, race_exposed=True, max_num_seqs=4,
                  patch={"status": "unpatched"})
    [failure] = health.health_failures(checks)
    assert "pins the decode plan buffer" in failure and "max_num_seqs 4" in failure
    assert "Xid 31" in failure and "vllm_dual_fast_patch_enabled" in failure


def test_patch_off_accepts_a_pinned_image_when_the_race_is_not_exposed():
    checks = dict(HEALTHY, patch_enabled=False, race_exposed=False, max_num_seqs=1,
                  patch={"status": "unpatched"})
    assert health.health_failures(checks) == []


def test_no_smoke_output_and_no_container_are_failures():
    failures = health.health_failures(dict(
        HEALTHY, smoke={}, smoke_stderr="Traceback", restarts_before="", restarts_after="",
        patch={"status": "unpatched"}))
    assert failures[0] == "smoke c=4 failed: Traceback"
    assert "container restart count went from none to none" in failures
    assert failures[-1].startswith("FlashInfer patch status is unpatched")


def test_json_object_tolerates_what_a_failed_tool_prints():
    assert health.json_object('{"status": "patched"}') == {"status": "patched"}
    assert health.json_object("") == {}
    assert health.json_object("Error: No such container") == {}
    assert health.json_object("[1, 2]") == {}
