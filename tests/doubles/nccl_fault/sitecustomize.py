"""TEST DOUBLE of a board that grants a peer path it cannot keep (what NCCL does there on real
cards: community reports of a hang at ncclCommInitRank or the first collective, and of garbage
sums with a patched P2P driver; issue 46). On PYTHONPATH, with VDF_P2P_FAULT set and
NCCL_P2P_DISABLE not 1, torch.distributed.all_reduce hangs (VDF_P2P_FAULT=hang) or returns the
sum plus one in every element (wrong); with NCCL_P2P_DISABLE=1 it is torch's own, unless
VDF_P2P_FAULT_BOTH=1 (a board whose all-reduce fails through host memory too). Only
files/p2p_check.py's tests use it."""

import os
import time

_FAULT = os.environ.get("VDF_P2P_FAULT", "")

_BOTH = os.environ.get("VDF_P2P_FAULT_BOTH") == "1"

if _FAULT in ("hang", "wrong") and (_BOTH or os.environ.get("NCCL_P2P_DISABLE") != "1"):
    import torch.distributed as _dist

    _real_all_reduce = _dist.all_reduce

    def _faulty_all_reduce(tensor, *args, **kwargs):
        if _FAULT == "hang":
            while True:
                time.sleep(3600)
        result = _real_all_reduce(tensor, *args, **kwargs)
        tensor.add_(1)
        return result

    _dist.all_reduce = _faulty_all_reduce
