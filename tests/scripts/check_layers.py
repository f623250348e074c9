#!/usr/bin/env python3
"""The layer check (docs/design.md, "Layers"): every `#include "..."` in src/, include/ and
python/src/ points at a file of its own layer or of a layer below it, and no file includes itself
through a chain of includes. Prints each offence as FILE:LINE and exits 1; exits 0 when there are
none. Usage: check_layers.py [ROOT] (default: the repository this script is in)."""
import os
import re
import sys

# Bottom to top. A layer is a list of source folders (src/X) and public headers
# (include/normlab/X.h); a file may include from its own layer and from the layers below it.
LAYERS = [
    ("base", ["include/normlab/errors.h"]),
    ("tensor", ["src/tensor"]),
    ("ops", ["src/ops"]),
    ("io", ["src/io", "include/normlab/safetensors.h", "include/normlab/metrics.h"]),
    ("text", ["src/text", "include/normlab/tokenizer.h"]),
    ("data", ["src/data", "include/normlab/data.h"]),
    ("config", ["src/config", "include/normlab/config.h", "include/normlab/config_file.h"]),
    ("dist", ["src/dist", "include/normlab/communicator.h"]),
    ("model", ["src/model", "include/normlab/model.h"]),
    ("diag", ["src/diag"]),
    ("train", ["src/train", "include/normlab/trainer.h", "include/normlab/checkpoint.h",
               "include/normlab/evaluate.h", "include/normlab/optimizer.h"]),
    ("interop", ["src/interop"]),
    ("doctor", ["src/doctor"]),
    ("lab", ["src/lab"]),
    ("report", ["src/report"]),
    ("cli", ["src/cli"]),
    ("python", ["python/src"]),
]
SCANNED = ["src", "include", "python/src"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(rel):
    """(index, name) of the layer a repository-relative path belongs to, or None."""
    for i, (name, members) in enumerate(LAYERS):
        for m in members:
            if rel == m or rel.startswith(m + "/"):
                return i, name
    return None


def resolve(root, src_rel, inc):
    """The repository-relative path an include names: next to the including file, then under
    src/, include/ and python/src/ (the include paths of the build); None when not found."""
    for base in [os.path.dirname(src_rel), "src", "include", "python/src"]:
        rel = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(root, rel)):
            return rel
    return None


def scan(root):
    files = []
    for top in SCANNED:
        for d, _, names in os.walk(os.path.join(root, top)):
            for n in names:
                if n.endswith((".h", ".cpp", ".hpp", ".cc")):
                    files.append(os.path.relpath(os.path.join(d, n), root))
    return sorted(files)


def check(root):
    problems, edges = [], {}
    for rel in scan(root):
        mine = layer_of(rel)
        if mine is None:
            problems.append(f"{rel}: in no layer: add its folder to LAYERS in {__file__} and to "
                            "docs/design.md")
            continue
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                target = resolve(root, rel, m.group(1))
                if target is None:
                    continue  # a generated file (build tree) or a system header in quotes
                edges.setdefault(rel, []).append((target, lineno))
                theirs = layer_of(target)
                if theirs is None:
                    problems.append(f"{rel}:{lineno}: includes {m.group(1)}, which is in no layer")
                elif theirs[0] > mine[0]:
                    problems.append(f"{rel}:{lineno}: includes {m.group(1)} from layer "
                                    f"'{theirs[1]}', above its own layer '{mine[1]}'")
    # Cycles of includes between files (a header that ends up including itself).
    state = {}

    def visit(node, path):
        state[node] = 1
        for target, lineno in edges.get(node, []):
            if state.get(target) == 1:
                chain = path[path.index(target):] + [target] if target in path else [node, target]
                problems.append(f"{node}:{lineno}: include cycle: {' -> '.join(chain)}")
            elif target not in state:
                visit(target, path + [target])
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    problems = check(root)
    for p in problems:
        print(p)
    order = " < ".join(name for name, _ in LAYERS)
    if problems:
        print(f"check_layers: {len(problems)} problem(s); layers, bottom to top: {order}")
        return 1
    print(f"check_layers: {len(scan(root))} files, no upward include, no cycle ({order})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
