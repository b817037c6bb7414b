// selftest.h: `dpbench selftest`: one small case of every op (the op table's kSelftest cases) on
// every device present against the CPU reference, and a 2-rank all-reduce per device with every
// algorithm of the all-reduce table that runs there, on inputs with exactly known sums. Pass/fail per check as a table
// or JSON; exit 1 when any check fails, else 0 (also without a GPU, saying why none was found).
#pragma once
#include <CLI/CLI.hpp>

namespace dpb {

struct SelftestOptions {
  bool json = false;
  bool all_cases = false;  // every op-table case, not only one per op
};

// Registers the subcommand on `app`; run_selftest(opt) when it was parsed.
CLI::App* add_selftest_command(CLI::App& app, SelftestOptions& opt);
int run_selftest(const SelftestOptions& opt);

}  // namespace dpb
