// run_options.h: the run options every front end shares (`dpbench train`, `dpbench project`, the
// coming `fit`, and dpbench-micro's --dpb_* flags), each described once: its name, the value it
// takes, one line of help, its limits (the check) and the TrainConfig field it sets. The front ends
// only adapt the table: src/cli/run_options_cli.h registers the entries with CLI11, bench/main.cpp
// matches them in its --dpb_<micro> hand parser. So a value is refused with the same limits and
// the same words in every front end, and --help shows the same text. Adding a run option: one
// entry in run_options.cpp (and, when it has a field, that field in TrainConfig).
#pragma once
#include <string>
#include <vector>

#include "kernels/backends.h"
#include "src/train/trainer.h"

namespace dpb {

// Limits shared by every front end (one place, so they cannot drift apart again).
// Ranks: the trainer runs at most 64 (validate() holds the same bound), and `dpbench project`
// predicts runs that `dpbench train` can make and is checked against them (scripts/link_study.py
// goes to 64), so project takes the same limit rather than extrapolating to counts no run checks.
inline constexpr int kMaxRanks = 64;
// The Fashion-MNIST training set: what --train-limit 0 ("all") means where no data is loaded
// (`dpbench project`). A global batch is at most that (beyond it no step is a minibatch): the same
// for --batch and dpbench-micro's per-model --dpb_<model>_batch.
inline constexpr int kTrainSetSize = 60000;
inline constexpr int kMaxBatch = kTrainSetSize;
// CPU math threads per rank: 0 picks cores / ranks (at least 1) everywhere. The ranks of one
// process together have at most as many (check_thread_budget): 8 x 4096 OpenMP threads met the
// kernel's map count (vm.max_map_count 65530: a stack and its guard per thread), and libgomp
// crashed (SIGSEGV) when it could not make them.
inline constexpr int kMaxThreads = 4096;

// Throws dpb::Error naming --devices and --threads when `ranks` ranks of one process with
// `threads` math threads each (0: cores / ranks) would pass kMaxThreads threads together.
void check_thread_budget(int ranks, int threads);

struct RunOption {
  std::string name;   // dpbench's flag without "--": "devices"
  std::string micro;  // dpbench-micro's flag without "--dpb_" ("" where it has none); see list
  bool list = false;  // dpbench-micro takes a comma list of values (each checked alike)
  std::string value;  // what the value is, for --help: "N", "X", "NAME", "FILE" ("": a flag)
  std::string help;   // one line for --help, the same in every front end
  // "" when the text is a valid value, else why not. A reason naming an option ("--tune-file
  // PATH: cannot open") is re-spelled with the front end's flag by run_option_error().
  std::string (*check)(const std::string& text);
  // Sets its TrainConfig field from a checked value; nullptr: a run input outside TrainConfig
  // (the data directory, the example limits), which the front end keeps itself.
  void (*set)(TrainConfig& cfg, const std::string& text);
  // The field's value in cfg, for --help's defaults; nullptr with set.
  std::string (*get)(const TrainConfig& cfg);
  // The flag may be given more than once: the front end joins its values with ';' (--inject).
  bool repeat = false;
};

const std::vector<RunOption>& run_options();
// The entry called name (dpbench's spelling); throws naming it when there is none.
const RunOption& run_option(const std::string& name);
// The entry whose dpbench-micro flag is --dpb_<micro>, or nullptr.
const RunOption* find_micro_option(const std::string& micro);

// "FLAG: reason" for a value of o refused, the flag spelled as the front end spells it.
std::string run_option_error(const RunOption& o, const std::string& flag, const std::string& why);
// Checks text for o and (when o has a field) sets it in cfg; throws dpb::Error "FLAG: reason".
void apply_run_option(const RunOption& o, const std::string& flag, const std::string& text,
                      TrainConfig& cfg);
// Checks text for o without setting anything; throws dpb::Error "FLAG: reason".
void check_run_option(const RunOption& o, const std::string& flag, const std::string& text);

// Strict parsers shared by the checks and the front ends: the whole text must be the number.
bool parse_int_text(const std::string& text, long long& out);
bool parse_double_text(const std::string& text, double& out);

// --backend's value beside the table's names: the backend auto_backend() picks.
inline constexpr const char* kAutoBackend = "auto";
// The backend --backend auto stands for: the CUDA backend when it can run here, else the CPU's.
const BackendEntry& auto_backend();
// The entry a --backend value names: auto_backend() for "auto", else the table's entry.
const BackendEntry& resolve_backend(const std::string& name);

// The environment variables dpbench and dpbench-micro read, each described once: --help's lines
// (run_env_help) and the knobs the ranks must agree on (src/train/agree.h) come from this table.
struct RunEnvVar {
  std::string name;   // "DPB_SHM"
  std::string value;  // what it takes, for --help: "0|1" ("": shown bare)
  std::string help;   // one line for --help
  // Shapes a run, so every rank must see the same value; false where it may differ by node
  // (DPBENCH_DATA: a path; the ranks compare the data it gave instead).
  bool agree = true;
};
const std::vector<RunEnvVar>& run_env_vars();

// One "  NAME=VALUE  help" line per entry of run_env_vars(): the one text both --help outputs show.
std::string run_env_help();

}  // namespace dpb
