// project_cmd.h: the `dpbench project` subcommand (src/train/projection.h does the work).
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "src/cli/run_options_cli.h"
#include "src/train/projection.h"

namespace dpb {

struct ProjectArgs {
  TrainConfig run;  // the shared run options (src/train/run_options.h) set its fields
  std::unique_ptr<CliRunOptions> opts;
  std::string profile_in, profile_out;
  int profile_steps = 3, cores = -1;
  // --compare-allreduce: one row per algorithm x --compare-shard mode (every mode by default),
  // printed as a table (--format table) or one JSON object (--format json).
  std::string compare_allreduce, compare_shard, format = "table";
};

// Adds the subcommand and its options to app; returns it (check ->parsed()).
CLI::App* add_project_command(CLI::App& app, ProjectArgs& args);
// Prints one JSON object on stdout; returns the exit status. Throws dpb::Error on bad input.
int run_project(ProjectArgs& args);

}  // namespace dpb
