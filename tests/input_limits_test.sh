#!/usr/bin/env bash
# input_limits_test.sh BUILD_DIR: the bad inputs of issue 25's table that need no training, each
# refused with exit 2 and a message naming it (seconds):
#   dpbench-micro --benchmark_filter=NOMATCH: exit 2 naming the filter; --benchmark_out untouched
#     (an existing file keeps its bytes, a new one is not created, no FILE.tmp.<pid> is left);
#   --threads 1000000 (train, project, micro's --dpb_cpu_threads): refused, not SIGSEGV in libgomp;
#   --link-gbps 1e-300 (it paced nothing) and latency past 10 s: refused (train, project, micro);
#   --csv and --dump-params on one file (directly or through a link): refused naming both, the
#     CSV untouched;
#   a tune file's up_to_bytes -5 / 1e30 / 100.7, ranks 2^31; a profile's forward_s 1e308,
#     ready_s -5: refused naming the file and the field;
#   --devices 8 x --threads 4096 (train, project): refused naming both.
# And the few that train briefly: --batch 16384 on 512 examples runs clamped to 512 (the CSV's
# global_batch 512); under ulimit -v (what loading takes + 50 MB, + 300 MB) LeNet / ResNet-18 end with exit 3 naming the
# limit, never a signal; mpirun -np 1 dpbench train --devices 2 runs its ranks as threads.
set -u
BUILD=$(cd "${1:?usage: input_limits_test.sh BUILD_DIR}" && pwd)
BIN="$BUILD/dpbench"
MICRO="$BUILD/dpbench-micro"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect2() {  # expect2 "needle" cmd args...: exit 2 and needle in the output
  local needle="$1"; shift
  out=$("$@" 2>&1); rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$needle" <<<"$out"; then
    fail "$(basename "$1") ${*:2} -> rc=$rc, expected 2 and '$needle' in:"; echo "$out" | tail -5
  else
    echo "ok: $(basename "$1") ${*:2} -> rc=2 ($(grep -F -- "$needle" <<<"$out" | head -1 | cut -c1-140))"
  fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
small=(--train-limit 64 --test-limit 16)

# 1. An empty benchmark selection.
if [ -x "$MICRO" ]; then
  echo '{"kept": true}' > "$tmp/good.json"
  expect2 "--benchmark_filter=NOMATCH: no benchmark matches" \
    "$MICRO" --benchmark_filter=NOMATCH --benchmark_out="$tmp/good.json"
  [ "$(cat "$tmp/good.json")" = '{"kept": true}' ] || fail "NOMATCH changed good.json: $(head -c 80 "$tmp/good.json")"
  expect2 "no benchmark matches" "$MICRO" --benchmark_filter=NOMATCH --benchmark_out="$tmp/new.json"
  [ -e "$tmp/new.json" ] && fail "NOMATCH created new.json"
  left=$(ls "$tmp" | grep -v '^good.json$') && fail "NOMATCH left: $left"
  mkdir "$tmp/cwd" && (cd "$tmp/cwd" && "$MICRO" --benchmark_filter=NOMATCH >/dev/null 2>&1)
  [ -z "$(find "$tmp/cwd" -type f)" ] || fail "NOMATCH wrote a default results file: $(find "$tmp/cwd" -type f)"
  expect2 "no benchmark matches" "$MICRO" --benchmark_filter=NOMATCH --benchmark_list_tests
  # A selection of configurations that cannot run: why, one line per reason, and the count; a
  # selection that runs says nothing of the configurations it did not select.
  expect2 "not registered (one rank: all-reduce has nothing to communicate" \
    "$MICRO" '--benchmark_filter=^allreduce/cpu/(ring|naive)/ranks:1/' --benchmark_list_tests
  grep -qF "no benchmark matches that can run (2 left out, why above)" <<<"$out" \
    || fail "ranks:1 selection: no count of the left-out in: $(tail -1 <<<"$out")"
  out=$("$MICRO" '--benchmark_filter=^allreduce/cpu/ring/ranks:2/bytes:4096/' --benchmark_list_tests 2>&1)
  grep -q "not registered" <<<"$out" && fail "a runnable selection listed left-out configurations: $(grep "not registered" <<<"$out" | head -2)"
else
  echo "skip: $MICRO not built"
fi

# 2. Bounds on --threads and the link.
expect2 "--threads" "$BIN" train --threads 1000000 "${small[@]}"
expect2 "--threads" "$BIN" project --threads 1000000
expect2 "--link-gbps" "$BIN" train --link-gbps 1e-300 "${small[@]}"
expect2 "--link-gbps" "$BIN" project --link-gbps 1e-300
expect2 "--link-latency-us" "$BIN" train --link-latency-us 2e7 "${small[@]}"
if [ -x "$MICRO" ]; then
  expect2 "--dpb_cpu_threads" "$MICRO" --dpb_cpu_threads=1000000
  expect2 "--dpb_link_gbps" "$MICRO" --dpb_link_gbps=1e-300
fi

# Tune files: every number checked, the error naming the file and the field.
tune() {  # tune RANKS UP_TO_BYTES -> path
  printf '{"format": "dpbench-allreduce-tuning/1", "tables": [{"backend": "cpu", "ranks": %s, "rules": [{"up_to_bytes": %s, "algorithm": "direct"}, {"up_to_bytes": null, "algorithm": "ring"}]}]}\n' "$1" "$2" > "$tmp/tune-$1-$2.json"
  echo "$tmp/tune-$1-$2.json"
}
for up in -5 1e30 100.7; do
  f=$(tune 2 "$up")
  expect2 "--tune-file $f table 1 rule 1: \"up_to_bytes\" must be an integer" \
    "$BIN" train --allreduce auto --tune-file "$f" "${small[@]}"
done
f=$(tune 2147483648 64)
expect2 "--tune-file $f table 1: \"ranks\" must be an integer" "$BIN" project --tune-file "$f"

# 3. Two outputs on one file.
echo "kept" > "$tmp/s.csv"
expect2 "--csv and --dump-params name the same file" \
  "$BIN" train --csv "$tmp/s.csv" --dump-params "$tmp/s.csv" "${small[@]}"
ln -s s.csv "$tmp/link.bin"
expect2 "--csv and --dump-params name the same file" \
  "$BIN" train --csv "$tmp/s.csv" --dump-params "$tmp/link.bin" "${small[@]}"
[ "$(cat "$tmp/s.csv")" = kept ] || fail "the refused run changed s.csv"

# Profiles: a measured one, then its numbers spoiled.
if "$BIN" project --model lenet --devices 2 --batch 64 --train-limit 256 --profile-steps 1 \
     --profile-out "$tmp/p.json" >/dev/null 2>&1; then
  spoil() {  # spoil KEY VALUE [PARAM_INDEX] -> path
    python3 - "$tmp/p.json" "$@" <<'PY'
import json, sys
src, key, value = sys.argv[1:4]
j = json.load(open(src))
(j["params"][int(sys.argv[4])] if len(sys.argv) > 4 else j)[key] = json.loads(value)
out = src[:-5] + "-" + key + ".json"
json.dump(j, open(out, "w"))
print(out)
PY
  }
  f=$(spoil forward_s 1e308)
  expect2 "--profile $f: profile field \"forward_s\" must be a number of seconds" \
    "$BIN" project --model lenet --devices 2 --profile "$f"
  f=$(spoil ready_s -5 1)
  expect2 "--profile $f: profile field \"params\"[1].ready_s" \
    "$BIN" project --model lenet --devices 2 --profile "$f"
else
  fail "dpbench project --profile-out failed"
fi

# 4. --devices x --threads: bounded in one process, naming both (8 x 4096 threads crashed libgomp).
expect2 "--devices 8 x --threads 4096 = 32768 CPU math threads" \
  "$BIN" train --devices 8 --threads 4096 "${small[@]}"
expect2 "--threads" "$BIN" project --devices 4 --threads 4096

# 5. --batch past the data: clamped to it with a note, the CSV says what ran (training: ~2 s).
out=$("$BIN" train --batch 16384 --train-limit 512 --test-limit 16 --epochs 1 --devices 2 \
      --threads 1 --quiet --csv "$tmp/clamp.csv" 2>&1); rc=$?
gb=$(python3 -c 'import csv,sys; print(next(csv.DictReader(open(sys.argv[1])))["global_batch"])' \
     "$tmp/clamp.csv" 2>/dev/null)
if [ $rc -eq 0 ] && [ "$gb" = 512 ] && grep -q "is more than the 512 training examples" <<<"$out"; then
  echo "ok: --batch 16384 on 512 examples -> global_batch 512, noted"
else
  fail "--batch 16384 on 512 examples: rc=$rc global_batch=$gb"; echo "$out" | tail -3
fi

# 6. Out of memory under an address-space limit: exit 3 with a message, never a signal (the
# host heap, oneDNN or the meta planner refusing; ~10 s). The limits are above what merely loading
# the binary maps (BASE: a CUDA build maps cuBLAS, cuDNN and NCCL, ~1 GB; a CPU build ~100 MB),
# found by bisection on `dpbench train --help`.
loads() { (ulimit -v "$1"; "$BIN" train --help >/dev/null 2>&1); }
if ! loads 8000000; then  # a sanitizer's shadow memory does not fit under any address limit
  echo "ok: SKIP the ulimit -v cases: $BIN does not start under an 8 GB address limit (ASan/TSan build?)"
else
lo=0 hi=8000000
while [ $((hi - lo)) -gt 10000 ]; do
  mid=$(((lo + hi) / 2))
  if loads "$mid"; then hi=$mid; else lo=$mid; fi
done
BASE=$hi
echo "ok: dpbench loads under ulimit -v $BASE KB"
oom() {  # oom LIMIT_KB EXPECTED_RC args...
  local lim=$1 want=$2; shift 2
  out=$( (ulimit -v "$lim"; "$BIN" train --epochs 1 --quiet "$@") 2>&1); rc=$?
  if [ $rc -ne "$want" ] || { [ $rc -eq 3 ] && ! grep -q "out of memory.*ulimit -v $lim" <<<"$out"; }; then
    fail "ulimit -v $lim train $* -> rc=$rc, expected $want (3: a message naming the limit)"
    echo "$out" | tail -3
  else
    echo "ok: ulimit -v $lim train $* -> rc=$rc"
  fi
}
oom $((BASE + 50000)) 3 --model lenet --devices 2 --batch 64 "${small[@]}"
oom $((BASE + 600000)) 0 --model lenet --devices 2 --batch 64 "${small[@]}"
oom $((BASE + 300000)) 3 --model resnet18 --devices 2 --batch 32 "${small[@]}"
# A rank thread whose stack cannot be mapped (each thread maps `ulimit -s`: 2.5 GB under a 3 GB
# limit leaves room for one): exit 3 naming the thread and the limit (was exit 2, "Resource
# temporarily unavailable", as for bad input).
out=$( (ulimit -s 2500000; ulimit -v 3000000; "$BIN" train --epochs 1 --quiet --model lenet \
        --devices 2 "${small[@]}") 2>&1); rc=$?
if [ $rc -eq 3 ] && grep -q "out of memory: could not start a thread.*ulimit -v 3000000" <<<"$out"; then
  echo "ok: a rank thread's stack refused under ulimit -v -> rc=3"
else
  fail "ulimit -s 2500000 -v 3000000 train --devices 2 -> rc=$rc, expected 3 naming the thread"
  echo "$out" | tail -3
fi
fi

# 7. One process under a launcher runs its ranks as threads (mpirun -np 1 as srun -n 1).
if command -v mpirun >/dev/null; then
  out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 1 \
        "$BIN" train --devices 2 --epochs 1 "${small[@]}" 2>&1); rc=$?
  if [ $rc -eq 0 ] && grep -q "threads of one process" <<<"$out"; then
    echo "ok: mpirun -np 1 dpbench train --devices 2 -> threads"
  elif grep -q "built without MPI" <<<"$out"; then
    echo "skip: built without MPI"
  else
    fail "mpirun -np 1 --devices 2: rc=$rc"; echo "$out" | tail -3
  fi
fi

[ $fails -eq 0 ] && echo "input_limits: all passed" || echo "input_limits: $fails FAILED"
[ $fails -eq 0 ]
