"""vllm.platforms (test double).

Real vLLM resolves ``current_platform`` lazily and, on a machine without a GPU, ends up with an
unspecified platform, so building the serve parser raises "Failed to infer device type". The
double does the same: it sees a CUDA device only where the NVIDIA runtime would have given the
container GPUs (NVIDIA_VISIBLE_DEVICES set and not void/none), or where VLLM_DOUBLE_DEVICE says
so (cuda, cpu or none). A caller may set ``vllm.platforms._current_platform`` first, as with the
real module.
"""

import os

from .interface import CpuArchEnum, Platform, PlatformEnum, UnspecifiedPlatform  # noqa: F401

_current_platform = None


def visible_gpus():
    """Device ids the container was given, [] for none, None when unknown (all)."""
    value = os.environ.get("NVIDIA_VISIBLE_DEVICES", "").strip()
    if not value or value in ("void", "none"):
        return []
    if value == "all":
        return None
    return [v for v in value.split(",") if v.strip()]


def resolve_current_platform_cls_qualname() -> str:
    forced = os.environ.get("VLLM_DOUBLE_DEVICE", "").strip().lower()
    if forced == "cuda" or (not forced and visible_gpus() != []):
        return "vllm.platforms.cuda.CudaPlatform"
    if forced == "cpu":
        return "vllm.platforms.cpu.CpuPlatform"
    return "vllm.platforms.interface.UnspecifiedPlatform"


def _resolve(qualname):
    import importlib

    module, _, name = qualname.rpartition(".")
    return getattr(importlib.import_module(module), name)


def __getattr__(name):
    if name == "current_platform":
        global _current_platform
        if _current_platform is None:
            _current_platform = _resolve(resolve_current_platform_cls_qualname())()
        return _current_platform
    raise AttributeError(f"No attribute named '{name}' exists in {__name__}.")
