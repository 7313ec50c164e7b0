"""Internals of the vLLM test double (vllm-double): not part of real vLLM."""


def release() -> tuple:
    """(major, minor) of the release this tree is laid out as (vllm.__version__, which layout.py
    sets): what the version-dependent parts of the double key on, e.g. ``release() >= (0, 33)``."""
    from vllm import __version__

    return tuple(int(part) for part in __version__.split(".")[:2])
