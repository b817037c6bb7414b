"""benchnames.py: the one parser of dpbench-micro benchmark names (python3 stdlib only).

The names are built by bench_name() in bench/common.cpp:
    allreduce/<backend>/<algorithm>/ranks:<k>[/shared]/bytes:<n>
    reducescatter/... and allgather/...: the same fields as allreduce
    gradsync/<backend>/<model>/<mode>/ranks:<k>[/shared]
    overlap/<backend>/<model>/<mode>/ranks:<k>[/shared]
    membw/<backend>/copy/threads:<k>[/shared]
plus Google Benchmark's suffixes (/manual_time, /repeats:N, /min_time:X, ...), which are dropped.

    >>> parse("allreduce/cpu/ring/ranks:4/bytes:1048576/manual_time")["alg"]
    'ring'
    >>> parse("reducescatter/cpu/rhd/ranks:4/bytes:4096")["bytes"]
    4096
"""

FAMILIES_WITH_ALG = ("allreduce", "reducescatter", "allgather", "membw")  # <family>/<backend>/<algorithm or operation>/...
FAMILIES_WITH_MODEL = ("gradsync", "overlap")  # <family>/<backend>/<model>/<mode>/...
# (Google Benchmark's threads:N suffix is not among them: dpbench-micro never uses ->Threads(),
# and membw's own count is threads:<k>.)
GB_SUFFIXES = ("manual_time", "real_time", "process_time", "repeats:", "min_time:",
               "min_warmup_time:", "iterations:")


def strip_suffixes(name):
    """The name without Google Benchmark's suffixes."""
    segs = name.split("/")
    while len(segs) > 1 and segs[-1].startswith(GB_SUFFIXES):
        segs.pop()
    return "/".join(segs)


def parse(name):
    """Fields of a benchmark name: family, backend, alg (allreduce, reducescatter, allgather, membw) or model and mode
    (gradsync, overlap), ranks (membw: threads), bytes (allreduce), shared (CUDA ranks sharing
    GPUs). Fields a family does not have are absent; ranks and bytes are ints."""
    segs = strip_suffixes(name).split("/")
    out = {"family": segs[0], "backend": segs[1] if len(segs) > 1 else "", "shared": False}
    plain = ["alg"] if segs[0] in FAMILIES_WITH_ALG else ["model", "mode"]
    for seg in segs[2:]:
        key, colon, val = seg.partition(":")
        if seg == "shared":
            out["shared"] = True
        elif colon:
            key = "ranks" if key == "threads" else key
            try:
                out[key] = int(val)
            except ValueError:
                out[key] = val
        elif plain:
            out[plain.pop(0)] = seg
    return out
