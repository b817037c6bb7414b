#!/usr/bin/env bash
# csv_test.sh BUILD_DIR: dpbench's --csv and --dump-params outputs. A bad output path is
# refused before the data is even loaded, naming the path as given; a symlinked CSV stays a link; a
# read-only one is left alone; a run stopped by SIGTERM or SIGINT keeps the rows of its finished
# epochs, whole, with no temporary file left; the two-level settings (nodes, the link between
# them) are in the rows. Exit 77 (ctest: skipped) without the dataset.
set -u
BIN="$1/dpbench"
DATA=/usr/share/datasets/fashion-mnist
[ -d "$DATA" ] || { echo "csv_test: $DATA missing (apt-get install dataset-fashion-mnist)"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
TINY=(train --devices 1 --batch 64 --train-limit 256 --test-limit 64 --quiet)

refused() {  # refused "needle" args...: non-zero exit, needle in the message, no work started
  local needle="$1"; shift
  out=$("$BIN" "${TINY[@]}" "$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] || ! grep -qF -- "$needle" <<<"$out" || grep -q "auto picked\|^epoch" <<<"$out"; then
    fail "dpbench $* -> rc=$rc, expected a refusal naming '$needle' before any work:"; echo "$out"
  else
    echo "ok: $* -> $(head -1 <<<"$out" | cut -c1-120)"
  fi
}
refused "'$tmp/no/dir/out.csv': directory '$tmp/no/dir' does not exist" --csv "$tmp/no/dir/out.csv"
refused "'$tmp': it is a directory" --csv "$tmp"
refused "'$tmp/no/p.bin'" --dump-params "$tmp/no/p.bin"
printf 'model\n' > "$tmp/ro.csv"; chmod 0444 "$tmp/ro.csv"
refused "'$tmp/ro.csv': the file is read-only" --csv "$tmp/ro.csv"
[ "$(cat "$tmp/ro.csv")" = model ] || fail "read-only CSV was changed"
printf 'other,header\n' > "$tmp/other.csv"
refused "header differs" --csv "$tmp/other.csv"

# A symlinked --csv: the target gets the rows, the link stays a link.
mkdir "$tmp/runs"; ln -s runs/a.csv "$tmp/latest.csv"
"$BIN" "${TINY[@]}" --epochs 2 --csv "$tmp/latest.csv" || fail "run through a symlink"
[ -L "$tmp/latest.csv" ] || fail "the symlink was replaced by a file"
[ "$(wc -l < "$tmp/runs/a.csv")" = 3 ] || { fail "symlink target rows"; cat "$tmp/runs/a.csv"; }

ls -a "$tmp" "$tmp/runs" | grep -q '\.tmp\.\|\.probe\.' && fail "temporary file left: $(ls -a "$tmp")"

# Two levels (issue 26): nodes as the run split its ranks (--nodes, else DPB_NODES) and the link
# between nodes are columns.
two_level() {  # two_level CSV WANT (nodes,node_link_gbps,node_link_latency_us of the last row)
  got=$(python3 -c 'import csv,sys; r=list(csv.DictReader(open(sys.argv[1])))[-1]
print(",".join(r[c] for c in ("nodes", "node_link_gbps", "node_link_latency_us")))' "$1")
  [ "$got" = "$2" ] && echo "ok: $1: nodes,node_link_gbps,node_link_latency_us = $got" ||
    fail "$1: nodes,node_link_gbps,node_link_latency_us = '$got', want '$2'"
}
TWO=(train --devices 2 --batch 64 --train-limit 256 --test-limit 64 --epochs 1 --quiet)
"$BIN" "${TWO[@]}" --nodes 2 --node-link-gbps 20 --node-link-latency-us 5 --csv "$tmp/nodes.csv" ||
  fail "run with --nodes 2"
two_level "$tmp/nodes.csv" "2,20,5"
DPB_NODES=2 "$BIN" "${TWO[@]}" --csv "$tmp/env-nodes.csv" || fail "run with DPB_NODES=2"
two_level "$tmp/env-nodes.csv" "2,0,0"

# Interrupted runs: the CSV holds every finished epoch, each row whole. (A signal during the ~0.1 ms
# of a write could leave a .tmp file, so that is not checked here.) set -m: without job control a
# background command ignores SIGINT.
for sig in TERM INT; do
  csv="$tmp/$sig.csv"
  set -m; "$BIN" "${TINY[@]}" --epochs 1000 --csv "$csv" & pid=$!; set +m
  for _ in $(seq 600); do  # until 3 epochs are written (60 s at most)
    [ -f "$csv" ] && [ "$(wc -l < "$csv")" -ge 4 ] && break
    sleep 0.1
  done
  kill -"$sig" "$pid"; wait "$pid"
  rows=$(($(wc -l < "$csv") - 1))
  # every row has the header's field count, and the epoch column counts 1, 2, ... (a CSV reader:
  # cells such as busy and inject are quoted and hold commas)
  if [ "$rows" -ge 3 ] && [ "$rows" -lt 1000 ] && python3 - "$csv" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], newline="")))
e = rows[0].index("epoch")
sys.exit(any(len(r) != len(rows[0]) or r[e] != str(i) for i, r in enumerate(rows[1:], 1)))
PY
  then
    echo "ok: SIG$sig after $rows epochs: $rows whole rows, epochs 1..$rows"
  else
    fail "SIG$sig: $rows rows"; cat "$csv"
  fi
done
[ $fails -eq 0 ] && echo "csv_test: all passed" || { echo "csv_test: $fails failure(s)"; exit 1; }
