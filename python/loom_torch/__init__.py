"""Loom as a torch.distributed backend.

    import loom_torch  # registers the backend "loom" (an installed wheel registers it by itself)
    torch.distributed.init_process_group("loom")

Every collective of torch.distributed on CPU tensors (and CUDA tensors with PyTorch 2.2+ and a
libloom built with CUDA) runs on a loom.Communicator that bootstraps on PyTorch's store, with
PyTorch's timeout as Loom's. Under loomrun, env:// rendezvouses on loomrun's store. With PyTorch
2.15, split_group, shrink_group, abort, coalescing and allocate_tensor map onto Loom's own
split, shrink, abort, batches and shared windows (docs/pytorch.md).
"""
import inspect
import warnings

import torch
import torch.distributed as dist

from . import _C, _rendezvous
from ._C import (  # noqa: F401  Loom's errors, all subclasses of LoomError (a RuntimeError)
    Aborted,
    CollectiveMismatch,
    InvalidArgument,
    LoomError,
    LoomStore,
    LoomTimeoutError,
    PeerError,
    ProcessGroupLoom,
    StoreError,
)

BACKEND = "loom"
# PyTorch 2.15's Backend API: options, split, shrink, coalescing, allocate_tensor.
BACKEND_API = hasattr(_C, "Options")
if BACKEND_API:
    from ._C import Options  # noqa: F401


def _create_backend(dist_options, backend_options=None):
    """The creator PyTorch calls (extended API): a new group, or a split of the default group
    where PyTorch splits one (a group bound to a device)."""
    if backend_options is not None and not isinstance(backend_options, Options):
        raise TypeError(f"loom: pg_options must be a loom_torch.Options, not "
                        f"{type(backend_options).__name__}")
    ranks = list(dist_options.global_ranks_in_group)
    # The group's timeout (new_group's, or PyTorch's default) overrides pg_options' own, as it
    # does NCCL's: warned of as PyTorch warns there.
    timeout = getattr(dist_options, "timeout", None)
    if backend_options is not None and timeout is not None and backend_options._timeout != timeout:
        warnings.warn(f"loom: pg_options' timeout ({backend_options._timeout}) is overridden by "
                      f"the group's timeout ({timeout}), which has a default where none is given",
                      stacklevel=2)
    parent = getattr(dist_options, "split_from", None)
    if isinstance(parent, ProcessGroupLoom) and ranks:
        # new_group(timeout=...) bounds the child (its members' wait for each other included),
        # over pg_options' own, as PyTorch sets it on NCCL's options.
        if backend_options is None and timeout is not None:
            backend_options = Options(timeout=timeout)
        elif timeout is not None:
            backend_options._timeout = timeout
        backend = parent._split(ranks, backend_options)
    else:
        backend = _C._create_process_group(dist_options.store, dist_options.group_rank,
                                           dist_options.group_size, dist_options.timeout,
                                           backend_options)
    backend.options.global_ranks_in_group = ranks
    backend.options.group_name = dist_options.group_id
    return backend


def _register():
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    parameters = inspect.signature(dist.Backend.register_backend).parameters
    if BACKEND_API:
        dist.Backend.register_backend(BACKEND, _create_backend, extended_api=True,
                                      devices=["cpu", "cuda"])
    elif "devices" in parameters:  # PyTorch 2.x: a Backend behind torch's ProcessGroup
        dist.Backend.register_backend(BACKEND, _C._create_process_group, devices=["cpu", "cuda"])
    else:
        dist.Backend.register_backend(BACKEND, _C._create_process_group)


def _backend_of(group):
    if hasattr(group, "_get_backend"):  # PyTorch 2.x
        return group._get_backend(torch.device("cpu"))
    return group


def cuda_supported():
    """Whether CUDA tensors can go through this build (PyTorch 2.2+, libloom with CUDA)."""
    return _C._cuda_supported()


def describe(group=None):
    """Host, transport and settings of the Loom communicator behind a loom process group."""
    if group is None:
        group = dist.distributed_c10d._get_default_group()
    return _C._describe(_backend_of(group))


def register():
    """Registers the backend (what `import loom_torch` does; the wheel's entry point for
    torch.distributed.backends calls it, so that init_process_group("loom") needs no import)."""
    _register()
    _rendezvous.install()


register()
