// run_options_cli.h: the shared run options (src/train/run_options.h) as CLI11 options of one
// subcommand. The values are taken as text and checked after parsing by the table's own checks,
// so `train`, `project` (and `fit`) refuse a value with the same limits and words as
// dpbench-micro's --dpb_* flags, and show the same help.
#pragma once
#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <vector>

#include "src/train/run_options.h"

namespace dpb {

class CliRunOptions {
 public:
  // Adds --<name> for each name (entries of run_options()) to app; their defaults for --help are
  // cfg's fields, which apply() sets. cfg must outlive this object.
  CliRunOptions(CLI::App* app, TrainConfig& cfg, const std::vector<std::string>& names);
  // Checks every option given and sets its TrainConfig field; throws dpb::Error "--name: reason".
  void apply();
  bool given(const std::string& name) const;
  // The text given for name (a run input outside TrainConfig, e.g. --data-dir), or `fallback`.
  std::string text(const std::string& name, const std::string& fallback = "") const;
  // text() as an int (the option's check has passed in apply()).
  int int_value(const std::string& name, int fallback) const;

 private:
  TrainConfig& cfg_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> text_;
  std::map<std::string, bool> flag_;
  std::map<std::string, CLI::Option*> opt_;
};

}  // namespace dpb
