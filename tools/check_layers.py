#!/usr/bin/env python3
"""Checks that includes point down the layers (docs/design.md, "Layers"): a library file may
include the public API, its own layer, and the layers below it; never one above. A program (a
folder of tools/ or bench/, or the PyTorch backend in python/) includes the public API and its own
folder's files; the few library headers or other programs' files one needs besides are listed in
PROGRAM_NEEDS, each with its reason. Tests are exempt: they check the layers from inside."""
import os
import re
import sys

# Rank of each layer: a file may include headers of layers of lower or equal rank. Layers of one
# rank do not see each other unless listed in SIDEWAYS.
LAYERS = {
    "loom": 0,  # include/loom: the public API, for everyone
    "base": 1, "kernels": 1, "device": 1,
    "store": 2,
    "transports": 3,
    "algorithms": 4,
    "gpu": 5,
    "core": 6,
    "ddp": 7, "verify": 7,
}
SIDEWAYS = set()
# Layers that use the public API only: built on libloom as any application is.
PUBLIC_ONLY = {"ddp"}
ROOTS = {"include": "loom", "src": None, "transports": "transports", "kernels": "kernels"}

# The programs: each folder of these holds one program (or a family of them), on top of every
# layer.
PROGRAM_ROOTS = ("tools", "bench", "python")
# What a program includes besides the public API and its own folder, and why. An include not
# listed here is an error, and so is an entry no file includes any more.
PROGRAM_NEEDS = {
    "tools/loomrun": {
        "store/keys.hpp": "every store key is built in one module (src/store/keys.cpp); the "
        "rendezvous and the launcher's left-out record write keys the library reads",
        "base/local_address.hpp": "the rendezvous decides whether its endpoint is this host "
        "as the library decides it for MASTER_ADDR",
    },
    "tools/loom-tune": {
        "algorithms/algorithm_table.hpp": "it times every row of the algorithm table, with each "
        "slice a row takes; the table is the library's, not an API",
        "algorithms/rules.hpp": "it writes rules in the grammar the selector parses, naming "
        "the operations as rules do",
        "core/tuning_table.hpp": "it writes the tuning table in the format the library reads at "
        "init: one reader and one writer of the format",
        "base/config.hpp": "its sizes, and the tuning table's place, are read as the library "
        "reads its configuration",
        "bench/compare/per_op.hpp": "it measures as loom-perf and the comparison do (std only), "
        "so a tuned rule and a compared figure are one measurement",
    },
    "bench/loom-perf": {
        "verify/patterns.hpp": "--check compares results with the kernels' scalar reference, "
        "which libloom keeps to itself (loom_verify)",
        "bench/compare/per_op.hpp": "the timing method every driver of the comparison applies",
    },
    "bench/kernels": {
        "kernels/cpu/cpu_kernels.hpp": "microbenchmarks of the CPU kernels themselves",
        "kernels/cuda/cuda_kernels.cuh": "microbenchmarks of the CUDA kernels themselves",
    },
}

# What every program may include besides, and why.
PROGRAM_SHARED = {
    "tools/cli/cli.hpp": "the command line every tool shares: one library (CLI11), one help "
    "layout, one way to refuse bad usage",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh")


def layer_of(path):
    parts = path.split(os.sep)
    if parts[0] == "src":
        return parts[1] if len(parts) > 2 else None
    return ROOTS.get(parts[0])


def files_under(top):
    for dirpath, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(SOURCES):
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8") as f:
                    yield path, INCLUDE.findall(f.read())


def check_library(bad):
    for top in ROOTS:
        for path, targets in files_under(top):
            mine = layer_of(path)
            if mine is None:
                continue
            if mine not in LAYERS:
                bad.append(f"{path}: folder '{mine}' is in no layer (tools/check_layers.py)")
                continue
            for target in targets:
                if "/" not in target or target.startswith(".."):
                    continue  # a file beside this one, or in its own layer's tree
                theirs = target.split("/")[0]
                if theirs not in LAYERS or theirs == mine:
                    continue  # a folder of this layer ("cpu/..."), or a system header
                if mine in PUBLIC_ONLY and theirs != "loom":
                    bad.append(f"{path}: includes {target}: {mine} uses the public API only")
                elif LAYERS[theirs] > LAYERS[mine] or (
                    LAYERS[theirs] == LAYERS[mine] and (mine, theirs) not in SIDEWAYS
                ):
                    bad.append(f"{path}: includes {target}: {mine} may not see {theirs}")


def program_of(path):
    parts = path.split(os.sep)
    return "/".join(parts[:2]) if len(parts) > 2 else None


def check_programs(bad):
    used = set()
    for top in PROGRAM_ROOTS:
        for path, targets in files_under(top):
            program = program_of(path)
            if program is None:
                continue
            needs = PROGRAM_NEEDS.get(program, {})
            for target in targets:
                beside = os.path.normpath(os.path.join(os.path.dirname(path), target))
                if os.path.exists(beside):
                    if beside.startswith(program + os.sep):
                        continue  # the program's own file
                    target = beside.replace(os.sep, "/")  # another program's, by a relative path
                elif target.split("/")[0] == "loom":
                    continue  # the public API
                elif target.split("/")[0] not in LAYERS and target.split("/")[0] not in PROGRAM_ROOTS:
                    continue  # a header of another project
                if target in PROGRAM_SHARED:
                    continue
                if target in needs:
                    used.add((program, target))
                else:
                    bad.append(f"{path}: includes {target}: a program uses the public API and its "
                               f"own folder (PROGRAM_NEEDS in tools/check_layers.py lists the "
                               f"exceptions, each with its reason)")
    for program, needs in sorted(PROGRAM_NEEDS.items()):
        for target in sorted(needs):
            if (program, target) not in used:
                bad.append(f"tools/check_layers.py: {program} no longer includes {target}: "
                           f"remove it from PROGRAM_NEEDS")


def main(root):
    os.chdir(root)
    bad = []
    check_library(bad)
    check_programs(bad)
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} include(s) point up or sideways")
        return 1
    print("layers: every include points down, and every program uses the public API "
          "(and what PROGRAM_NEEDS lists)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")))
