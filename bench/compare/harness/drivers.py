"""How each library's driver is launched for one configuration, and how its row is read back.

Every driver applies the timing method of bench/compare/per_op.hpp and prints one row whose last
two fields are the time in microseconds (median over calls of the slowest rank) and the busbw."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Debian's PyTorch lives in the system Python, whatever python3 comes first on PATH.
TORCH_PYTHON = os.environ.get("TORCH_PYTHON", "/usr/bin/python3")
GLOO_ALGOS = ["ring", "ring_chunked", "halving_doubling", "bcube", "allreduce_ring",
              "allreduce_bcube"]
MPI_BTL = {"shm": ["--mca", "btl", "self,vader"],
           "tcp": ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"]}
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}


@dataclass
class Job:
    """One launch: a library (impl) on one transport, op, rank count and size."""
    impl: str
    transport: str
    op: str
    ranks: int
    size: int
    argv: list
    env: dict = field(default_factory=dict)
    store_dir: bool = False  # Gloo's FileStore: a fresh directory per launch
    kind: str = "row"  # "row": the drivers' CSV row; "loom": loom-perf's --csv output;
    # "footprint": copy_footprint's row
    sizes: tuple = ()  # a sweep: every one of these sizes in this one launch (size: the largest)
    iter_bytes: int = 0  # a sweep's calls per size: iter_bytes / size (sweep_iterations)
    rounds: int = 1  # a sweep's turns over its sizes (loom-perf --rounds)


@dataclass
class Outcome:
    time_us: float = None
    busbw: float = None
    choice: str = ""  # Loom's pick as LOOM_DEBUG=INFO logs it (algorithm, slices, transport)
    error: str = ""
    per_size: dict = field(default_factory=dict)  # a sweep's: size -> (time_us, busbw, choice)
    # Loom's rank 0 at DEBUG: the share of its calls' time spent waiting for peers, and its sleeps
    # a call (anatomy()); None where not logged.
    wait_share: float = None
    sleeps: float = None


# A Loom variant's marker (not passed on): its buffers come from Communicator::alloc.
SHARED_BUFFERS = "__shared_buffers"
# The memory bound of an all-reduce or an all-to-all (copy_footprint.cpp): every rank reads its
# input and writes its output once, all ranks at once, on the machine's cores. It is the same for
# every transport.
BOUND = "copy-bound"
BOUND_TRANSPORT = "-"
# Loopback TCP at an all-reduce's footprint (loopback_footprint.cpp): every rank sends and receives
# a ring rank's bytes out of its input and into its output over 127.0.0.1, all at once, nothing
# reduced, with Loom's socket buffers (loom_sockbuf). Where it falls from one size to the next,
# the kernel's loopback path runs slower per byte there; the cliff check judges Loom's tcp rows
# against it.
LOOPBACK = "loopback-exchange"
LOOPBACK_TRANSPORT = "lo"
# Loom's socket buffers when LOOM_SOCKBUF is unset (LinkConfig::socket_buffer_bytes).
LOOM_SOCKBUF_DEFAULT = 4 << 20
# In a loopback exchange's choice column: the socket buffers it set (Loom's).
SOCKBUF_NOTE = "socket buffers"


def loom_sockbuf(env=None):
    """The socket buffer size Loom's TCP transport sets, as LOOM_SOCKBUF in `env` (os.environ by
    default) gives it (parse_size: a count of bytes with an optional K, M or G and an optional B;
    0: the kernel sizes them; set_buffers: at most 1 GiB), or Loom's default; the loopback
    exchange sets the same on its sockets. A value Loom refuses leaves Loom's default (and Loom
    itself will not start)."""
    text = (os.environ if env is None else env).get("LOOM_SOCKBUF", "")
    m = re.fullmatch(r"(\d+)([kKmMgG]?)[bB]?", text)
    if not m:
        return LOOM_SOCKBUF_DEFAULT
    return min(int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()], 1 << 30)


def sweep_iterations(size, most, warmup, iter_bytes, rounds=1):
    """(timed, warm-up) calls of a sweep's size, as loom-perf --iter-bytes and --rounds count
    them: in turns, the timed calls split as evenly as they go, and each turn after the first
    that makes any warms up with at least one call."""
    timed = max(1, min(most, iter_bytes // size)) if iter_bytes else most
    warm = max(min(1, warmup), min(warmup, timed // 10)) if iter_bytes else warmup
    later_turns = min(rounds, timed) - 1
    return timed, warm + later_turns * max(1, warm // rounds)


class Drivers:
    def __init__(self, build, loom_variants, fresh_inputs=False, bind_cores=False):
        self.build = os.path.abspath(build)
        self.loomrun = os.path.join(self.build, "tools", "loomrun")
        self.perf = os.path.join(self.build, "bench", "loom-perf")
        self.gloo = os.path.join(self.build, "bench", "compare", "gloo_bench")
        self.mpi = os.path.join(self.build, "bench", "compare", "mpi_bench")
        self.memcpy = os.path.join(self.build, "bench", "compare", "memcpy_bandwidth")
        self.core_to_core = os.path.join(self.build, "bench", "compare", "core_to_core")
        self.footprint = os.path.join(self.build, "bench", "compare", "copy_footprint")
        self.loopback = os.path.join(self.build, "bench", "compare", "loopback_footprint")
        self.loom_variants = loom_variants  # impl name -> extra environment
        self.fresh_inputs = fresh_inputs  # every driver rewrites its input before each call
        # Every rank bound to its block of CPUs (loomrun --cpu-bind cores; OpenMPI's ranks through
        # bind_local.py, the same blocks). PyTorch's launcher places its own processes: unbound.
        self.bind = ["--cpu-bind", "cores"] if bind_cores else []

    def mpi_bind(self):
        if not self.bind:
            return []
        return ["--bind-to", "none", "python3", os.path.join(HERE, "harness", "bind_local.py")]

    def missing(self):
        """Libraries that cannot run here, with the reason."""
        why = {}
        if not (os.access(self.loomrun, os.X_OK) and os.access(self.perf, os.X_OK)):
            why["loom"] = f"build loomrun and loom-perf in {self.build}"
        if not os.access(self.gloo, os.X_OK):
            why["gloo"] = "gloo_bench not built (libgloo-dev, -DLOOM_BUILD_BENCH=ON)"
        if not os.access(self.mpi, os.X_OK) or not shutil.which("mpirun"):
            why["mpi"] = "mpi_bench or mpirun missing (libopenmpi-dev openmpi-bin, " \
                         "-DLOOM_BUILD_BENCH=ON)"
        torch = subprocess.run([TORCH_PYTHON, "-c", "import torch"], capture_output=True) \
            if os.access(TORCH_PYTHON, os.X_OK) else None
        if torch is None or torch.returncode != 0:
            why["torch"] = f"PyTorch not installed for {TORCH_PYTHON} (tools/deps.sh --torch)"
        if not os.access(self.loomrun, os.X_OK):
            why.setdefault("gloo", "gloo_bench is launched by loomrun, which is not built")
        if not os.access(self.footprint, os.X_OK):
            why[BOUND] = "copy_footprint not built (-DLOOM_BUILD_BENCH=ON)"
        if not os.access(self.loopback, os.X_OK):
            why[LOOPBACK] = "loopback_footprint not built (-DLOOM_BUILD_BENCH=ON)"
        return why

    def loom_jobs(self, op, ranks, transport, sizes, iters, warmup, iter_bytes=0, rounds=1):
        """loom-perf over `sizes` (x2 steps) in one launch per Loom variant. A sweep of several
        sizes measures adjacent sizes in the same processes, so a fall between them is not a
        launch's luck; with iter_bytes each size runs iter_bytes / size timed calls, at least 1
        and at most `iters` (loom-perf --iter-bytes); with rounds > 1 the sweep goes over its
        sizes that many times, each time a share of every size's calls (loom-perf --rounds), so
        that a slower spell of the host falls on every size alike."""
        out = []
        for impl, extra in self.loom_variants.items():
            env = {k: v for k, v in extra.items() if k != SHARED_BUFFERS}
            shared = SHARED_BUFFERS in extra
            if shared and transport != "shm":
                continue  # plain memory over TCP: the same as the loom column
            sweep = len(sizes) > 1
            out.append(Job(impl, transport, op, ranks, max(sizes),
                           [self.loomrun, "--nproc-per-node", str(ranks), "--no-prefix",
                            *self.bind, self.perf, "-o", op, "-b", str(min(sizes)), "-e",
                            str(max(sizes)), *(["-f", "2"] if sweep else []), "-n", str(iters),
                            "-w", str(warmup),
                            *(["--iter-bytes", str(iter_bytes)] if iter_bytes else []),
                            *(["--rounds", str(rounds)] if sweep and rounds > 1 else []), "--csv",
                            *(["--device", "shared"] if shared else []),
                            *(["--fresh-inputs"] if self.fresh_inputs else [])],
                           {"LOOM_TRANSPORT": transport,
                            # DEBUG: each call class's waits for peers (anatomy()); a few clock
                            # reads a call, left out at the latency sizes.
                            "LOOM_DEBUG": "DEBUG" if min(sizes) >= 64 << 10 else "INFO", **env},
                           kind="loom", sizes=tuple(sizes) if sweep else (),
                           iter_bytes=iter_bytes, rounds=rounds if sweep else 1))
        return out

    def jobs(self, libs, op, ranks, transport, size, iters, warmup):
        """The launches that measure one configuration. Gloo and PyTorch only talk TCP: they
        belong to the tcp tables."""
        out = []
        if BOUND in libs and size >= 64 << 10:
            out.append(Job(BOUND, BOUND_TRANSPORT, op, ranks, size,
                           [self.footprint, str(ranks), str(size)], kind="footprint"))
        if LOOPBACK in libs and op == "allreduce" and size >= 64 << 10:
            out.append(Job(LOOPBACK, LOOPBACK_TRANSPORT, op, ranks, size,
                           [self.loopback, str(ranks), str(size), str(loom_sockbuf())],
                           kind="loopback"))
        if "loom" in libs:
            out += self.loom_jobs(op, ranks, transport, (size,), iters, warmup)
        if "mpi" in libs:
            out.append(Job(f"mpi-{'vader' if transport == 'shm' else 'tcp'}", transport, op,
                           ranks, size,
                           ["mpirun", "-np", str(ranks), "--mca", "pml", "ob1",
                            *MPI_BTL[transport], *self.mpi_bind(), self.mpi, op, str(size),
                            str(iters), str(warmup), *(["fresh"] if self.fresh_inputs else [])],
                           dict(MPI_ENV)))
        if transport == "tcp" and "gloo" in libs:
            for algo in GLOO_ALGOS if op == "allreduce" else ["alltoall"]:
                out.append(Job(f"gloo:{algo}", transport, op, ranks, size,
                               [self.loomrun, "--nproc-per-node", str(ranks), "--no-prefix",
                                *self.bind, self.gloo, "--op", op, "--algo", algo,
                                "--bytes", str(size), "-n", str(iters), "-w", str(warmup),
                                *(["--fresh-inputs"] if self.fresh_inputs else [])],
                               store_dir=True))
        if transport == "tcp" and "torch" in libs:
            out.append(Job("torch-gloo", transport, op, ranks, size,
                           [TORCH_PYTHON, os.path.join(HERE, "torch_bench.py"), "--op", op,
                            "--ranks", str(ranks), "--bytes", str(size), "-n", str(iters),
                            "-w", str(warmup),
                            *(["--fresh-inputs"] if self.fresh_inputs else [])]))
        return out


CHOICE = re.compile(r"loom rank 0/\d+ info: (all_reduce|all_to_all): (.*? for (\d+) B .*?)(; model:|$)",
                    re.M)
CALL = {"allreduce": "all_reduce", "alltoall": "all_to_all"}
# A trial's verdict (docs/tuning.md, "Measured on the first calls"): the model's choice, its
# rival, their medians, and what ran after it.
VERDICT = re.compile(r"loom rank 0/\d+ info: (all_reduce|all_to_all) of (\d+) B: (\S+) against "
                     r"(\S+) .*?: ([\d.]+) us against ([\d.]+) us; (\S+) from now on", re.M)


def choice_of(op, log):
    """Loom's pick for the measured call: the largest call of its kind that rank 0 logged (not
    the small ones the benchmark or Communicator::alloc make of the same kind); where a trial
    measured the model's choice against another, the one it kept and both medians."""
    picks = [(int(m.group(3)), m.group(2)) for m in CHOICE.finditer(log)
             if m.group(1) == CALL.get(op)]
    if not picks:
        return ""
    size, pick = max(picks)
    kept = [m for m in VERDICT.finditer(log)
            if m.group(1) == CALL.get(op) and int(m.group(2)) == size]
    if not kept:
        return pick
    v = kept[-1]
    return (f"{v.group(7)} (kept by a trial: {v.group(3)} {v.group(5)} us, {v.group(4)} "
            f"{v.group(6)} us; the model: {pick})")


def choices_by_size(op, log):
    """A sweep's picks: size in bytes -> the pick rank 0 logged for a call of that size."""
    return {int(m.group(3)): m.group(2) for m in CHOICE.finditer(log)
            if m.group(1) == CALL.get(op)}


def launch(argv, extra_env, timeout, log):
    """Runs argv (the environment with extra_env) in fresh processes, at most `timeout` seconds:
    (stdout, stderr, exit status; -1 when it timed out). The launch runs in a session of its own,
    so that a launch past its time goes with every process it started (a launcher's ranks). The
    command and its output go to log."""
    p = subprocess.Popen(argv, env=dict(os.environ, **extra_env), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
        rc, err = -1, err + f"\ntimed out after {timeout} s\n"
    if log:
        log.write(f"$ {' '.join(f'{k}={v}' for k, v in extra_env.items())} {' '.join(argv)}\n"
                  f"{out}{err}rc={rc}\n\n")
        log.flush()
    return out, err, rc


TIMING = re.compile(r"loom rank 0/\d+ debug: (all_reduce|all_to_all) \S+ of (\d+)-(\d+) B: .*?"
                    r"measured ([\d.]+) us .*?mean of (\d+) call\(s\), of which waiting for peers "
                    r"([\d.]+) us \([\d.]+ waits, ([\d.]+) sleeps a call", re.M)


def anatomy(op, log, size):
    """(share of the time waiting for peers, sleeps a call) of rank 0's calls of `op` whose size
    class holds `size`, from its most-counted DEBUG line (the 1st, 10th, 100th... call); Nones
    where none was logged."""
    best = None
    for m in TIMING.finditer(log):
        lo, hi = int(m.group(2)), int(m.group(3))
        if m.group(1) != CALL.get(op) or not lo <= size <= hi:
            continue
        calls = int(m.group(5))
        if best is None or calls >= best[0]:
            measured = float(m.group(4))
            best = (calls, float(m.group(6)) / measured if measured > 0 else None,
                    float(m.group(7)))
    return (None, None) if best is None else best[1:]


def run(job, timeout, log):
    """Launches job in fresh processes; returns its Outcome (error set when it failed)."""
    argv = list(job.argv)
    tmp = None
    if job.store_dir:
        tmp = tempfile.mkdtemp(prefix="gloo-store-")
        argv[argv.index("--op"):argv.index("--op")] = ["--store", tmp]
    try:
        out, err, rc = launch(argv, job.env, timeout, log)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    result = Outcome()
    rows = [line for line in out.splitlines() if re.match(r"^[\w:.-]+,", line)]
    if job.kind == "loom":
        rows = [r for r in rows if r[0].isdigit()]
        result.choice = choice_of(job.op, err)
        # The call's size class: all-to-all's calls are priced on one rank's block.
        call_bytes = job.size // job.ranks if job.op == "alltoall" else job.size
        result.wait_share, result.sleeps = anatomy(job.op, err, call_bytes)
    tail = (err.strip().splitlines() or ["no output"])[-1]
    if job.sizes:  # a sweep: size,count,type,redop,time_us,algbw_gbps,busbw_gbps,wrong per size;
        # the sizes it measured before it failed are kept
        picks = choices_by_size(job.op, err)
        for line in rows:
            f = line.split(",")
            result.per_size[int(f[0])] = (float(f[4]), float(f[6]), picks.get(int(f[0]), ""))
        if rc != 0 or any(s not in result.per_size for s in job.sizes):
            result.error = f"rc={rc}: {tail}"
        return result
    if rc != 0 or not rows:
        result.error = f"rc={rc}: {tail}"
        return result
    fields = rows[-1].split(",")
    if job.kind == "footprint":  # copy_footprint,ranks,bytes,threads,pass_us,GB/s,memcpy,streamed
        # As busbw: what the operation would report had it taken one pass (nccl-tests' factors:
        # 2(n-1)/n for an all-reduce, (n-1)/n for an all-to-all).
        result.time_us = float(fields[4])
        factor = (2 if job.op == "allreduce" else 1) * (job.ranks - 1) / job.ranks
        result.busbw = job.size / result.time_us / 1e3 * factor
        result.choice = f"memcpy {fields[6]} us, streamed {fields[7]} us on {fields[3]} threads"
    elif job.kind == "loopback":  # loopback_footprint,ranks,bytes,threads,pass_us,GB/s (busbw)
        result.time_us, result.busbw = float(fields[4]), float(fields[5])
        # The socket buffers asked for (the run's before this was passed: the kernel's sizing,
        # which the cliff check does not judge against).
        asked = f", {SOCKBUF_NOTE} {job.argv[3]} B" if len(job.argv) > 3 else ""
        result.choice = f"{fields[3]} threads{asked}"
    elif job.kind == "loom":  # size,count,type,redop,time_us,algbw_gbps,busbw_gbps,wrong
        result.time_us, result.busbw = float(fields[4]), float(fields[6])
    else:  # impl,op,ranks,bytes,time_us,busbw_gbps
        result.time_us, result.busbw = float(fields[4]), float(fields[5])
    return result
