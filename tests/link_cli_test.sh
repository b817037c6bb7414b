#!/usr/bin/env bash
# link_cli_test.sh BUILD_DIR: the emulated link and the projection on the command line: bad
# values refused naming the option; `dpbench project` prints one JSON object, writes a profile
# and reads it back; it profiles the --optimizer/--loss table entries and records them (a profile
# is refused for another optimizer or loss); --shard projects every mode (refused without the
# collectives' cost models); an emulated-link training run records its link in the CSV and names
# the devices with it; --inject's bad specs are refused (exit 2) naming the flag and the part.
set -u
BIN="$1/dpbench"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect_fail() {  # expect_fail "needle" args...
  local needle="$1"; shift
  out=$("$BIN" "$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] || ! grep -qF -- "$needle" <<<"$out"; then
    fail "dpbench $* -> rc=$rc, expected non-zero and '$needle' in:"; echo "$out" | head -5
  else
    echo "ok: dpbench $* -> rc=$rc ($(head -1 <<<"$out" | cut -c1-100))"
  fi
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$BIN" project --help | grep -q -- "--link-gbps" || fail "project --help"
expect_fail "--link-gbps" train --link-gbps -1 --train-limit 64 --test-limit 16
expect_fail "--link-latency-us" train --link-latency-us nan --train-limit 64 --test-limit 16
expect_fail "--link-latency-us" project --link-latency-us -5
# --inject (src/train/inject.h): a bad spec is bad input (exit 2) naming the flag and the part; the
# flag may be repeated (CLI11 joins the values with ';': no "at most 1", the bad part named).
"$BIN" train --help | grep -q -- "--inject" || fail "train --help lacks --inject"
expect_fail "--inject: unknown kind 'bogus'" train --inject bogus --train-limit 64 --test-limit 16
[ $rc -eq 2 ] || fail "train --inject bogus: exit $rc, expected 2"
expect_fail "--inject: 'delay:rank=1,phase=nap,ms=5': unknown phase 'nap'" train \
  --inject "delay:rank=0,phase=data,ms=1" --inject "delay:rank=1,phase=nap,ms=5" --train-limit 64
expect_fail "--inject: 'link:rank=1,gbps=0': gbps" train --inject "link:rank=1,gbps=0"
expect_fail "--profile" project --profile /nonexistent/profile.json
expect_fail "--allreduce" project --allreduce carrier-pigeon
"$BIN" project --model lenet --devices 2 --batch 64 --train-limit 256 --allreduce auto \
    --profile-steps 1 --link-gbps 1 2>/dev/null | grep -q '"epoch_s"' || fail "project --allreduce auto"
printf '{"format": "dpbench-profile/1", "model": "lenet"}' > "$tmp/bad.json"
expect_fail "$tmp/bad.json" project --profile "$tmp/bad.json"
# A measured profile round trip: written, read back, refused for another model.
out=$("$BIN" project --model lenet --devices 2 --batch 64 --train-limit 256 --link-gbps 1 \
      --link-latency-us 20 --profile-steps 1 --profile-out "$tmp/p.json" 2>/dev/null) \
  || fail "project (measured)"
grep -q '"epoch_s"' <<<"$out" && grep -q '"exposed_comm_s"' <<<"$out" || fail "project output: $out"
"$BIN" project --model lenet --devices 4 --profile "$tmp/p.json" --overlap on \
    --grad-sync bucketed | grep -q '"compute_s"' || fail "project --profile"
expect_fail "profiles lenet" project --model resnet18 --profile "$tmp/p.json"
grep -q '"optimizer": "sgd"' "$tmp/p.json" && grep -q '"loss": "xent"' "$tmp/p.json" \
  || fail "the profile does not record sgd / xent: $(cat "$tmp/p.json")"
# The notebook's optimizer and loss on a small MLP: measured through their table entries, recorded
# in the profile and the output; the profile's input is --data synthetic's --mlp-input (1024).
MLP=(--model mlp --mlp-layers 4 --mlp-hidden 64 --data synthetic)
out=$("$BIN" project "${MLP[@]}" --optimizer adam --loss mse --devices 2 --batch 64 \
      --train-limit 256 --link-gbps 1 --profile-steps 1 --profile-out "$tmp/adam.json" 2>/dev/null) \
  || fail "project --optimizer adam --loss mse"
grep -q '"optimizer":"adam"' <<<"$out" && grep -q '"loss":"mse"' <<<"$out" \
  || fail "project output lacks adam / mse: $out"
/usr/bin/env python3 - "$tmp/adam.json" <<'PY' || fail "the Adam profile"
import json, sys
p = json.load(open(sys.argv[1]))
assert (p["optimizer"], p["loss"], p["model"]) == ("adam", "mse", "mlp"), p
assert p["model_options"] == {"mlp_layers": 4, "mlp_hidden": 64, "mlp_input": 1024}, p
assert p["optimizer_s"] > 0 and len(p["params"]) == 2 * 5, p
PY
"$BIN" project "${MLP[@]}" --optimizer adam --loss mse --devices 4 --profile "$tmp/adam.json" \
  | grep -q '"optimizer":"adam"' || fail "project --profile (adam)"
expect_fail "profiles --optimizer adam --loss mse, not --optimizer sgd --loss xent" \
  project "${MLP[@]}" --profile "$tmp/adam.json"
expect_fail "--optimizer" project "${MLP[@]}" --optimizer lion
expect_fail "--loss" project "${MLP[@]}" --loss hinge
# --shard: each mode projected from the same profile (its per-layer ask times recorded); the
# collectives it needs must have a cost model (auto has no reduce-scatter).
for m in none optimizer gradients parameters; do
  "$BIN" project "${MLP[@]}" --optimizer adam --loss mse --devices 4 --profile "$tmp/adam.json" \
      --shard $m --grad-sync per-param --link-gbps 1 >"$tmp/shard-$m.json" || fail "project --shard $m"
done
/usr/bin/env python3 - "$tmp" <<'PY' || fail "project --shard outputs"
import json, sys
p = json.load(open(sys.argv[1] + "/adam.json"))
assert all("fwd_at_s" in q for q in p["params"]), p["params"]
r = {m: json.load(open(f"{sys.argv[1]}/shard-{m}.json"))
     for m in ("none", "optimizer", "gradients", "parameters")}
assert all(r[m]["shard"] == m for m in r), r
# 5 layers, one unit each: ZeRO-1 adds 5 gathers to the 10 all-reduces, ZeRO-2 5 reduce-scatters
# and 5 gathers, ZeRO-3 5 + 3 gathers and 5 reduce-scatters.
assert [r[m]["calls_per_step"] for m in r] == [10, 15, 10, 13], r
assert r["parameters"]["comm_s"] > r["gradients"]["comm_s"] > 0, r
PY
expect_fail "--shard gradients: runs reduce-scatter" project "${MLP[@]}" --shard gradients --allreduce auto
expect_fail "--shard" project "${MLP[@]}" --shard everything
# Fashion-MNIST (the default --data): the MLP takes the 784 pixels, as `dpbench train` builds it.
"$BIN" project --model mlp --mlp-layers 2 --mlp-hidden 16 --devices 1 --batch 8 --train-limit 16 \
    --profile-steps 1 --profile-out "$tmp/mlp784.json" >/dev/null 2>&1 || fail "project mlp"
grep -q '"mlp_input": 784' "$tmp/mlp784.json" || fail "the MLP on fashion-mnist: $(head -c 300 "$tmp/mlp784.json")"
if [ -d /usr/share/datasets/fashion-mnist ]; then
  out=$("$BIN" train --devices 2 --batch 32 --epochs 1 --train-limit 64 --test-limit 16 \
      --link-gbps 2 --link-latency-us 10 --grad-sync bucketed --bucket-mb 0.1 --overlap on \
      --csv "$tmp/l.csv") || fail "emulated-link run"
  # The summary names the ranks' devices with the link they are on.
  grep -q "devices: cpu:0 .* + link 2 Gb/s, 10 us" <<<"$out" || fail "device name with the link: $out"
  /usr/bin/env python3 - "$tmp/l.csv" <<'PY' || fail "CSV link columns"
import csv, sys
r = list(csv.DictReader(open(sys.argv[1])))[-1]
assert float(r["link_gbps"]) == 2 and float(r["link_latency_us"]) == 10, r
assert r["replicas_in_sync"] == "1", r
PY
fi
[ $fails -eq 0 ] && echo "link_cli_test: all passed" || { echo "link_cli_test: $fails failure(s)"; exit 1; }
