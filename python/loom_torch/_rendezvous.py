"""env:// under loomrun. loomrun hosts a Loom store at MASTER_ADDR:MASTER_PORT (and says so with
LOOM_STORE_HOSTED=1), where PyTorch's env:// would start a TCPStore of its own; there, env://
becomes a client of loomrun's store instead, for every backend."""
import importlib
import os
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

from . import _C


def _loomrun_env_handler(url, timeout=timedelta(minutes=30), **kwargs):
    query = {key: values[-1] for key, values in parse_qs(urlparse(url).query).items()}

    def setting(name, variable):
        value = query.get(name, os.environ.get(variable))
        if value is None:
            raise ValueError(f"env:// rendezvous under loomrun: {variable} is not set")
        return value

    rank = int(setting("rank", "RANK"))
    world_size = int(setting("world_size", "WORLD_SIZE"))
    store = _C.LoomStore(setting("master_addr", "MASTER_ADDR"),
                         int(setting("master_port", "MASTER_PORT")), timeout)
    yield (store, rank, world_size)
    raise RuntimeError("env:// rendezvous under loomrun: a process group cannot rendezvous again")


def install():
    if os.environ.get("LOOM_STORE_HOSTED") == "1":
        # torch.distributed.rendezvous is also the name of a function in torch.distributed.
        handlers = importlib.import_module("torch.distributed.rendezvous")._rendezvous_handlers
        handlers["env"] = _loomrun_env_handler
