"""vllm.platforms.cuda (test double): no CUDA here, only the name."""

from .interface import Platform, PlatformEnum


class CudaPlatform(Platform):
    _enum = PlatformEnum.CUDA
    device_name = "cuda"
    device_type = "cuda"
