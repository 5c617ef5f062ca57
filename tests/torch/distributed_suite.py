#!/usr/bin/env python3
"""PyTorch's own conformance suite, DistributedTest, against one backend (the way
facebookresearch/torch_ucc runs it for a third-party backend):
    BACKEND=loom WORLD_SIZE=3 python3 distributed_suite.py -v [-k PATTERN ...]
BACKEND is loom (loom_torch on PYTHONPATH) or gloo; WORLD_SIZE defaults to 3, as PyTorch's CI
runs it for gloo on CPU. Every test forks WORLD_SIZE processes that join through a FileStore
(forked, not spawned: a spawned rank spends seconds importing torch, most of a test's time here).
"""
import os
import sys

os.environ.setdefault("BACKEND", "loom")
os.environ.setdefault("WORLD_SIZE", "3")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TEMP_DIR", "/tmp")  # the suite reads it at import; each test makes its own

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if not dist.is_available():
    print("torch.distributed is not available", file=sys.stderr)
    sys.exit(1)

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402

BACKEND = os.environ["BACKEND"]
if BACKEND == "loom":
    import loom_torch

    # What the loom backend implements, for the suite's feature gates (set before its import).
    for feature in ("ddp", "subgroup", "plugin"):
        DistTestCases.backend_feature[feature].add("loom")
    if loom_torch.cuda_supported():
        for feature in ("gpu", "cuda"):
            DistTestCases.backend_feature[feature].add("loom")
    DistTestCases.skip_collective["sendrecv anysource"].add("loom")

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithFork(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._start_processes(torch.multiprocessing.get_context("fork").Process)
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if __name__ == "__main__":
    run_tests()
