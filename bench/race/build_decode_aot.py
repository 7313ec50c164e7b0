"""Compile FlashInfer's bf16 batch-decode module ahead of time, on a machine without a GPU.

Run with the FlashInfer release to build on PYTHONPATH (installed with `pip --target`) and a
CPU build of torch; build_flashinfer_slim.sh does that. FlashInfer's own JIT spec generates the
sources and its ninja file compiles them with the local nvcc for FLASHINFER_CUDA_ARCH_LIST. The
finished shared object goes where FlashInfer looks for ahead-of-time modules
(flashinfer/data/aot/<name>/<name>.so), so the GPU machine loads it without compiling.

Usage: python build_decode_aot.py OUT_DIR [HEAD_DIM ...]   (prints one module name per line)
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main(argv: list) -> int:
    out = Path(argv[0])
    head_dims = [int(x) for x in argv[1:]] or [256]
    import torch
    from flashinfer.jit.attention import gen_batch_decode_module

    for head_dim in head_dims:
        # Same arguments as BatchDecodeWithPagedKVCacheWrapper.plan() passes for a bf16 cache,
        # int32 indptr, no RoPE in the kernel, no sliding window, no logits soft cap.
        spec = gen_batch_decode_module(
            torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32,
            head_dim, head_dim, 0, False, False,
        )
        spec.build(verbose=False)
        built = Path(spec.jit_library_path)
        dest = out / spec.name / f"{spec.name}.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, dest)
        print(spec.name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
