"""Loom as a torch.distributed backend.

    import loom_torch  # registers the backend "loom"
    torch.distributed.init_process_group("loom")

Every collective of torch.distributed on CPU tensors (and CUDA tensors with PyTorch 2.2+ and a
libloom built with CUDA) runs on a loom.Communicator that bootstraps on PyTorch's store, with
PyTorch's timeout as Loom's. Under loomrun, env:// rendezvouses on loomrun's store.
"""
import inspect

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
    StoreError,
)

BACKEND = "loom"


def _register():
    if BACKEND.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    parameters = inspect.signature(dist.Backend.register_backend).parameters
    if "devices" in parameters:  # PyTorch 2.x: a Backend behind torch's ProcessGroup
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


_register()
_rendezvous.install()
