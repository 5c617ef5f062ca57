#!/usr/bin/env python3
"""Checks the state rule (docs/design.md, "Layers"): in a class whose methods are defined in
several source files, no field that changes after construction is named by more than two of them.
A class owns its state: where a third file needs a field, the state belongs in a part of its own
(a member with its own invariants and lock) or behind a method.

Classes are found without a compiler: in every header under src/, transports/ and kernels/, a
`class` or `struct` body's data members (`type name_;`, with or without an initializer) are
read, and fields declared `const` (set once, by the constructor) are left out. The files that
define the class's methods (`Class::method(`, nested classes by their full name) are searched
for each field as a whole word. The header counts as one of the files where its inline code
names the field. `--list` prints every class's fields with the files that name them."""
import os
import re
import sys

ROOTS = ("src", "transports", "kernels", "include")
MAX_FILES = 2
FIELD = re.compile(
    r"^\s+(?!return\b|using\b|friend\b|static\b|typedef\b)([A-Za-z_][\w:<>,\s\*&]*?[\s\*&>])"
    r"([a-z]\w*_)\s*(?:\{.*\}|=[^;]*)?;\s*(?://.*)?$")
FIELD_START = re.compile(r"^\s+[A-Za-z_][\w:<>,\s\*&]*[\s\*&>][a-z]\w*_\s*\{")
CLASS = re.compile(r"^(?:class|struct)\s+(?:LOOM_\w+\s+)?([\w:]+)(?:\s+final)?[^;]*\{\s*$")


def is_const(type_text):
    """A field the constructor sets once: `const T name_`, `T* const name_` (not `T<const U>`)."""
    t = type_text.strip()
    return t.startswith("const ") or re.search(r"\*\s*const$", t) is not None


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def classes_of(header):
    """{class name: (fields that may change, the header's text outside the fields' lines)}."""
    lines = open(header, encoding="utf-8").read().split("\n")
    found = {}
    i = 0
    while i < len(lines):
        m = CLASS.match(lines[i])
        if not m:
            i += 1
            continue
        name, depth, fields, rest = m.group(1), 0, [], []
        j = i
        while j < len(lines):
            line, start_depth = lines[j], depth
            # A member declared over several lines (an initializer in braces): up to its `;`.
            k = j
            if start_depth == 1 and j > i and FIELD_START.match(line):
                while (not line.rstrip().endswith(";") or line.count("{") != line.count("}")) \
                        and k + 1 < len(lines):
                    k += 1
                    line += " " + lines[k].strip()
            depth += line.count("{") - line.count("}")
            f = FIELD.match(line) if start_depth == 1 and j > i else None
            if f and "(" not in f.group(1):
                if not is_const(f.group(1)):
                    fields.append(f.group(2))
            else:
                rest.append(line)
            j = k
            if depth <= 0 and j > i:
                break
            j += 1
        found[name] = (fields, strip_comments("\n".join(rest)))
        i = j + 1
    return found


def sources(root):
    for top in ROOTS:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [x for x in dirs if not x.startswith("build")]
            for f in files:
                if f.endswith((".cpp", ".cu", ".hpp", ".cuh")):
                    yield os.path.join(d, f)


def main():
    root = next((a for a in sys.argv[1:] if not a.startswith("-")), ".")
    listing = "--list" in sys.argv
    paths = list(sources(root))
    texts = {p: strip_comments(open(p, encoding="utf-8").read()) for p in paths}
    bad = 0
    for header in [p for p in paths if p.endswith((".hpp", ".cuh"))]:
        for name, (fields, inline) in classes_of(header).items():
            short = name.split("::")[-1]
            definers = [p for p in paths if p.endswith((".cpp", ".cu")) and
                        re.search(r"\b" + re.escape(short) + r"::~?\w+\s*\(", texts[p])]
            if len(definers) < 2:
                continue
            for field in fields:
                word = re.compile(r"\b" + re.escape(field) + r"\b")
                users = [os.path.relpath(p, root) for p in definers if word.search(texts[p])]
                if word.search(inline):
                    users.append(os.path.relpath(header, root))
                if listing:
                    print(f"{name}::{field}: {len(users)}: {' '.join(users)}")
                if len(users) > MAX_FILES:
                    bad += 1
                    print(f"{os.path.relpath(header, root)}: {name}::{field} is named in "
                          f"{len(users)} files (at most {MAX_FILES}): {' '.join(users)}")
    if bad:
        print(f"check_fields: {bad} field(s) named in more than {MAX_FILES} files of their class")
        return 1
    print("check_fields: every field that changes is named in at most "
          f"{MAX_FILES} files of its class")
    return 0


if __name__ == "__main__":
    sys.exit(main())
