// project_cmd.h: the `dpbench project` subcommand (src/train/projection.h does the work).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

#include "src/train/projection.h"

namespace dpb {

struct ProjectArgs {
  std::string model = "lenet", backend = "cpu", allreduce = "ring", sync_mode = "fused";
  std::string overlap = "off", profile_in, profile_out;
  ProjectConfig cfg;
  int threads = 0, profile_steps = 3, cores = -1;
};

// Adds the subcommand and its options to app; returns it (check ->parsed()).
CLI::App* add_project_command(CLI::App& app, ProjectArgs& args);
// Prints one JSON object on stdout; returns the exit status. Throws dpb::Error on bad input.
int run_project(ProjectArgs args);

}  // namespace dpb
