// fit_cmd.h: the `dpbench fit` subcommand: the largest batch per device (or, --vary layers, the
// deepest MLP) that fits devices of a given capacity, found by planning real training steps on the
// meta backend, with the memory breakdown at the peak; --check confirms it with real steps.
//   dpbench fit --model resnet18 --devices 4 --device-mem 24GiB [--check] [--json F] [--out F.csv]
//   dpbench fit --model mlp --optimizer adam --data synthetic --devices 2 --device-mem 24GiB
//               --vary layers --batch 6912       (one command line)
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "src/cli/run_options_cli.h"

namespace dpb {

struct FitArgs {
  TrainConfig run;  // the shared run options (src/train/run_options.h) set its fields
  std::unique_ptr<CliRunOptions> opts;
  std::string vary = "batch";  // an entry of the axis table in fit_cmd.cpp
  bool check = false;
  std::string json, out;
};

// Adds the subcommand and its options to app; returns it (check ->parsed()).
CLI::App* add_fit_command(CLI::App& app, FitArgs& args);
// Prints the summary on stdout; returns the exit status: 0 an answer (and --check agreed with
// it), 1 --check disagreed, 3 not even the smallest value fits. Throws dpb::Error on bad input.
int run_fit(FitArgs& args);

}  // namespace dpb
