#!/usr/bin/env python3
"""check_includes.py: fails when a source file includes a project header its floor may not see.

The floors (docs/architecture.md): src/core is the ground floor and includes nothing else of the
project; backends (kernels/<name>/), data and the portable collectives stand on it; the backend
table, machine facts and the op-case conformance table (kernels/*.h, kernels/conformance/) see
every backend; models, the training loop, then the front ends (src/cli, bench) and tests on top.
Usage: check_includes.py [SOURCE_DIR]   (exit 1 and one line per violation when any).
"""
import os
import re
import sys

# Folder -> the project paths (prefixes) its files may include besides their own folder. The
# longest matching folder wins. A prefix ending in "/" is a folder; otherwise an exact header.
RULES = {
    "src/core": [],
    "src/data": ["src/core/"],
    "kernels/cpu": ["src/core/"],
    "kernels/async": ["src/core/", "kernels/cpu/"],  # runs the CPU kernels on stream workers
    "kernels/cuda": ["src/core/"],
    "kernels/meta": ["src/core/", "kernels/cpu/"],  # charges the CPU backend's conv workspaces
    "kernels": ["src/core/", "kernels/"],  # backends.h/machine_info: every backend's factory
    "kernels/conformance": ["src/core/", "kernels/"],
    "collectives": ["src/core/"],
    "collectives/mpi": ["src/core/", "collectives/"],
    "collectives/cuda": ["src/core/", "collectives/", "kernels/cuda/"],
    "src/model": ["src/core/", "kernels/backends.h"],
    "src/train": ["src/core/", "src/data/", "src/model/", "collectives/", "kernels/backends.h"],
    "src/cli": ["src/", "kernels/", "collectives/"],
    "bench": ["src/", "kernels/", "collectives/", "bench/"],
    "tests": None,  # anything
    "fuzz": None,
}
# Files outside these folders hold no C++ of the project.
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
EXTS = (".h", ".hpp", ".cpp", ".cu", ".cuh")


def folder_rule(path):
    d = os.path.dirname(path)
    while d:
        if d in RULES:
            return d, RULES[d]
        d = os.path.dirname(d)
    return None, None


def allowed(inc, own, rule):
    if inc.startswith(own + "/") and "/" not in inc[len(own) + 1:]:
        return True  # its own folder
    if rule is None:
        return True
    return any(inc.startswith(p) if p.endswith("/") else inc == p for p in rule)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    bad, checked = [], 0
    for top in ("src", "kernels", "collectives", "bench", "tests", "fuzz"):
        for dirpath, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for f in sorted(files):
                if not f.endswith(EXTS):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                own, rule = folder_rule(rel)
                if own is None:
                    bad.append(f"{rel}: in no floor (add its folder to RULES in {os.path.basename(__file__)})")
                    continue
                checked += 1
                text = open(os.path.join(dirpath, f), encoding="utf-8", errors="replace").read()
                for m in INCLUDE.finditer(text):
                    inc = m.group(1)
                    if "/" not in inc or not os.path.exists(os.path.join(root, inc)):
                        continue  # a system or generated header
                    if not allowed(inc, os.path.dirname(rel), rule):
                        line = text.count("\n", 0, m.start()) + 1
                        bad.append(f"{rel}:{line}: includes {inc}, which floor '{own}' may not see")
    for b in bad:
        print(b)
    print(f"check_includes: {checked} files, {len(bad)} violation(s) of the floors in docs/architecture.md")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
