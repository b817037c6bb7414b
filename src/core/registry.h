// registry.h: lookups shared by the extension-point tables. Each extension point is one table of
// entries with a `name` and a one-line `help` (kernels/backends.h: backends,
// collectives/registry.h: all-reduce algorithms, collectives/grad_sync.h: gradient-sync modes,
// src/model/model.h: models); the CLI's choices and --help, validation, benchmarks, error
// messages and test loops all read the tables, so adding an entry is the only list to edit.
#pragma once
#include <sstream>
#include <string>
#include <vector>

#include "src/core/check.h"

namespace dpb {

// "naive, ring, nccl": the names of a table's entries, in table order.
template <class Entry>
std::string entry_names(const std::vector<Entry>& table, const char* sep = ", ") {
  std::string s;
  for (const Entry& e : table) s += (s.empty() ? "" : sep) + std::string(e.name);
  return s;
}

template <class Entry>
std::vector<std::string> entry_name_list(const std::vector<Entry>& table) {
  std::vector<std::string> v;
  for (const Entry& e : table) v.push_back(e.name);
  return v;
}

// The entry called `name`, or nullptr.
template <class Entry>
const Entry* find_entry(const std::vector<Entry>& table, const std::string& name) {
  for (const Entry& e : table)
    if (e.name == name) return &e;
  return nullptr;
}

// The entry called `name`; throws dpb::Error "OPTION: unknown WHAT 'x' (valid: a, b, c)".
template <class Entry>
const Entry& lookup_entry(const std::vector<Entry>& table, const std::string& name,
                          const char* option, const char* what) {
  const Entry* e = find_entry(table, name);
  DPB_CHECK(e != nullptr, option << ": unknown " << what << " '" << name << "' (valid: "
                                 << entry_names(table) << ")");
  return *e;
}

// One line per entry for --help: "  name      help".
template <class Entry>
std::string entry_help(const std::vector<Entry>& table, int width = 11) {
  std::ostringstream o;
  for (const Entry& e : table) {
    std::string n = e.name;
    o << "  " << n << std::string(n.size() < size_t(width) ? width - n.size() : 1, ' ') << e.help
      << "\n";
  }
  return o.str();
}

}  // namespace dpb
