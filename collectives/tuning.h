// tuning.h: the tuning table of `--allreduce auto`: per backend and rank count, which algorithm
// to run up to which message size, measured on the machine by scripts/tune_allreduce.py (a sweep
// of dpbench-micro's all-reduce benchmarks), as NCCL tunes between its algorithms.
//
// File format (JSON; the committed default is collectives/tuning/default.json, compiled in):
//   {"format": "dpbench-allreduce-tuning/1", "machine": {...}, "command": "...",
//    "tables": [{"backend": "cpu", "ranks": 2,
//                "rules": [{"up_to_bytes": 32768, "algorithm": "direct"},
//                          {"up_to_bytes": null, "algorithm": "ring"}]}, ...]}
// A message of b bytes (per rank) runs the first rule with b <= up_to_bytes; the last rule has
// up_to_bytes null (no bound). Which table applies to k ranks on a backend:
//   1. the table of that backend and exactly k ranks;
//   2. else that backend's table with the nearest rank count (the smaller on a tie), where any
//      algorithm that refuses k ranks (e.g. rhd for k = 3) is replaced by ring;
//   3. else (no table for the backend) ring for every size.
// Two levels (issue 26; resolve_tuning_nodes): when the k ranks are nodes > 1 nodes on an emulated
// link, the tables (measured on one machine) know nothing of the slow network, so auto weighs
// hier against each rule with the cost models on that link (collectives/link.h: a flat step that
// crosses waits for the inter-node link, hier crosses with 1/g of the data) and runs hier on the
// sizes where hier's modeled time is at least 15% lower (the model's error bound against emulated
// runs; a closer call keeps the rule measured here); the crossing size is found by bisection in
// each rule's range. Without an emulated link (real nodes: their links are not known here) the flat rules
// stand; --allreduce hier chooses it by hand.
// The resolution is stated in the result's description (CSV column allreduce_resolved, the
// benchmarks' JSON), e.g. "auto: direct<=32KiB; ring (default table: cpu k=2)", or on 2 x 2 nodes
// "auto: rhd<=64KiB; hier (table t.json: cpu k=4; 2 nodes: hier where its cost on the link (...)
// is 15% lower)".
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "collectives/link.h"
#include "src/core/device.h"
#include "src/core/transport.h"

namespace dpb {

struct TuneRule {
  size_t up_to_bytes = 0;  // inclusive; unbounded when `last`
  bool unbounded = false;
  std::string algorithm;
};

struct TuneTable {
  std::string backend;
  int ranks = 0;
  std::vector<TuneRule> rules;
};

struct TuneFile {
  std::string source;  // "default" or the path
  std::vector<TuneTable> tables;
};

// Parses and checks a tuning file ("" : the compiled-in default). Throws dpb::Error naming the
// file and the offending entry (unknown algorithm or backend, unordered or unbounded rules).
TuneFile load_tune_file(const std::string& path);
TuneFile parse_tune_json(const std::string& text, const std::string& source);

// The rules for k ranks on devices of `kind`, by the rules above; `why` says which table.
std::vector<TuneRule> resolve_tuning(const TuneFile& f, BackendKind kind, int k, std::string* why);
// The rules for k ranks on link.nodes nodes of `link` (see above): resolve_tuning's, with hier
// where its cost on the link is 15% lower than the rule's algorithm's, when link.nodes > 1, the
// link is emulated (enabled), every node holds at least 2 ranks and hier runs with k ranks of this
// kind as `launcher`; else resolve_tuning's rules. `why` adds what was weighed.
std::vector<TuneRule> resolve_tuning_nodes(const TuneFile& f, BackendKind kind, int k,
                                           const LinkSpec& link, Launcher launcher,
                                           std::string* why);
// "direct<=32KiB; ring": the rules in one line (no commas, so it fits a CSV field).
std::string describe_rules(const std::vector<TuneRule>& rules);

}  // namespace dpb
