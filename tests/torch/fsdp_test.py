#!/usr/bin/env python3
"""The unmodified FSDP2 script (fsdp_train.py) under torchrun: backend loom ends with the
parameters backend gloo ends with (float64, relative difference <= 1e-9), on a 1-D mesh of 2
ranks, on a 2x2 mesh (HSDP: replicated across, sharded within), and with the buffers taken from
the process group (set_allocate_memory_from_process_group: loom's shared windows). PyTorch 2.15.

    PYTHONPATH=build/python-2 V/bin/python fsdp_test.py -v
"""
import os
import sys
import tempfile
import unittest

import torch

from launch_test import relative_difference, torchrun, train

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "fsdp_train.py")
TOLERANCE = 1e-9


class LoomShardsAsGlooDoes(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def check(self, ranks, extra=(), gloo_extra=None):
        gloo = train(torchrun, ranks, "gloo", self.dir.name, SCRIPT,
                     extra if gloo_extra is None else gloo_extra)
        loom = train(torchrun, ranks, "loom", self.dir.name, SCRIPT, extra)
        difference = relative_difference(loom, gloo)
        print(f"FSDP2 {ranks} ranks {' '.join(extra)}: relative difference {difference:.3g}")
        self.assertLessEqual(difference, TOLERANCE)

    def test_1d_mesh_2_ranks(self):
        self.check(2)

    def test_2x2_mesh_4_ranks(self):
        self.check(4, ("--mesh", "2x2"))

    def test_buffers_from_the_process_group(self):
        # gloo cannot allocate: it trains with ordinary buffers, loom from its windows.
        self.check(2, ("--alloc-from-pg",), gloo_extra=())


if __name__ == "__main__":
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        print(f"PyTorch {torch.__version__} has no FSDP2 (fully_shard): nothing to test")
        sys.exit(77)
    unittest.main()
