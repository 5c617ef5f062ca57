"""The PyTorch backends' figures (torch_speed.py): the launches of one repetition, each in fresh
processes with the same timing method (torch_common.py), and their rows.

Each launch measures one library (impl) at one rank count: the per-op collectives of
torch_bench.py (one op, every size; sendrecv, a pipeline's isend/irecv step, among them), the
training steps of torch_ddp.py (DDP or FSDP2), or the per-call cost of torch_call_overhead.py (a
group of one process). A launch that fails or runs past
its time is launched once more (its ranks pick a new port); the row says how many tries it took
and why the first failed."""
import csv
import os
import sys
from dataclasses import dataclass, field, fields

from . import drivers

HERE = drivers.HERE
FIELDS = ["rep", "part", "impl", "op", "ranks", "bytes", "iters", "time_us", "rate", "unit",
          "tries", "error", "note", "core_to_core_ns", "placement", "pace_us", "pace"]
# What each part's launches measure, by impl: the backend and whether its tensors come from the
# group (loom-alloc: allocate_tensor, or FSDP2's buffers from the process group).
IMPLS = {"collectives": ["loom", "loom-alloc", "gloo"], "ddp": ["loom", "gloo"],
         "fsdp": ["loom", "loom-alloc", "gloo"]}


@dataclass
class Row:
    rep: int
    part: str  # collectives, ddp, fsdp, overhead, limit
    impl: str
    op: str  # allreduce, allgather, sendrecv, ddp, fsdp, call, memcpy
    ranks: int
    bytes: int = 0
    iters: int = 0
    time_us: float = None  # the median over calls (steps) of each one's slowest rank
    rate: float = None  # busbw (GB/s), samples/s, or memcpy GB/s
    unit: str = ""
    tries: int = 1
    error: str = ""  # why the last try failed; a row without a value
    note: str = ""  # why an earlier try failed; what else the launch said
    core_to_core_ns: float = None
    placement: str = ""
    pace_us: float = None
    pace: str = ""


def load(path):
    """The rows of a run's results.csv."""
    kinds = {f.name: f.type for f in fields(Row)}
    rows = []
    with open(path, newline="") as f:
        for d in csv.DictReader(f):
            values = {}
            for name, text in d.items():
                kind = kinds[name]
                values[name] = (None if text == "" else float(text)) if kind is float else \
                    int(text) if kind is int else text
            rows.append(Row(**values))
    return rows


@dataclass
class Launch:
    part: str
    impl: str
    op: str
    ranks: int
    argv: list
    parse: object  # (stdout, launch) -> [Row] (rep and probes filled in later)
    env: dict = field(default_factory=dict)


@dataclass
class Settings:
    """What the launches run: the Python whose PyTorch is measured, what each part measures."""
    python: str
    allreduce_sizes: list
    allgather_sizes: list
    sendrecv_sizes: list = field(default_factory=list)
    iter_bytes: int = 512 << 20
    small_iters: int = 1000
    fresh_inputs: bool = False
    ddp_layers: str = "784,1024,1024,1024,10"
    fsdp_layers: str = ",".join(["1024"] * 10)  # 9 Linear layers of 1024 x 1024
    batch: int = 64
    ddp_steps: int = 200
    fsdp_steps: int = 100
    warmup_steps: int = 5
    calls: int = 20000


def backend(impl):
    return impl.split("-")[0]


def bench_rows(out, job):
    """torch_bench.py's rows: torch-<impl>,<op>,<ranks>,<bytes>,<time_us>,<busbw>,<calls>."""
    rows = []
    for line in out.splitlines():
        f = line.split(",")
        if len(f) == 7 and f[0] == f"torch-{job.impl}":
            rows.append(Row(0, job.part, job.impl, f[1], int(f[2]), int(f[3]), int(f[6]),
                            time_us=float(f[4]), rate=float(f[5]), unit="GB/s"))
    return rows


def step_rows(batch, steps):
    def parse(out, job):
        """torch_ddp.py's row: <impl>,<ranks>,<samples/s>,<mean step ms>,<median step ms>."""
        for line in out.splitlines():
            f = line.split(",")
            if len(f) == 5 and f[0] == job.impl:
                median_us = float(f[4]) * 1e3
                return [Row(0, job.part, job.impl, job.op, int(f[1]), iters=steps,
                            time_us=median_us,
                            rate=int(f[1]) * batch / (median_us * 1e-6), unit="samples/s",
                            note=f"mean step {float(f[3]):.3f} ms")]
        return []
    return parse


def overhead_rows(out, job):
    """torch_call_overhead.py's rows: <binding>,<mean us>,<median us>."""
    rows = []
    for line in out.splitlines():
        f = line.split(",")
        if len(f) == 3 and f[0] in ("extension", "python", "gloo"):
            rows.append(Row(0, job.part, f[0], "call", 1, 4, int(job.argv[-1]),
                            time_us=float(f[2]), unit="us", note=f"mean {float(f[1]):.2f} us"))
    return rows


def collective_launches(s, ranks, op, sizes, impls):
    script = os.path.join(HERE, "torch_bench.py")
    return [Launch("collectives", impl, op, ranks,
                   [s.python, script, "--backend", backend(impl), "--op", op, "--ranks",
                    str(ranks), "--bytes", ",".join(map(str, sizes)), "-n", str(s.small_iters),
                    "-w", str(max(1, s.small_iters // 10)), "--iter-bytes", str(s.iter_bytes),
                    "--tries", "1", *(["--alloc"] if impl.endswith("-alloc") else []),
                    *(["--describe"] if backend(impl) == "loom" else []),
                    *(["--fresh-inputs"] if s.fresh_inputs else [])], bench_rows)
            for impl in impls]


def step_launches(s, ranks, part, impls):
    fsdp = part == "fsdp"
    script = os.path.join(HERE, "torch_ddp.py")
    return [Launch(part, impl, part, ranks,
                   [s.python, script, "--backend", backend(impl), "--ranks", str(ranks),
                    "--layers", s.fsdp_layers if fsdp else s.ddp_layers,
                    "--batch-size", str(s.batch),
                    "--steps", str(s.fsdp_steps if fsdp else s.ddp_steps),
                    "--warmup", str(s.warmup_steps), *(["--fsdp"] if fsdp else []),
                    *(["--alloc-from-pg"] if impl.endswith("-alloc") else [])],
                   step_rows(s.batch, s.fsdp_steps if fsdp else s.ddp_steps))
            for impl in impls]


def rotated(items, rep):
    """The launches' order in repetition `rep`: each repetition starts one further along, so
    that no library always runs first (or right after another's launch)."""
    k = (rep - 1) % len(items) if items else 0
    return items[k:] + items[:k]


def plan(s, rep, ranks_list, parts, impls):
    """The launches of one repetition, in order: per rank count and part the libraries side by
    side (alternating their order from repetition to repetition), then the call overhead."""
    out = []
    for ranks in ranks_list:
        for part in ("collectives", "ddp", "fsdp"):
            if part not in parts:
                continue
            chosen = rotated([i for i in IMPLS[part] if i in impls], rep)
            if part == "collectives":
                for op, sizes in (("allreduce", s.allreduce_sizes),
                                  ("allgather", s.allgather_sizes),
                                  ("sendrecv", s.sendrecv_sizes)):
                    if sizes:
                        out += collective_launches(s, ranks, op, sizes, chosen)
            else:
                out += step_launches(s, ranks, part, chosen)
    if "overhead" in parts:
        out.append(Launch("overhead", "extension", "call", 1,
                          [s.python, os.path.join(HERE, "torch_call_overhead.py"), "--calls",
                           str(s.calls)], overhead_rows))
    return out


def run(job, env, timeout, log):
    """The launch's rows, launched once more if it fails (no rows, an exit status, its time up);
    a launch that failed twice leaves one row with the error."""
    first = ""
    for attempt in (1, 2):
        out, err, rc = drivers.launch(job.argv, {**env, **job.env}, timeout, log)
        rows = job.parse(out, job) if rc == 0 else []
        said = [line.split(": ", 1)[1] for line in err.splitlines()
                if line.startswith("torch_bench: rank")]  # loom's description (--describe)
        if rows:
            for r in rows:
                r.tries = attempt
                r.note = "; ".join(x for x in (f"try 1 failed: {first}" if first else "",
                                               r.note, *said[:1]) if x)
            return rows
        tail = (err.strip().splitlines() or ["no output"])[-1]
        why = f"rc={rc}: {tail[:200]}"
        print(f"{job.part} {job.op} {job.ranks} ranks {job.impl}: try {attempt} failed ({why})",
              file=sys.stderr)
        first = first or why
    return [Row(0, job.part, job.impl, job.op, job.ranks, tries=2, error=why,
                note=f"try 1 failed: {first}")]
