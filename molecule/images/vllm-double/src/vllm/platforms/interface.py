"""vllm.platforms.interface (test double)."""

import enum


class PlatformEnum(enum.Enum):
    CUDA = enum.auto()
    CPU = enum.auto()
    UNSPECIFIED = enum.auto()


class CpuArchEnum(enum.Enum):
    X86 = enum.auto()
    ARM = enum.auto()
    OTHER = enum.auto()


class Platform:
    _enum = PlatformEnum.UNSPECIFIED
    device_name = ""
    device_type = ""

    def is_cuda(self) -> bool:
        return self._enum == PlatformEnum.CUDA

    def is_cpu(self) -> bool:
        return self._enum == PlatformEnum.CPU

    def is_unspecified(self) -> bool:
        return self._enum == PlatformEnum.UNSPECIFIED


class UnspecifiedPlatform(Platform):
    _enum = PlatformEnum.UNSPECIFIED
    device_type = ""
