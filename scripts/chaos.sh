#!/usr/bin/env bash
# chaos.sh: fault injection against dpbench train and dpbench-micro (issue 25 item 7). Each case
# breaks a small run on purpose (LeNet, a few hundred examples; --data synthetic when Fashion-MNIST
# is absent) and asserts how it ends: the exit code, the message, the time to exit and what the
# --csv file keeps. Modes: threads (one process, --devices 2) and processes (mpirun -np 2 or 3).
#
#   kill9     kill -9 of the process (threads) or of rank 1 (processes) mid-run, after the first
#             epoch's row: exit non-zero within seconds, under mpirun "rank 1 (pid P) is gone" or
#             mpirun's "process rank 1 ... signal 9", no rank left running, the CSV holds only
#             complete rows and no temporary file is left
#   stall     a rank that stops answering: processes, SIGSTOP of rank 1 mid-epoch (after the first
#             row) while it computes, and while it waits in the all-reduce (rank 0 slowed 1 s a step);
#             threads, --inject delay:rank=1,phase=backward,ms=20000. With --timeout 3 the watchdog
#             ends the run with exit 5 naming rank 1, no row written as a normal one with the
#             stretched time; SKIP when `dpbench train --help` has no --timeout
#   mismatch  processes only (threads share one configuration): a wrapper gives rank 1 (or rank 2
#             of 3) other arguments (tests/mpi_agree_test.sh's mechanism): --batch 256/128, --seed
#             0/1, dpbench-micro --benchmark_filter; exit 2 within 15 s naming the field (mpi_agree's 10
#             plus room for a loaded CI machine: 6-9 s seen at load 25 on 2 cores)
#   fullfs    --csv on a full filesystem (a 64 KiB tmpfs, filled; root only): exit 2 with "No space
#             left on device", the old CSV byte for byte intact, no temporary file left. Not root:
#             a file size limit (ulimit -f, "File too large") in threads mode, processes SKIP. Also
#             --csv /dev/full: refused before any work (exit 2, "not a regular file")
#   nan       --lr 1e6 (1e20 on synthetic data): exit 4 naming epoch and step, the row marked
#             diverged 1; with --allow-divergence exit 0, the row marked
#
# Output: one line per case and mode: verdict (PASS, FAIL, SKIP), case, mode, the exit code wanted
# and got, the time to exit (from the fault for kill9 and the processes' stall, else from the
# start), the CSV rows kept, and the message matched. Exit 1 if any case fails, 2 on bad usage.
#
# Usage: scripts/chaos.sh [--quick] [--build DIR] [--only CASE,...] [--keep]
#   --quick     CI: threads and mpirun -np 2 (kill9: -np 3), and only the cases no other ctest
#               test runs; the others are reported as SKIP naming the test that runs the same fault
#               the same way with the same assertions (exit code, message, time, CSV rows):
#               stall threads and stall procs:2 (stopped computing): ctest watchdog; mismatch
#               batch, seed, benchmark_filter: ctest mpi_agree; nan and nan allow-divergence,
#               threads and procs:2: ctest divergence_cli. Without --quick every case, also -np 3
#   --build DIR the build folder with dpbench and dpbench-micro (default: build)
#   --only      some cases: kill9,stall,mismatch,fullfs,nan
#   --keep      keep the temporary folder (printed) with every case's output and CSV
# ctest: chaos (label mpi) runs `scripts/chaos.sh --quick --build BUILD`, about 30 s on 2 cores.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

BUILD="$ROOT/build" QUICK=0 ONLY="kill9,stall,mismatch,fullfs,nan" KEEP=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --quick) QUICK=1 ;;
    --keep) KEEP=1 ;;
    --build) [ $# -ge 2 ] || { echo "chaos.sh: --build needs a folder" >&2; exit 2; }; BUILD=$2; shift ;;
    --only) [ $# -ge 2 ] || { echo "chaos.sh: --only needs a list of cases" >&2; exit 2; }; ONLY=$2; shift ;;
    *) echo "chaos.sh: unknown argument '$1' (--help lists them)" >&2; exit 2 ;;
  esac
  shift
done
for c in ${ONLY//,/ }; do
  case "$c" in kill9|stall|mismatch|fullfs|nan) ;;
    *) echo "chaos.sh: --only: unknown case '$c' (kill9, stall, mismatch, fullfs, nan)" >&2; exit 2 ;;
  esac
done
wanted() { [[ ",$ONLY," == *",$1,"* ]]; }
BIN="$BUILD/dpbench" MICRO="$BUILD/dpbench-micro"
[ -x "$BIN" ] || { echo "chaos.sh: $BIN not built (scripts/setup.sh, or --build DIR)" >&2; exit 2; }
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3

tmp=$(mktemp -d /tmp/dpb-chaos.XXXXXX)
PIDS=() MOUNTS=()
cleanup() {
  local p m
  for p in "${PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null; done
  if [ "$KEEP" = 1 ]; then echo "chaos.sh: kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 1' INT TERM

DATA=${DPBENCH_DATA:-/usr/share/datasets/fashion-mnist}
if [ -f "$DATA/train-images-idx3-ubyte.gz" ] || [ -f "$DATA/train-images-idx3-ubyte" ]; then
  DATA_ARGS=() NAN_LR=1e6
else  # the synthetic batch of ones needs a larger step to overflow
  DATA_ARGS=(--data synthetic) NAN_LR=1e20
  echo "chaos.sh: no Fashion-MNIST in $DATA: --data synthetic, NaN at --lr $NAN_LR"
fi
BASE=(train --model lenet --backend cpu --test-limit 50 --threads 1 --quiet "${DATA_ARGS[@]}")
TRAIN=("${BASE[@]}" --seed 0)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --oversubscribe --bind-to none)
MPI_WHY=""
if ! command -v mpirun >/dev/null; then
  MPI_WHY="no mpirun (apt-get install openmpi-bin libopenmpi-dev)"
elif "${MPIRUN[@]}" -np 1 "$BIN" "${TRAIN[@]}" --epochs 1 --train-limit 50 --batch 50 2>&1 |
     grep -q "built without MPI"; then
  MPI_WHY="dpbench built without MPI"
fi
HAVE_TIMEOUT=0; "$BIN" train --help 2>&1 | grep -q -- '--timeout' && HAVE_TIMEOUT=1
if [ "$QUICK" = 1 ]; then NPS=(2); K9_NPS=(3); else NPS=(2 3); K9_NPS=(2 3); fi

npass=0 nfail=0 nskip=0 t_all=$(date +%s)
# report VERDICT CASE MODE WANT GOT SECONDS ROWS MESSAGE
report() {
  printf '%-4s  %-25s %-9s want %-3s got %-4s %6ss  rows %-2s %s\n' "$1" "$2" "$3" "$4" "$5" "$6" \
    "$7" "$(cut -c1-110 <<<"$8")"
  case "$1" in PASS) npass=$((npass + 1)) ;; FAIL) nfail=$((nfail + 1)) ;; *) nskip=$((nskip + 1)) ;; esac
}
skip() { report SKIP "$1" "$2" - - - - "$3"; }
# elsewhere CASE MODE: under --quick, 0 (and a SKIP line) when another ctest test runs the case.
elsewhere() {
  [ "$QUICK" = 1 ] || return 1
  local by=""
  case "$1 $2" in
    "stall threads" | "stall procs:2") by=watchdog ;;
    "mismatch"*) by=mpi_agree ;;
    "nan"*) by=divergence_cli ;;
  esac
  [ -n "$by" ] || return 1
  skip "$1" "$2" "--quick: ctest $by runs it"
}
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs() { local ms=$(( $(now_ms) - $1 )); echo "$((ms / 1000)).$(( ms % 1000 / 100 ))"; }

# start OUT CMD...: CMD in a session of its own (so that a deadline kills all of it), output to OUT.
start() { local out=$1; shift; setsid "$@" >"$out" 2>&1 </dev/null & PID=$!; PIDS+=("$PID"); }
# finish LIMIT_S: waits for $PID; past LIMIT_S kills its session and gives RC 124.
finish() {
  local end=$(( $(now_ms) + $1 * 1000 ))
  while kill -0 "$PID" 2>/dev/null; do
    if [ "$(now_ms)" -gt "$end" ]; then kill -9 -- "-$PID" 2>/dev/null; { wait "$PID"; } 2>/dev/null; RC=124; return; fi
    sleep 0.1
  done
  { wait "$PID"; } 2>/dev/null; RC=$?  # (no "Killed" notice: the case reports it)
}
# csv_rows FILE [STALL_S]: "ROWS BAD DIVERGED STRETCHED": complete data rows, rows whose field
# count is not the header's, the diverged column per row, rows of a normal look whose epoch_s
# passed STALL_S (a column naming a timeout or stall, when one exists and is set, marks a row).
csv_rows() {
  "$PY" - "$1" "${2:-0}" <<'PY'
import csv, os, sys
path, stall = sys.argv[1], float(sys.argv[2])
if not os.path.exists(path):
    print("0 0 - 0"); sys.exit()
rows = list(csv.reader(open(path, newline="")))
if not rows:
    print("0 0 - 0"); sys.exit()
head, data = rows[0], rows[1:]
good = [dict(zip(head, r)) for r in data if len(r) == len(head)]
marks = [c for c in head if "timeout" in c or "stall" in c or "watchdog" in c]
stretched = 0
for r in good:
    try:
        slow = stall > 0 and float(r.get("epoch_s") or 0) >= stall
    except ValueError:
        slow = False
    if slow and not any(r[c] not in ("", "0") for c in marks):
        stretched += 1
div = ",".join(r.get("diverged", "?") for r in good) or "-"
print(len(good), len(data) - len(good), div, stretched)
PY
}
# first_match FILE REGEX: the first line matching (extended, case-insensitive), or "".
first_match() { grep -m1 -iE -- "$2" "$1" 2>/dev/null | sed 's/^ *//'; }
# wait_row CSV: until the CSV has a data row (the first epoch ended) while $PID runs; 1 if it ended.
wait_row() {
  local i
  for i in $(seq 1 600); do
    kill -0 "$PID" 2>/dev/null || return 1
    [ -f "$1" ] && [ "$(wc -l <"$1")" -ge 2 ] && return 0
    sleep 0.1
  done
  return 1
}
# rank_pids: "R:PID ..." of $PID's (mpirun's) children, by OMPI_COMM_WORLD_RANK.
rank_pids() {
  local p r
  for p in $(pgrep -P "$PID"); do
    r=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [ -n "$r" ] && echo "$r:$p"
  done
}
# alive PIDS...: those still running (not zombies) a few seconds after mpirun ended.
alive() {  # the pids still running (not zombies) 5 s after mpirun ended (a loaded CI machine)
  local p left="" i
  for i in 1 2 3 4 5 6 7 8 9 10; do
    sleep 0.5
    left=""
    for p in "$@"; do
      [ -d "/proc/$p" ] && ! grep -q '^State:.*Z' "/proc/$p/status" 2>/dev/null && left="$left $p"
    done
    [ -z "$left" ] && break
  done
  [ -n "$left" ] && for p in $left; do left="$left ($p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-60), state $(grep '^State:' "/proc/$p/status" 2>/dev/null | cut -f2))"; done
  echo "$left"
}
tmp_left() { ls "$(dirname "$1")" | grep -F "$(basename "$1").tmp." | tr '\n' ' '; }

# --- kill9 ----------------------------------------------------------------------------------
kill9_threads() {
  local csv="$tmp/k9t.csv" out="$tmp/k9t.out"
  # Under a shell that reports the exit status (a job killed by a signal prints a notice here).
  start "$out" bash -c '"$@"; exit $?' chaos "$BIN" "${TRAIN[@]}" --devices 2 --epochs 40 \
    --train-limit 600 --batch 50 --csv "$csv"
  if ! wait_row "$csv"; then finish 5; report FAIL kill9 threads 137 "$RC" - 0 "no epoch row before the kill: $(tail -1 "$out")"; return; fi
  sleep 0.3  # inside the second epoch
  local t0; t0=$(now_ms); kill -9 "$(pgrep -P "$PID")"; finish 20; local dt; dt=$(secs "$t0")
  local r; read -r rows bad _ _ <<<"$(csv_rows "$csv")"; r=$(tmp_left "$csv")
  if [ "$RC" = 137 ] && [ "$rows" -ge 1 ] && [ "$bad" = 0 ] && [ -z "$r" ]; then
    report PASS kill9 threads 137 "$RC" "$dt" "$rows" "(a signal: no message) complete rows only, no temporary file"
  else
    report FAIL kill9 threads 137 "$RC" "$dt" "$rows" "partial rows $bad, temporary files: ${r:-none}"
  fi
}
kill9_procs() {
  local np=$1 csv="$tmp/k9p$1.csv" out="$tmp/k9p$1.out" mode="procs:$1"
  start "$out" "${MPIRUN[@]}" -np "$np" "$BIN" "${TRAIN[@]}" --epochs 40 --train-limit 600 --batch 50 \
    --overlap on --grad-sync per-param --csv "$csv"
  if ! wait_row "$csv"; then finish 5; report FAIL kill9 "$mode" '!0' "$RC" - 0 "no epoch row before the kill: $(tail -1 "$out")"; return; fi
  sleep 0.3
  local ranks victim pids=() rp
  ranks=$(rank_pids)
  for rp in $ranks; do pids+=("${rp#*:}"); PIDS+=("${rp#*:}"); [ "${rp%%:*}" = 1 ] && victim=${rp#*:}; done
  [ -n "${victim:-}" ] || { finish 1; report FAIL kill9 "$mode" '!0' - - - "rank 1's process not found among mpirun's children"; return; }
  local t0; t0=$(now_ms); kill -9 "$victim"; finish 30; local dt; dt=$(secs "$t0")
  local left msg r; left=$(alive "${pids[@]}")
  msg=$(first_match "$out" 'rank 1 \(pid [0-9]+\) is gone|process rank 1 |rank 1\b.*(signal 9|killed)')
  read -r rows bad _ _ <<<"$(csv_rows "$csv")"; r=$(tmp_left "$csv")
  if [ "$RC" != 0 ] && [ "$RC" != 124 ] && [ -n "$msg" ] && [ -z "$left" ] && [ "$bad" = 0 ] && [ -z "$r" ]; then
    report PASS kill9 "$mode" '!0' "$RC" "$dt" "$rows" "$msg"
  else
    report FAIL kill9 "$mode" '!0' "$RC" "$dt" "$rows" "message: '${msg:-none}', ranks left:${left:- none}, partial rows $bad, temporary files: ${r:-none}"
    tail -5 "$out"
  fi
}

# --- stall ----------------------------------------------------------------------------------
# The watchdog's verdict names the rank that never arrived (src/core/watchdog.h).
STALL_MSG='rank 1 never arrived'
stall_verdict() {  # NAME MODE CSV OUT SECONDS_SINCE LIMIT_S
  local msg; msg=$(first_match "$4" "$STALL_MSG")
  read -r rows bad _ stretched <<<"$(csv_rows "$3" 3)"
  if [ "$RC" = 5 ] && [ -n "$msg" ] && [ "$bad" = 0 ] && [ "$stretched" = 0 ] &&
     [ "${5%.*}" -lt "$6" ]; then
    report PASS "$1" "$2" 5 "$RC" "$5" "$rows" "$msg"
  else
    msg=$(first_match "$4" "watchdog|never arrived")
    report FAIL "$1" "$2" 5 "$RC" "$5" "$rows" "want '$STALL_MSG' within ${6}s, rows with a stretched epoch_s $stretched, partial $bad; got: ${msg:-no watchdog message}"
  fi
}
stall_threads() {
  local csv="$tmp/stt.csv" out="$tmp/stt.out"
  local t0; t0=$(now_ms)
  start "$out" "$BIN" "${TRAIN[@]}" --devices 2 --epochs 1 --train-limit 300 --batch 50 --timeout 3 \
    --inject delay:rank=1,phase=backward,ms=20000 --csv "$csv"
  finish 40; stall_verdict stall threads "$csv" "$out" "$(secs "$t0")" 15
}
# stall_procs NP computing|waiting: SIGSTOP of rank 1 mid-epoch (after the first row), while it
# computes, or (waiting) while it waits in the all-reduce for rank 0, slowed by 1 s per step: its
# slot then says "waiting" as the live ranks' do.
stall_procs() {
  local np=$1 how=$2 csv="$tmp/stp$1$2.csv" out="$tmp/stp$1$2.out" mode="procs:$1" name="stall"
  local run=("${MPIRUN[@]}" -np "$np" "$BIN" "${TRAIN[@]}" --epochs 40 --batch 50 --timeout 3 --csv "$csv")
  if [ "$how" = waiting ]; then
    name="stall (stopped waiting)"; run+=(--train-limit 100 --inject delay:rank=0,phase=backward,ms=1000)
  else
    run+=(--train-limit 600)
  fi
  start "$out" "${run[@]}"
  if ! wait_row "$csv"; then finish 5; report FAIL "$name" "$mode" 5 "$RC" - 0 "no epoch row before the stop: $(tail -1 "$out")"; return; fi
  sleep 0.3  # inside the next epoch's steps
  local victim rp pids=()
  for rp in $(rank_pids); do pids+=("${rp#*:}"); PIDS+=("${rp#*:}"); [ "${rp%%:*}" = 1 ] && victim=${rp#*:}; done
  [ -n "${victim:-}" ] || { finish 1; report FAIL "$name" "$mode" 5 - - - "rank 1's process not found among mpirun's children"; return; }
  local t0; t0=$(now_ms); kill -STOP "$victim"; finish 40; local dt; dt=$(secs "$t0")
  local left; left=$(alive "${pids[@]}")
  kill -CONT "$victim" 2>/dev/null
  if [ -n "$left" ]; then
    report FAIL "$name" "$mode" 5 "$RC" "$dt" - "ranks left running after mpirun ended:$left"; return
  fi
  stall_verdict "$name" "$mode" "$csv" "$out" "$dt" 15
}

# --- mismatch (tests/mpi_agree_test.sh's wrapper: rank R runs `CMD... $ARGS_R`) -------------------
cat >"$tmp/rankwise.sh" <<'EOF'
#!/usr/bin/env bash
a="ARGS_${OMPI_COMM_WORLD_RANK:-0}"
exec "$@" ${!a:-}
EOF
chmod +x "$tmp/rankwise.sh"
# mismatch NAME NP WANT_TEXT VAR=VALUE... -- CMD...
mismatch() {
  local name=$1 np=$2 want=$3; shift 3
  local vars=() xs=()
  while [ "$1" != "--" ]; do vars+=("$1"); xs+=(-x "${1%%=*}"); shift; done
  shift
  local out="$tmp/mm-$name.out" t0; t0=$(now_ms)
  start "$out" env "${vars[@]}" "${MPIRUN[@]}" -np "$np" "${xs[@]}" "$tmp/rankwise.sh" "$@"
  finish 60; local dt; dt=$(secs "$t0")
  local msg; msg=$(first_match "$out" "$(sed 's/[][\.*^$()+?{}|]/\\&/g' <<<"$want")")
  if [ "$RC" = 2 ] && [ -n "$msg" ] && [ "${dt%.*}" -lt 15 ]; then
    report PASS "mismatch $name" "procs:$np" 2 "$RC" "$dt" - "$msg"
  else
    report FAIL "mismatch $name" "procs:$np" 2 "$RC" "$dt" - "want '$want' within 15 s"
    tail -5 "$out"
  fi
}

# --- fullfs ---------------------------------------------------------------------------------
# fullfs MODE (threads | procs:N): an old CSV on a filesystem with no space left, then a run that
# appends to it.
fullfs() {
  local mode=$1 dir="$tmp/fs-${1/:/}" run=() how="" want_text="No space left on device"
  if [ "$mode" = threads ]; then run=("$BIN" "${TRAIN[@]}" --devices 2); else run=("${MPIRUN[@]}" -np "${mode#procs:}" "$BIN" "${TRAIN[@]}"); fi
  run+=(--train-limit 300 --batch 50 --epochs 1 --csv "$dir/r.csv")
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=64k,mode=1777 dpb-chaos "$dir" 2>/dev/null; then
    MOUNTS+=("$dir"); how=tmpfs
  elif [ "$mode" = threads ]; then
    how=ulimit want_text="File too large"
  else
    skip fullfs "$mode" "needs root to mount a tmpfs (not root: threads mode uses ulimit -f)"; return
  fi
  start "$tmp/fs-old.out" "${run[@]}"; finish 60
  [ "$RC" = 0 ] || { report FAIL "fullfs ($how)" "$mode" 0 "$RC" - - "the run writing the old CSV failed: $(tail -1 "$tmp/fs-old.out")"; return; }
  cp "$dir/r.csv" "$tmp/fs-old.csv"
  local out="$tmp/fs-$1.out" t0; t0=$(now_ms)
  if [ "$how" = tmpfs ]; then
    dd if=/dev/zero of="$dir/filler" bs=4k 2>/dev/null
    start "$out" "${run[@]}"
  else  # 2 KiB: the old CSV (about 1.7 KB) and a row do not fit; write() then fails with EFBIG
    start "$out" bash -c 'ulimit -f 2; trap "" XFSZ; exec "$@"' chaos "${run[@]}"
  fi
  finish 60; local dt; dt=$(secs "$t0")
  local msg r same=no; msg=$(first_match "$out" "cannot write .*$want_text"); r=$(tmp_left "$dir/r.csv")
  cmp -s "$dir/r.csv" "$tmp/fs-old.csv" && same=yes
  read -r rows _ _ _ <<<"$(csv_rows "$dir/r.csv")"
  if [ "$RC" = 2 ] && [ -n "$msg" ] && [ "$same" = yes ] && [ -z "$r" ]; then
    report PASS "fullfs ($how)" "$mode" 2 "$RC" "$dt" "$rows" "$msg; old CSV intact"
  else
    report FAIL "fullfs ($how)" "$mode" 2 "$RC" "$dt" "$rows" "message '${msg:-none}', old CSV intact: $same, temporary files: ${r:-none}"
    tail -5 "$out"
  fi
  [ "$how" = tmpfs ] && umount "$dir" 2>/dev/null
}
devfull() {
  local out="$tmp/devfull.out" t0; t0=$(now_ms)
  start "$out" "$BIN" "${TRAIN[@]}" --devices 2 --train-limit 300 --batch 50 --epochs 1 --csv /dev/full
  finish 30; local dt; dt=$(secs "$t0")
  local msg; msg=$(first_match "$out" "cannot write '/dev/full': not a regular file")
  if [ "$RC" = 2 ] && [ -n "$msg" ] && ! grep -q "epoch" "$out"; then
    report PASS "fullfs (/dev/full)" threads 2 "$RC" "$dt" - "$msg"
  else
    report FAIL "fullfs (/dev/full)" threads 2 "$RC" "$dt" - "want a refusal before any epoch: $(tail -1 "$out")"
  fi
}

# --- nan ------------------------------------------------------------------------------------
# nan MODE ALLOW(0|1)
nan() {
  local mode=$1 allow=$2 csv="$tmp/nan-${1/:/}-$2.csv" out="$tmp/nan-${1/:/}-$2.out" run=()
  if [ "$mode" = threads ]; then run=("$BIN" "${TRAIN[@]}" --devices 2); else run=("${MPIRUN[@]}" -np "${mode#procs:}" "$BIN" "${TRAIN[@]}"); fi
  run+=(--train-limit 300 --batch 50 --epochs 3 --lr "$NAN_LR" --csv "$csv")
  local want=4 text='training diverged in epoch 1 at step [0-9]+/[0-9]+' name=nan
  if [ "$allow" = 1 ]; then run+=(--allow-divergence); want=0 text='stopped after it \(--allow-divergence\)' name="nan allow-divergence"; fi
  local t0; t0=$(now_ms); start "$out" "${run[@]}"; finish 60; local dt; dt=$(secs "$t0")
  local msg; msg=$(first_match "$out" "$text")
  read -r rows bad div _ <<<"$(csv_rows "$csv")"
  if [ "$RC" = "$want" ] && [ -n "$msg" ] && [ "$div" = 1 ] && [ "$bad" = 0 ]; then
    report PASS "$name" "$mode" "$want" "$RC" "$dt" "$rows" "$msg; row diverged=1"
  else
    report FAIL "$name" "$mode" "$want" "$RC" "$dt" "$rows" "message '${msg:-none}', CSV diverged column '$div' (want 1)"
    tail -5 "$out"
  fi
}

echo "chaos.sh: $BIN ($([ "$QUICK" = 1 ] && echo quick || echo full); load $(cut -d' ' -f1-3 /proc/loadavg))"
procs_or_skip() {  # CASE MODE: 0 when processes can run, else reports a SKIP
  [ -z "$MPI_WHY" ] && return 0
  skip "$1" "$2" "$MPI_WHY"; return 1
}
if wanted kill9; then
  kill9_threads
  for np in "${K9_NPS[@]}"; do procs_or_skip kill9 "procs:$np" && kill9_procs "$np"; done
fi
if wanted stall; then
  if [ "$HAVE_TIMEOUT" = 1 ]; then
    elsewhere stall threads || stall_threads
    for np in "${NPS[@]}"; do
      procs_or_skip stall "procs:$np" || continue
      elsewhere stall "procs:$np" || stall_procs "$np" computing
      stall_procs "$np" waiting
    done
  else
    skip stall threads "SKIP (no --timeout in this build)"
    for np in "${NPS[@]}"; do skip stall "procs:$np" "SKIP (no --timeout in this build)"; done
  fi
fi
if wanted mismatch; then
  T=("$BIN" "${BASE[@]}" --epochs 1 --train-limit 512)
  if elsewhere "mismatch batch,seed,benchmark_filter" procs:2; then :
  elif procs_or_skip "mismatch" "procs:2"; then
    mismatch batch 2 "ranks disagree on --batch: rank 0 256, rank 1 128" ARGS_0="--batch 256" \
      ARGS_1="--batch 128" -- "${T[@]}"
    mismatch seed 3 "ranks disagree on --seed: ranks 0-1 0, rank 2 1" ARGS_0="--seed 0" ARGS_1="--seed 0" \
      ARGS_2="--seed 1" -- "${T[@]}"
    if [ -x "$MICRO" ]; then
      mismatch benchmark_filter 2 \
        "ranks disagree on --benchmark_filter: rank 0 allreduce/cpu/ring/, rank 1 allreduce/cpu/naive/" \
        ARGS_0="--benchmark_filter=allreduce/cpu/ring/" ARGS_1="--benchmark_filter=allreduce/cpu/naive/" \
        -- "$MICRO" --benchmark_min_time=0.01 --benchmark_color=false --dpb_max_bytes=4K
    else
      skip "mismatch benchmark_filter" procs:2 "$MICRO not built"
    fi
  fi
fi
if wanted fullfs; then
  fullfs threads
  devfull
  for np in "${NPS[@]}"; do procs_or_skip fullfs "procs:$np" && fullfs "procs:$np"; done
fi
if wanted nan; then
  if ! elsewhere "nan, nan allow-divergence" "threads, procs:2"; then
    for allow in 0 1; do
      nan threads "$allow"
      for np in "${NPS[@]}"; do procs_or_skip nan "procs:$np" && nan "procs:$np" "$allow"; done
    done
  fi
fi
echo "chaos.sh: $npass passed, $nskip skipped, $nfail failed in $(( $(date +%s) - t_all ))s (load $(cut -d' ' -f1-3 /proc/loadavg))"
[ "$nfail" = 0 ]
