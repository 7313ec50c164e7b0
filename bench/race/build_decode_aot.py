"""Compile FlashInfer's bf16 batch-decode module ahead of time, on a machine without a GPU.

Run with the FlashInfer release to build on PYTHONPATH (installed with `pip --target`) and a
CPU build of torch; build_flashinfer_slim.sh does that. FlashInfer's own JIT spec generates the
sources and its ninja file compiles them with the local nvcc for FLASHINFER_CUDA_ARCH_LIST. The
finished shared object goes where FlashInfer looks for ahead-of-time modules
(flashinfer/data/aot/<name>/<name>.so), so the GPU machine loads it without compiling.

With --tensor-cores it also builds the fa2 paged prefill module(s) that the decode wrapper
plans and runs with when constructed with use_tensor_cores=True (what vLLM does for GQA groups
above 4, and the only decode path FlashInfer 0.6 has for a group of 6).

Usage: python build_decode_aot.py OUT_DIR [--tensor-cores] [HEAD_DIM ...]
(prints one module name per line)
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main(argv: list) -> int:
    out = Path(argv[0])
    tensor_cores = "--tensor-cores" in argv[1:]
    head_dims = [int(x) for x in argv[1:] if x != "--tensor-cores"] or [256]
    import torch
    from flashinfer.jit.attention import gen_batch_decode_module

    specs = []
    for head_dim in head_dims:
        # Same arguments as BatchDecodeWithPagedKVCacheWrapper.plan() passes for a bf16 cache,
        # int32 indptr, no RoPE in the kernel, no sliding window, no logits soft cap.
        common = (torch.bfloat16, torch.bfloat16, torch.bfloat16, torch.int32,
                  head_dim, head_dim, 0, False, False)
        specs.append(gen_batch_decode_module(*common))
        if tensor_cores:
            from flashinfer import prefill

            args = ("fa2",) + common + (False,)  # + use_fp16_qk_reduction
            if hasattr(prefill, "_gen_batch_prefill_primary_module"):  # 0.7: split modules
                specs.append(prefill._gen_batch_prefill_primary_module(*args))
                specs.append(prefill._gen_batch_prefill_independent_paged_module(*args))
            else:
                from flashinfer.jit.attention import gen_batch_prefill_module

                specs.append(gen_batch_prefill_module(*args))
    for spec in specs:
        spec.build(verbose=False)
        built = Path(spec.jit_library_path)
        dest = out / spec.name / f"{spec.name}.so"
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, dest)
        print(spec.name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
