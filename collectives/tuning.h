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
// The resolution is stated in the result's description (CSV column allreduce_resolved, the
// benchmarks' JSON), e.g. "auto: direct<=32KiB; ring (default table: cpu k=2)".
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "src/core/device.h"

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
// "direct<=32KiB; ring": the rules in one line (no commas, so it fits a CSV field).
std::string describe_rules(const std::vector<TuneRule>& rules);

}  // namespace dpb
