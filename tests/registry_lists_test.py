#!/usr/bin/env python3
"""registry_lists_test.py BUILD_DIR: the tables' entries as the binaries list them agree, and the
scripts and tests iterate those lists instead of their own.

  1. `dpbench train --help` and `dpbench info` list the same models, backends, all-reduce
     algorithms, grad-sync modes, optimizers and losses, in table order;
  2. dpbench-micro registers allreduce/cpu/<alg> (reducescatter/, allgather/) for exactly the
     algorithms of `dpbench info`'s allreduce_algorithms (reducescatter_algorithms,
     allgather_algorithms) that run on the CPU as threads, its --help names each table, and
     scripts/link_study.py's micro mode times the all-reduce's;
  3. no script or shell test holds a hand list (a list, tuple, set or `for x in ...` of two or
     more names of one table) naming an entry the binaries do not list, and the files that mean
     "every entry" (link_study.py, link_study_projection.py, link_study_test.sh) hold none at all.
Run by ctest (registry_lists); seconds.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVERY_ENTRY_FILES = ("scripts/link_study.py", "scripts/link_study_projection.py",
                     "tests/link_study_test.sh")


def out(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def help_tables(dpbench):
    """{'Models': [...], 'Backends': [...], ...} from the footer of `dpbench train --help`."""
    text = out([dpbench, "train", "--help"])
    tables, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^(Models|Backends|All-reduce algorithms|Gradient sync modes|Optimizers|Losses)\b.*:$", line)
        if m:
            cur = tables.setdefault(m.group(1), [])
        elif cur is not None and line.startswith("  ") and not line.startswith("   "):
            cur.append(line.split()[0])
        else:
            cur = None
    return tables


def hand_lists(text):
    """Every bracketed list of quoted strings and every shell `for x in a b c` in text."""
    for m in re.finditer(r"[\[\(\{]\s*((?:[\"'][\w.-]+[\"']\s*,\s*)+[\"'][\w.-]+[\"'])\s*,?\s*[\]\)\}]",
                         text):
        yield m.start(), re.findall(r"[\"']([\w.-]+)[\"']", m.group(1))
    for m in re.finditer(r"\bfor\s+\w+\s+in\s+([\w. -]+?)\s*;\s*do", text):
        yield m.start(), m.group(1).split()


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    dpbench, micro = os.path.join(build, "dpbench"), os.path.join(build, "dpbench-micro")
    fails = []
    tables = help_tables(dpbench)
    for t in ("Models", "Backends", "All-reduce algorithms", "Gradient sync modes", "Optimizers",
              "Losses"):
        if len(tables.get(t, [])) < 1:
            fails.append(f"`dpbench train --help` lists no {t}")
    info = json.loads(out([dpbench, "info"]))
    for title, key in (("All-reduce algorithms", "allreduce_algorithms"), ("Models", "models"),
                       ("Backends", "backends"), ("Gradient sync modes", "grad_sync_modes"),
                       ("Optimizers", "optimizers"), ("Losses", "losses")):
        listed = [e["name"] for e in info.get(key, [])]
        if listed != tables.get(title):
            fails.append(f"dpbench info's {key} lists {listed}, train --help {tables.get(title)}")
    cpu_threads = {e["name"] for e in info["allreduce_algorithms"]
                   if "cpu" in e["runs_on"] and "threads" in e["launchers"]}

    if os.path.exists(micro):
        names = out([micro, "--benchmark_list_tests=true", "--dpb_ranks=2"]).split()
        micro_help = out([micro, "--help"])
        for family in ("allreduce", "reducescatter", "allgather"):
            table = info.get(f"{family}_algorithms", [])
            if not table:
                fails.append(f"dpbench info lists no {family}_algorithms")
            want = {e["name"] for e in table if "cpu" in e["runs_on"] and "threads" in e["launchers"]}
            registered = {n.split("/")[2] for n in names if n.startswith(f"{family}/cpu/")}
            if registered != want:
                fails.append(f"dpbench-micro registers {family}/cpu/{sorted(registered)}, "
                             f"dpbench info says {sorted(want)}")
            listed = "<" + "|".join(e["name"] for e in table) + ">"
            if f"{family}/<backend>/{listed}/" not in micro_help:
                fails.append(f"dpbench-micro --help lacks {family}/<backend>/{listed}/")

    spec = importlib.util.spec_from_file_location("link_study", os.path.join(ROOT, "scripts/link_study.py"))
    link_study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(link_study)
    saved, sys.stderr = sys.stderr, open(os.devnull, "w")  # run() echoes its command
    try:
        studied = set(link_study.micro_algorithms(dpbench))
    finally:
        sys.stderr = saved
    if studied != cpu_threads:
        fails.append(f"link_study.py micro times {sorted(studied)}, expected {sorted(cpu_threads)}")

    known = {t: set(v) for t, v in tables.items()}
    everything = set().union(*known.values())
    files = []
    for d, exts in (("scripts", (".py", ".sh")), ("tests", (".py", ".sh"))):
        for f in sorted(os.listdir(os.path.join(ROOT, d))):
            if f.endswith(exts) and f != os.path.basename(__file__):
                files.append(f"{d}/{f}")
    for rel in files:
        text = open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace").read()
        for pos, names in hand_lists(text):
            for table, entries in known.items():
                hits = [n for n in names if n in entries]
                if len(hits) < 2:
                    continue
                line = text.count("\n", 0, pos) + 1
                if rel in EVERY_ENTRY_FILES:
                    fails.append(f"{rel}:{line}: a hand list of {table} {names}: ask the binaries")
                # A list of one table's names that also holds a word no table knows that looks
                # like one of its entries (lowercase, short) is a stale or misspelt entry.
                stale = [n for n in names if n not in everything and n not in hits
                         and re.fullmatch(r"[a-z][a-z0-9-]{1,10}", n) and len(hits) >= len(names) - 1]
                if stale:
                    fails.append(f"{rel}:{line}: {stale} in a list of {table} {names}: "
                                 f"not an entry the binaries list ({sorted(entries)})")
    for f in fails:
        print("FAIL:", f)
    if fails:
        print(f"registry_lists_test: {len(fails)} failure(s)")
        return 1
    print(f"registry_lists_test: {sum(map(len, tables.values()))} entries of {len(tables)} tables; "
          f"{len(files)} scripts and tests checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
