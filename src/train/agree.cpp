// agree.cpp: the ranks' agreement on their configuration (see agree.h).
#include "src/train/agree.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "src/core/build_facts.h"
#include "src/core/check.h"
#include "src/train/run_options.h"

namespace dpb {

uint64_t fnv1a(const void* data, size_t bytes, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {

std::string hex(uint64_t h) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// "name\0value\0" per field: the text the ranks hash and, on a mismatch, exchange. Arguments and
// environment values cannot hold a NUL byte.
std::string serialize(const AgreeFields& fields) {
  std::string s;
  for (const auto& [name, value] : fields) {
    s += name;
    s += '\0';
    s += value;
    s += '\0';
  }
  return s;
}

AgreeFields deserialize(const std::string& s) {
  AgreeFields out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t a = s.find('\0', at);
    if (a == std::string::npos) break;
    const size_t b = s.find('\0', a + 1);
    if (b == std::string::npos) break;
    out.emplace_back(s.substr(at, a - at), s.substr(a + 1, b - a - 1));
    at = b + 1;
  }
  return out;
}

const std::string* find_value(const AgreeFields& fields, const std::string& name) {
  for (const auto& [n, v] : fields)
    if (n == name) return &v;
  return nullptr;
}

// A value as the message shows it: '' when empty, shortened when long.
std::string shown(const std::string* v) {
  if (!v) return "(absent)";
  if (v->empty()) return "''";
  constexpr size_t kMax = 160;
  return v->size() <= kMax ? *v : v->substr(0, kMax) + "...";
}

// "0", "1-3", "0,2,5-7": ranks in increasing order.
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ',';
    s += std::to_string(ranks[i]);
    if (j > i) {
      s += '-';
      s += std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return s;
}

}  // namespace

std::string disagreement(const std::vector<AgreeFields>& all) {
  // Every field name any rank has: rank 0's order, then the others' new ones.
  std::vector<std::string> names;
  for (const AgreeFields& f : all)
    for (const auto& [n, v] : f)
      if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  std::string first;
  std::vector<std::string> more;
  for (const std::string& n : names) {
    // Ranks grouped by value, the groups in order of their first rank.
    std::vector<std::string> values;
    std::vector<std::vector<int>> ranks;
    for (size_t r = 0; r < all.size(); ++r) {
      const std::string v = shown(find_value(all[r], n));
      const auto it = std::find(values.begin(), values.end(), v);
      if (it == values.end()) {
        values.push_back(v);
        ranks.push_back({int(r)});
      } else {
        ranks[size_t(it - values.begin())].push_back(int(r));
      }
    }
    if (values.size() < 2) continue;
    if (!first.empty()) {
      more.push_back(n);
      continue;
    }
    first = "ranks disagree on " + n + ":";
    for (size_t g = 0; g < values.size(); ++g)
      first += std::string(g ? ", " : " ") + (ranks[g].size() > 1 ? "ranks " : "rank ") +
               rank_list(ranks[g]) + " " + values[g];
  }
  if (first.empty()) return "";
  if (!more.empty()) {
    first += " (also on";
    for (size_t i = 0; i < more.size(); ++i) first += (i ? ", " : " ") + more[i];
    first += ")";
  }
  return first + ". Every rank must be started with the same arguments, environment, data and "
                 "binary";
}

void check_ranks_agree(CommGroup& group, int rank, const AgreeFields& fields) {
  const int k = group.size();
  if (k < 2) return;
  const std::string mine = serialize(fields);
  // Round 1: a hash of the whole list. Equal everywhere: the ranks agree.
  const uint64_t h = fnv1a(mine.data(), mine.size());
  std::vector<uint64_t> hashes(size_t(k), 0);
  group.allgather_host(rank, &h, hashes.data(), sizeof h);
  if (std::all_of(hashes.begin(), hashes.end(), [&](uint64_t x) { return x == hashes[0]; })) return;
  // Rounds 2 and 3 (fixed sizes: the transports' all-gather takes the same bytes from each rank):
  // the lengths, then every rank's text padded to the longest, so every rank names the field.
  const uint64_t len = mine.size();
  std::vector<uint64_t> lens(size_t(k), 0);
  group.allgather_host(rank, &len, lens.data(), sizeof len);
  const size_t most = size_t(*std::max_element(lens.begin(), lens.end()));
  std::string padded = mine;
  padded.resize(most, '\0');
  std::vector<char> texts(most * size_t(k), '\0');
  if (most > 0) group.allgather_host(rank, padded.data(), texts.data(), most);
  std::vector<AgreeFields> all;
  for (int r = 0; r < k; ++r)
    all.push_back(deserialize(std::string(texts.data() + size_t(r) * most, size_t(lens[size_t(r)]))));
  const std::string why = disagreement(all);
  throw Error(why.empty() ? "ranks disagree on their configuration (hashes differ)" : why);
}

AgreeFields run_option_fields(const TrainConfig& cfg, bool micro) {
  AgreeFields out;
  for (const RunOption& o : run_options()) {
    if (!o.get) continue;  // no TrainConfig field (the data's options: data_fields)
    if (micro && (o.micro.empty() || o.list)) continue;  // dpbench-micro keeps its lists itself
    out.emplace_back(micro ? "--dpb_" + o.micro : "--" + o.name, o.get(cfg));
  }
  return out;
}

AgreeFields env_fields() {
  AgreeFields out;
  for (const RunEnvVar& v : run_env_vars()) {
    if (!v.agree) continue;
    const char* e = std::getenv(v.name.c_str());
    out.emplace_back(v.name, e && *e ? e : "(unset)");  // set but empty: the default, as unset
  }
  return out;
}

AgreeFields data_fields(const Dataset& data) {
  AgreeFields out;
  uint64_t h = 0xcbf29ce484222325ull;
  for (const Split* s : {&data.train, &data.test}) {
    const std::string which = s == &data.train ? "training" : "test";
    out.emplace_back(which + " examples", std::to_string(s->n) + " of " + std::to_string(s->rows) +
                                              "x" + std::to_string(s->cols));
    const size_t f = size_t(s->features());
    auto add = [&](int i) {
      h = fnv1a(s->example(i), f, h);
      if (size_t(i) < s->labels.size()) h = fnv1a(&s->labels[size_t(i)], 1, h);
    };
    for (int i = 0; i < s->n; i += 64) add(i);
    if (s->n > 0) add(s->n - 1);
  }
  out.emplace_back("data digest", hex(h) + " (every 64th example's pixels and label)");
  return out;
}

AgreeFields build_fields() {
  static const std::string binary = [] {
    std::ifstream f("/proc/self/exe", std::ios::binary);
    if (!f) return std::string("(unreadable /proc/self/exe)");
    uint64_t h = 0xcbf29ce484222325ull, n = 0;
    std::vector<char> buf(size_t(1) << 20);
    while (f) {
      f.read(buf.data(), std::streamsize(buf.size()));
      const size_t got = size_t(f.gcount());
      h = fnv1a(buf.data(), got, h);
      n += got;
    }
    return hex(h) + " (" + std::to_string(n) + " bytes of /proc/self/exe)";
  }();
  return {{"build", "dpbench " DPB_VERSION ", " DPB_BUILD_TYPE ", " DPB_COMPILER},
          {"binary", binary}};
}

AgreeFields train_agree_fields(const TrainConfig& cfg, const Dataset& data) {
  AgreeFields out = run_option_fields(cfg);
  for (AgreeFields more : {env_fields(), data_fields(data), build_fields()})
    out.insert(out.end(), more.begin(), more.end());
  return out;
}

}  // namespace dpb
