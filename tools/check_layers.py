#!/usr/bin/env python3
"""Checks that includes point down the layers (docs/design.md, "Layers"): a file may include
the public API, its own layer, and the layers below it; never one above."""
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
ROOTS = {"src": None, "transports": "transports", "kernels": "kernels"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path):
    parts = path.split(os.sep)
    if parts[0] == "src":
        return parts[1] if len(parts) > 2 else None
    return ROOTS.get(parts[0])


def main(root):
    os.chdir(root)
    bad = []
    for top in ROOTS:
        for dirpath, _, files in os.walk(top):
            for name in files:
                if not name.endswith((".cpp", ".hpp", ".h", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, name)
                mine = layer_of(path)
                if mine is None:
                    continue
                if mine not in LAYERS:
                    bad.append(f"{path}: folder '{mine}' is in no layer (tools/check_layers.py)")
                    continue
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                for target in INCLUDE.findall(text):
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
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} include(s) point up or sideways")
        return 1
    print("layers: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")))
