"""Binds an mpirun-launched rank to CPUs as `loomrun --cpu-bind cores` binds its workers, then
runs the command: local rank l of n gets CPUs [l*c/n, max(l*c/n + 1, (l+1)*c/n)) of the c it may
use, in order. The comparison's --cpu-bind cores gives OpenMPI the same placement as the
libraries loomrun launches."""
import os
import sys


def share(local, workers, allowed):
    first = local * len(allowed) // workers
    end = max(first + 1, (local + 1) * len(allowed) // workers)
    return allowed[first:end]


def main():
    local = int(os.environ["OMPI_COMM_WORLD_LOCAL_RANK"])
    workers = int(os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"])
    os.sched_setaffinity(0, share(local, workers, sorted(os.sched_getaffinity(0))))
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
