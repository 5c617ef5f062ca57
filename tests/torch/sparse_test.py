#!/usr/bin/env python3
"""all_reduce of sparse (COO) tensors on the loom backend, as gloo's: ReduceOp.SUM on CPU; every
rank's nonzeros gathered (a different count on each rank, none on some) and summed, the coalesced
sum written into each rank's tensor. Exact values (integers, or floats that are small integers);
each test's ranks are forked processes joined through a FileStore.

    PYTHONPATH=build/python python3 sparse_test.py -v [-k NAME]
"""
import os
import unittest

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import loom_torch  # noqa: E402
from forked_ranks import run_ranks  # noqa: E402

# PyTorch 2.x checks each sparse tensor made where asked to (and warns on each where not told).
if hasattr(torch.sparse, "check_sparse_tensor_invariants"):
    torch.sparse.check_sparse_tensor_invariants.enable()


def rank_tensor(rank, dtype=torch.float32):
    """A 6 x 2 hybrid tensor (one sparse and one dense dimension), rank r's rows r and 5 set to
    r + 1, the row 5 twice (uncoalesced); rank 2 has no nonzero at all."""
    if rank == 2:
        return torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.long),
                                       torch.zeros((0, 2), dtype=dtype), (6, 2))
    indices = torch.tensor([[rank, 5, 5]])
    values = torch.full((3, 2), rank + 1, dtype=dtype)
    return torch.sparse_coo_tensor(indices, values, (6, 2))


def sums_every_ranks_nonzeros(rank, world):
    # float16 is summed by PyTorch here and moved by Loom as float16; int16 Loom moves as bytes.
    for dtype in (torch.float32, torch.int64, torch.float64, torch.float16, torch.int16):
        t = rank_tensor(rank, dtype)
        expected = sum(rank_tensor(r, dtype).to_dense() for r in range(world))
        dist.all_reduce(t)
        assert t.is_sparse and t.is_coalesced(), t
        assert torch.equal(t.to_dense(), expected), (dtype, t.to_dense(), expected)
        assert t._nnz() == 3, t  # rows 0, 1 and 5


def matrix_tensor(rank):
    """A 4 x 5 matrix (two sparse dimensions), rank r's nonzeros r + 1 of them, one shared by
    every rank at (3, 4)."""
    points = [(3, 4)] + [(rank, c) for c in range(rank)]
    indices = torch.tensor(points, dtype=torch.long).t()
    return torch.sparse_coo_tensor(indices, torch.arange(1, rank + 2, dtype=torch.int32), (4, 5))


def sums_two_sparse_dimensions_of_uneven_counts(rank, world):
    t = matrix_tensor(rank)
    expected = sum(matrix_tensor(r).to_dense() for r in range(world))
    dist.all_reduce(t)
    assert torch.equal(t.to_dense(), expected), (t.to_dense(), expected)
    leaf = rank_tensor(rank).requires_grad_()  # as a sparse gradient's parameter would be
    dist.all_reduce(leaf)
    assert leaf.requires_grad and leaf.to_dense()[5].tolist() == [6.0, 6.0], leaf


def asynchronous_and_with_every_rank_empty(rank, world):
    t = rank_tensor(rank)
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    assert t.to_dense()[5].tolist() == [6.0, 6.0], t.to_dense()  # 2 x 1 + 2 x 2 + 0
    empty = torch.sparse_coo_tensor(torch.zeros((2, 0), dtype=torch.long), torch.zeros(0),
                                    (3, 4))
    dist.all_reduce(empty)
    assert empty._nnz() == 0 and empty.shape == (3, 4), empty


def other_ops_are_refused_before_any_communication(rank, world):
    t = rank_tensor(rank)
    try:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    except loom_torch.InvalidArgument as e:
        assert "ReduceOp.SUM" in str(e), e
    else:
        raise AssertionError("a sparse MAX was not refused")
    dist.all_reduce(t)  # the group is unharmed
    assert t.to_dense()[5].tolist() == [6.0, 6.0], t.to_dense()


def ranks_that_disagree_all_raise_and_the_group_goes_on(rank, world):
    size = (6, 2) if rank != 1 else (7, 2)
    dtype = torch.float32 if rank != 2 else torch.float64
    # Rank 0's tensor has two sparse dimensions and no dense one: as many dimensions in all.
    matrix = torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1), (6, 2))
    for differ, what in ((dict(size=size), "sizes differ"), (dict(dtype=dtype), "of type"),
                         (dict(matrix=rank == 0), "dense dimensions")):
        t = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.ones((1, 2)),
                                    size=differ.get("size", (6, 2)))
        if differ.get("matrix"):
            t = matrix
        try:
            dist.all_reduce(t.to(differ.get("dtype", torch.float32)))
        except RuntimeError as e:
            assert "sparse tensors disagree" in str(e) and what in str(e), e
        else:
            raise AssertionError(f"tensors whose {what} were summed")
        dense = torch.full((3,), rank + 1)
        dist.all_reduce(dense)  # a plain error, as gloo's: the group is unharmed
        assert dense.tolist() == [6, 6, 6], dense


def embedding_step(rank):
    """One backward pass of a sparse embedding on rank r's own tokens; returns the module."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(10, 3, mode="sum", sparse=True))
    tokens = torch.tensor([[rank, rank + 1, 7]])
    return model, tokens


def ddp_averages_sparse_gradients(rank, world):
    model, tokens = embedding_step(rank)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp(tokens).sum().backward()
    grad = model[0].weight.grad
    assert grad.is_sparse, grad
    expected = torch.zeros(10, 3)
    for r in range(world):  # each rank's gradient: one for every token it used
        for token in embedding_step(r)[1][0].tolist():
            expected[token] += 1.0 / world
    assert torch.allclose(grad.to_dense(), expected), (grad.to_dense(), expected)


def a_rank_that_cannot_coalesce_fails_every_rank_at_once(rank, world):
    if rank == 1:  # PyTorch has no coalesce for uint16 (2.x): rank 1 fails before any exchange
        t = torch.sparse_coo_tensor(torch.tensor([[0, 0]]),
                                    torch.tensor([1, 2], dtype=torch.uint16), (3,))
    else:
        t = torch.sparse_coo_tensor(torch.tensor([[0]]), torch.ones(1), (3,)).coalesce()
    try:
        dist.all_reduce(t)
    except NotImplementedError as e:
        assert rank == 1 and "coalesce" in str(e), (rank, e)
    except RuntimeError as e:
        assert rank != 1 and "rank 1 could not coalesce" in str(e), (rank, e)
    else:
        raise AssertionError("the others summed without rank 1")
    dense = torch.full((3,), rank + 1)
    dist.all_reduce(dense)
    assert dense.tolist() == [6, 6, 6], dense


class LoomReducesSparseTensorsAsGlooDoes(unittest.TestCase):
    def test_sums_every_ranks_nonzeros(self):
        run_ranks(sums_every_ranks_nonzeros)

    def test_asynchronous_and_with_every_rank_empty(self):
        run_ranks(asynchronous_and_with_every_rank_empty)

    def test_other_ops_are_refused_before_any_communication(self):
        run_ranks(other_ops_are_refused_before_any_communication)

    def test_sums_two_sparse_dimensions_of_uneven_counts(self):
        run_ranks(sums_two_sparse_dimensions_of_uneven_counts)

    def test_ranks_that_disagree_all_raise_and_the_group_goes_on(self):
        run_ranks(ranks_that_disagree_all_raise_and_the_group_goes_on)

    @unittest.skipUnless(hasattr(torch, "uint16"), "PyTorch 1.x has no uint16")
    def test_a_rank_that_cannot_coalesce_fails_every_rank_at_once(self):
        run_ranks(a_rank_that_cannot_coalesce_fails_every_rank_at_once)

    def test_ddp_averages_sparse_gradients(self):
        run_ranks(ddp_averages_sparse_gradients)


if __name__ == "__main__":
    unittest.main()
