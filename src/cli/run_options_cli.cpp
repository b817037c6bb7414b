// run_options_cli.cpp: CLI11 adapter of the run-option table (see run_options_cli.h).
#include "src/cli/run_options_cli.h"

#include <cstdlib>

#include "src/train/shard.h"

namespace dpb {

CliRunOptions::CliRunOptions(CLI::App* app, TrainConfig& cfg, const std::vector<std::string>& names)
    : cfg_(cfg), names_(names) {
  for (const std::string& n : names_) {
    const RunOption& o = run_option(n);
    CLI::Option* opt = nullptr;
    if (o.value.empty()) {
      opt = app->add_flag("--" + o.name, flag_[n], o.help);
    } else {
      opt = app->add_option("--" + o.name, text_[n], o.help)->type_name(o.value);
      if (o.get) opt->default_str(o.get(cfg));
      // Given more than once: one text, the values joined with ';' (the table's check reads it).
      if (o.repeat) opt->multi_option_policy(CLI::MultiOptionPolicy::Join)->delimiter(';');
    }
    opt_[n] = opt;
  }
}

void CliRunOptions::apply() {
  for (const std::string& n : names_) {  // table order is the user's reading order, too
    if (!given(n)) continue;
    const RunOption& o = run_option(n);
    apply_run_option(o, "--" + o.name, o.value.empty() ? "true" : text_.at(n), cfg_);
  }
  // Sharded gradients and parameters move unit by unit: fused would make the whole model one
  // unit (a full-size bucket and gathered copy). Their default is bucketed (--bucket-mb).
  if (shards_gradients(cfg_.shard) && !given("grad-sync")) cfg_.sync.mode = SyncMode::Bucketed;
}

bool CliRunOptions::given(const std::string& name) const {
  const auto it = opt_.find(name);
  return it != opt_.end() && it->second->count() > 0;
}

std::string CliRunOptions::text(const std::string& name, const std::string& fallback) const {
  return given(name) ? text_.at(name) : fallback;
}

int CliRunOptions::int_value(const std::string& name, int fallback) const {
  long long v = fallback;
  if (given(name)) parse_int_text(text_.at(name), v);  // the table's parser; checked by apply()
  return int(v);
}

}  // namespace dpb
