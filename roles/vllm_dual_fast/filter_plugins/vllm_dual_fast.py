"""Pure parsing helpers for the role: tool output in, plain data out (tested in tests/)."""

import json
import re
import shlex

_TOPO_GPU_ROW = re.compile(r"^GPU(\d+)\s")


def nvidia_smi_gpus(stdout):
    """Parse `nvidia-smi --query-gpu=index,name,memory.total,driver_version,pci.bus_id,
    compute_cap --format=csv,noheader` into a list of dicts (memory in MiB)."""
    gpus = []
    for line in stdout.splitlines():
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 6:
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        index, name, memory, driver, bus_id, cap = fields
        gpus.append(
            {
                "index": int(index),
                "name": name,
                "memory_mib": int(memory.split()[0]),
                "driver_version": driver,
                "pci_bus_id": bus_id,
                "compute_cap": cap,
            }
        )
    return gpus


def lspci_nvidia_gpus(stdout):
    """NVIDIA display/3D controllers from `lspci -Dnn`; memory and driver are unknown before
    a driver is loaded, so only what lspci can say is kept."""
    gpus = []
    for line in stdout.splitlines():
        if "[10de:" not in line or not re.search(r"\[03(00|02)\]", line):
            continue
        bus_id, _, rest = line.partition(" ")
        gpus.append({"index": len(gpus), "name": rest.split(": ", 1)[-1], "pci_bus_id": bus_id})
    return gpus


def nvidia_topo_has_nvlink(stdout):
    """True when `nvidia-smi topo -m` links some pair of GPUs with NVLink (an `NV<n>` cell)."""
    for line in stdout.splitlines():
        if _TOPO_GPU_ROW.match(line) and re.search(r"\bNV\d+\b", line):
            return True
    return False


def compute_cap_at_least(cap, minimum):
    """Compare "8.6"-style capabilities numerically (8.10 is newer than 8.9)."""

    def as_tuple(value):
        return tuple(int(part) for part in str(value).split("."))

    return as_tuple(cap) >= as_tuple(minimum)


def daemon_json_merge(existing, options):
    """Merge the role's daemon.json options into the owner's: nested dicts merge, the role's
    scalar values win for the keys it manages, every other key survives untouched."""
    merged = dict(existing or {})
    for key, value in (options or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = daemon_json_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def serve_args(cfg):
    """The `vllm serve` argv (after `serve`) for a settings dict taken from the role's variables.
    Without NVLink the 3090s have no fast peer path: custom all-reduce is turned off.
    An empty quantization passes no --quantization: vLLM reads the method from the checkpoint's
    config (AutoRound checkpoints load as `inc`; vLLM 0.27.1 knows no `auto_round`). A revision
    pins weights and tokenizer alike. A tool-call parser is only loaded together with
    --enable-auto-tool-choice, and that flag is refused without a parser: both or neither."""
    args = [
        cfg["model"],
        "--served-model-name", cfg["served_model_name"],
        # All interfaces of the container only; the host publishes the port on loopback by default.
        "--host", "0.0.0.0",  # noqa: S104
        "--port", "8000",
    ]
    if cfg.get("revision"):
        args += ["--revision", str(cfg["revision"]), "--tokenizer-revision", str(cfg["revision"])]
    if cfg.get("quantization"):
        args += ["--quantization", cfg["quantization"]]
    args += [
        "--dtype", cfg["dtype"],
        "--tensor-parallel-size", str(cfg["tensor_parallel_size"]),
        "--max-model-len", str(cfg["max_model_len"]),
        "--gpu-memory-utilization", str(cfg["gpu_memory_utilization"]),
        "--max-num-seqs", str(cfg["max_num_seqs"]),
        "--max-num-batched-tokens", str(cfg["max_num_batched_tokens"]),
        "--kv-cache-dtype", cfg["kv_cache_dtype"],
    ]
    # The pool a fit pinned (playbooks/fit.yml): vLLM then skips its memory profile, whose
    # result moves with whatever else holds the card at start (0: vLLM sizes the pool).
    if int(cfg.get("kv_cache_memory_bytes") or 0) > 0:
        args += ["--kv-cache-memory-bytes", str(int(cfg["kv_cache_memory_bytes"]))]
    # Both ways spelled out: vLLM's V1 engine turns both on when neither flag is given.
    args.append("--enable-prefix-caching" if cfg.get("prefix_caching")
                else "--no-enable-prefix-caching")
    args.append("--enable-chunked-prefill" if cfg.get("chunked_prefill")
                else "--no-enable-chunked-prefill")
    if cfg.get("reasoning_parser"):
        args += ["--reasoning-parser", cfg["reasoning_parser"]]
    if cfg.get("tool_calling", True) and cfg.get("tool_call_parser"):
        args += ["--enable-auto-tool-choice", "--tool-call-parser", cfg["tool_call_parser"]]
    if cfg.get("mtp"):
        spec = {"method": "mtp", "num_speculative_tokens": int(cfg["mtp_num_speculative_tokens"])}
        args += ["--speculative-config", json.dumps(spec, separators=(",", ":"))]
    if not cfg.get("nvlink"):
        args.append("--disable-custom-all-reduce")
    return args + [str(a) for a in cfg.get("extra_args", [])]


def serve_environment(cfg):
    """Non-secret environment of the vLLM container. VLLM_MARLIN_INPUT_DTYPE is absent (never
    empty) when W4A8 is off, since vLLM treats an empty value as a request."""
    env = {
        "NCCL_CUMEM_ENABLE": "0",
        "VLLM_WORKER_MULTIPROC_METHOD": "spawn",
        "VLLM_USE_FLASHINFER_SAMPLER": "0",
        "OMP_NUM_THREADS": "1",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "HF_HOME": "/root/.cache/huggingface",
        "HF_HUB_OFFLINE": "1",  # weights were downloaded ahead; a start never waits on the hub
    }
    if p2p_disabled(cfg):
        env["NCCL_P2P_DISABLE"] = "1"
    if cfg.get("w4a8"):
        env["VLLM_MARLIN_INPUT_DTYPE"] = "int8"
    if cfg.get("patch_all_files"):
        env["FI_PINQ_LIB_ALL"] = "1"
    return env


def p2p_disabled(cfg):
    """NCCL's peer path off: as the P2P check decided (cfg p2p_decision "p2p" or "no-p2p",
    tasks/p2p_check.yml), else, with no decision, whenever there is no NVLink."""
    decided = str(cfg.get("p2p_decision") or "")
    if decided in ("p2p", "no-p2p"):
        return decided == "no-p2p"
    return not cfg.get("nvlink")


API_KEY_SECRET = "/run/secrets/vllm_api_key"  # noqa: S105 (a path: Compose mounts api-key here)


def entrypoint_script(args, patch_enabled, api_key_set):
    """The container's shell entrypoint: patch FlashInfer (set -e: never serve unpatched), then
    exec vllm serve. With an API key, vLLM reads it from VLLM_API_KEY, exported from the Compose
    secret file, so the key is neither on the command line (`ps`) nor in the container's
    configured environment (`docker inspect`). `$$` is Compose's escape for a literal `$`."""
    lines = ["set -e"]
    if patch_enabled:
        lines.append("sh /opt/vdf-patches/install.sh")
    if api_key_set:
        # set -e: an unreadable secret stops the start (the assignment takes cat's status).
        lines.append(f'VLLM_API_KEY="$$(cat {API_KEY_SECRET})"; export VLLM_API_KEY')
    lines.append("exec vllm serve " + " ".join(shlex.quote(a) for a in args))
    return "\n".join(lines) + "\n"


class FilterModule:
    def filters(self):
        return {
            "vllm_dual_fast_nvidia_smi_gpus": nvidia_smi_gpus,
            "vllm_dual_fast_lspci_gpus": lspci_nvidia_gpus,
            "vllm_dual_fast_topo_has_nvlink": nvidia_topo_has_nvlink,
            "vllm_dual_fast_cap_at_least": compute_cap_at_least,
            "vllm_dual_fast_daemon_json_merge": daemon_json_merge,
            "vllm_dual_fast_serve_args": serve_args,
            "vllm_dual_fast_serve_environment": serve_environment,
            "vllm_dual_fast_entrypoint_script": entrypoint_script,
        }
