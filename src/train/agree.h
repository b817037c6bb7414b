// agree.h: ranks agree before they work. Every rank's configuration (the run options that shape
// the computation, the environment knobs, a digest of the data, the binary's build id) is compared
// across the ranks of a group before any training or benchmark step, so that processes started
// with different arguments (a wrapper under mpirun passing --batch 256 to rank 0 and --batch 128
// to rank 1) stop at once with a message naming the field and the values, instead of hanging in
// mismatched collectives or training silently apart.
//
//   AgreeFields f = train_agree_fields(cfg, data);   // (name, value text) pairs, in one order
//   check_ranks_agree(group, rank, f);               // every rank of the group calls it
//
// Ranks as threads share one TrainConfig, so the check matters for processes (mpirun, srun); it
// runs over the group's host collectives and so works for both (the tests use threads).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "collectives/allreduce.h"
#include "src/data/dataset.h"
#include "src/train/trainer.h"

namespace dpb {

// (field name, its value as text): "--batch" "256", "DPB_SHM" "(unset)".
using AgreeFields = std::vector<std::pair<std::string, std::string>>;

// Collective: every rank of the group calls it with its own fields. Returns when every rank's
// fields are equal (one all-gather of a 64-bit hash); otherwise every rank throws dpb::Error
// "ranks disagree on --batch: rank 0 256, rank 1 128" (the first field, in rank 0's order, whose
// values differ; later differing fields are named after it), after a second and third round
// (the lengths, then the padded texts) that let every rank name the field.
void check_ranks_agree(CommGroup& group, int rank, const AgreeFields& fields);

// The message for the first disagreement among all ranks' fields (index: rank), or "" when they
// agree. A field one rank lacks reads "(absent)". The text check_ranks_agree throws.
std::string disagreement(const std::vector<AgreeFields>& all);

// Every run option with a TrainConfig field (the table of run_options.h: its get()), as
// "--<name>" (micro: "--dpb_<micro>", the options dpbench-micro takes, its lists left out).
AgreeFields run_option_fields(const TrainConfig& cfg, bool micro = false);
// The environment knobs of run_env_vars() that shape a run, "(unset)" when not set.
AgreeFields env_fields();
// The data: example counts, shapes and a 64-bit hash of every 64th example (and the last one),
// images and labels; hashing all 47 MB of Fashion-MNIST would cost most of a second.
AgreeFields data_fields(const Dataset& data);
// The binary: "build" (version, build type, compiler) and "binary" (a hash of /proc/self/exe's
// bytes, computed once per process).
AgreeFields build_fields();
// dpbench train's: run_option_fields, env_fields, data_fields and build_fields, in that order.
AgreeFields train_agree_fields(const TrainConfig& cfg, const Dataset& data);

// FNV-1a, 64 bits, continuing from h: the hash of the fields and of the data sample.
uint64_t fnv1a(const void* data, size_t bytes, uint64_t h = 0xcbf29ce484222325ull);

}  // namespace dpb
