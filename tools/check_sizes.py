#!/usr/bin/env python3
"""Checks the size rule (docs/design.md, "Layers"): no source file over 600 lines, no function
over 120. Source files are C++ and CUDA, Python, shell scripts (by extension, or a `#!` line) and
CMake files; functions are measured in C++, CUDA, Python and shell, from the line that names them
to the line that closes them, lambdas and local classes counting towards the function around them.

C++ is measured without a compiler: comments, literals and preprocessor lines are blanked, then
braces are matched, and a brace at namespace or class scope opens a function when what comes
before it since the last `;`, `{` or `}` ends in a parameter list (and qualifiers, a trailing
return type or a constructor's member initializers). `python3 tools/check_sizes.py --list`
prints every function it found, longest first, to check it by eye."""
import ast
import os
import re
import sys

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120

CPP = (".cpp", ".hpp", ".h", ".cc", ".c", ".cu", ".cuh")
PYTHON = (".py",)
SHELL = (".sh", ".bash", ".sbatch")
CMAKE = (".cmake", ".cmake.in")
SKIP_DIRS = {".git", "__pycache__", ".venv", "node_modules"}


def is_skipped_dir(name):
    return name in SKIP_DIRS or name.startswith("build")


def kind_of(path):
    name = os.path.basename(path)
    if name.endswith(CPP):
        return "cpp"
    if name.endswith(PYTHON):
        return "python"
    if name.endswith(SHELL):
        return "shell"
    if name == "CMakeLists.txt" or name.endswith(CMAKE):
        return "cmake"
    if "." in name:
        return None
    try:
        with open(path, "rb") as f:
            first = f.readline(200)
    except OSError:
        return None
    if first.startswith(b"#!"):
        if b"python" in first:
            return "python"
        if b"sh" in first:
            return "shell"
    return None


# ---- C++

def blank_cpp(text):
    """The text with comments, string and character literals and preprocessor lines replaced by
    spaces (newlines kept, so offsets and line numbers stay)."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if c == "\n":
            line_start = True
            i += 1
            continue
        if line_start and c in " \t":
            i += 1
            continue
        if line_start and c == "#":
            j = i
            while j < n:  # to the end of the directive, continuation lines included
                k = text.find("\n", j)
                if k == -1:
                    k = n
                    break
                if text[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            blank(i, k)
            i = k
            continue
        line_start = False
        if text.startswith("//", i):
            k = text.find("\n", i)
            k = n if k == -1 else k
            blank(i, k)
            i = k
        elif text.startswith("/*", i):
            k = text.find("*/", i + 2)
            k = n if k == -1 else k + 2
            blank(i, k)
            i = k
        elif c == "R" and text.startswith('R"', i) and not (i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i + m.end())
            k = n if end == -1 else end + len(m.group(1)) + 2
            blank(i + 1, k - 1)
            i = k
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():
                i += 1  # a digit separator (1'000'000)
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


ACCESS = re.compile(r"^\s*(public|private|protected)\s*:(?!:)")
QUALIFIERS = re.compile(
    r"^(\s|const\b|volatile\b|noexcept\b|override\b|final\b|mutable\b|&|"
    r"__attribute__\b|\[\[[^\]]*\]\])*(->.*)?$", re.S)
NAME = re.compile(r"(~?[A-Za-z_][\w]*(\s*::\s*~?[A-Za-z_]\w*)*|operator\s*[^\s(]+|operator\s*\(\s*\))\s*$")


def strip_template(header):
    """The header without a leading `template <...>`."""
    m = re.match(r"\s*template\s*<", header)
    if not m:
        return header
    depth, i = 1, m.end()
    while i < len(header) and depth:
        if header[i] == "<":
            depth += 1
        elif header[i] == ">" and header[i - 1] != "-":
            depth -= 1
        i += 1
    return strip_template(header[i:])


def top_level(header):
    """(paren groups as (open, close) offsets, offsets of `=` and of single `:` outside parens)."""
    groups, equals, colons = [], [], []
    depth, start = 0, 0
    for i, c in enumerate(header):
        if c == "(":
            if depth == 0:
                start = i
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                groups.append((start, i))
        elif depth == 0 and c == "=":
            prev = header[i - 1] if i else ""
            nxt = header[i + 1] if i + 1 < len(header) else ""
            if nxt != "=" and prev not in "=!<>" and not header[:i].rstrip().endswith("operator"):
                equals.append(i)
        elif depth == 0 and c == ":":
            prev = header[i - 1] if i else ""
            nxt = header[i + 1] if i + 1 < len(header) else ""
            if prev != ":" and nxt != ":":
                colons.append(i)
    return groups, equals, colons


def classify(header):
    """What a brace at namespace or class scope opens, from the text before it: ("function",
    name offset), ("initializers", None) for a function header still in its member initializers,
    ("namespace"|"class"|"data", None)."""
    while True:
        m = ACCESS.match(header)
        if not m:
            break
        header = " " * m.end() + header[m.end():]
    body = strip_template(header)
    offset = len(header) - len(body)
    if re.match(r"\s*(inline\s+)?namespace\b", body) or re.match(r'\s*extern\s*"', body) and "(" not in body:
        return "namespace", None
    groups, equals, colons = top_level(body)
    if groups and not (equals and equals[0] < groups[0][0]):
        # The parameter list: a group after a name followed by qualifiers only, or by member
        # initializers (a macro's own group, as TEST(a, b), counts as one). Groups before it
        # belong to the return type or an attribute: decltype(auto), std::function<void()>.
        for open_, close in groups:
            if not NAME.search(body[:open_]):
                continue
            inits = [c for c in colons if c > close]
            if inits and QUALIFIERS.match(body[close + 1:inits[0]]):
                return "initializers", offset + open_
            if not inits and QUALIFIERS.match(body[close + 1:]):
                return "function", offset + open_
    if re.match(r"\s*((enum|class|struct|union)\b)", body):
        return "class", None
    return "data", None


def function_name(header, open_):
    m = NAME.search(header[:open_])
    name = re.sub(r"\s+", "", m.group(1)) if m else "?"
    if name.isupper() or re.fullmatch(r"[A-Z][A-Z0-9_]*", name):  # TEST(a, b) and the like
        close = header.find(")", open_)
        name += re.sub(r"\s+", " ", header[open_:close + 1])
    return name, (m.start(1) if m else open_)


def cpp_functions(text):
    """[(name, first line, last line)] for the functions defined in C++ source `text`."""
    code = blank_cpp(text)
    line_of = []
    line = 1
    for c in code:
        line_of.append(line)
        if c == "\n":
            line += 1
    found = []
    stack = []  # (kind, header start, name, first line)
    header_start = 0
    for i, c in enumerate(code):
        if c == "{":
            if stack and stack[-1][0] in ("function", "inner", "data"):
                stack.append(("inner", None, None, None))
                continue
            header = code[header_start:i]
            if header.count("(") > header.count(")"):
                stack.append(("member", None, None, None))  # a default argument's braces
                continue
            what, open_ = classify(header)
            if what == "initializers":
                before = header.rstrip()[-1:]
                if before and (before.isalnum() or before in "_>"):
                    stack.append(("member", None, None, None))  # a member's brace initialiser
                    continue
                what = "function"
            if what == "function":
                name, at = function_name(header, open_)
                stack.append(("function", None, name, line_of[header_start + at]))
            else:
                stack.append((what, None, None, None))
                header_start = i + 1
        elif c == "}":
            if not stack:
                header_start = i + 1
                continue
            kind, _, name, first = stack.pop()
            if kind == "function":
                found.append((name, first, line_of[i]))
            if kind in ("function", "namespace", "class", "data") and (
                not stack or stack[-1][0] in ("namespace", "class")
            ):
                header_start = i + 1
        elif c == ";" and (not stack or stack[-1][0] in ("namespace", "class")):
            header_start = i + 1
    return found


# ---- Python and shell

def python_functions(text, path):
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError:
        return []
    return [
        (node.name, node.lineno, node.end_lineno)
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    ]


SHELL_FUNCTION = re.compile(r"^(\s*)(?:function\s+)?([A-Za-z_][\w:.-]*)\s*\(\)\s*\{(.*)$")


def shell_functions(text):
    lines = text.split("\n")
    found = []
    for i, line in enumerate(lines):
        m = SHELL_FUNCTION.match(line)
        if not m:
            continue
        if m.group(3).split("#")[0].rstrip().endswith("}"):
            found.append((m.group(2), i + 1, i + 1))
            continue
        close = re.compile("^" + re.escape(m.group(1)) + r"\}")
        for j in range(i + 1, len(lines)):
            if close.match(lines[j]):
                found.append((m.group(2), i + 1, j + 1))
                break
    return found


def functions(path, kind, text):
    if kind == "cpp":
        return cpp_functions(text)
    if kind == "python":
        return python_functions(text, path)
    if kind == "shell":
        return shell_functions(text)
    return []


def sources(root):
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not is_skipped_dir(d))
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            kind = kind_of(path)
            if kind:
                yield os.path.relpath(path, root), kind


def main(argv):
    listing = "--list" in argv
    args = [a for a in argv if a != "--list"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    long_files, long_functions, every = [], [], []
    for path, kind in sources(root):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > MAX_FILE_LINES:
            long_files.append((lines, path))
        for name, first, last in functions(path, kind, text):
            length = last - first + 1
            every.append((length, f"{path}:{first}-{last}", name))
            if length > MAX_FUNCTION_LINES:
                long_functions.append((length, f"{path}:{first}-{last}", name))
    if listing:
        for length, where, name in sorted(every, reverse=True):
            print(f"{length:5} {where} {name}")
        return 0
    for lines, path in sorted(long_files, reverse=True):
        print(f"{path}: {lines} lines (a source file has at most {MAX_FILE_LINES}): split it by subject")
    for length, where, name in sorted(long_functions, reverse=True):
        print(f"{where}: function {name} is {length} lines (at most {MAX_FUNCTION_LINES}): split it")
    if long_files or long_functions:
        print(f"sizes: {len(long_files)} file(s) over {MAX_FILE_LINES} lines, "
              f"{len(long_functions)} function(s) over {MAX_FUNCTION_LINES} (tools/check_sizes.py)")
        return 1
    print(f"sizes: no source file over {MAX_FILE_LINES} lines, no function over {MAX_FUNCTION_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
