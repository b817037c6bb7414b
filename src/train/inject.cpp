// inject.cpp: --inject's specs (parse, check, canonical text), the delays a rank sleeps on purpose
// and the slow links as per-rank overrides of the emulated link. See inject.h; tested by
// tests/test_inject.cpp (./dpb_tests --gtest_filter='Inject*').
#include "src/train/inject.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "src/core/check.h"

namespace dpb {

const std::vector<std::string>& injectable_phases() {
  static const std::vector<std::string> phases = {"data", "forward", "backward", "optimizer"};
  return phases;
}

namespace {

constexpr double kMaxDelayMs = 600000;  // 10 minutes: beyond it a "slow rank" is a hung one
constexpr double kMinGbps = 1e-6;       // 1 kb/s: a gradient still crosses within a run

std::string trim(std::string_view s) {
  const size_t a = s.find_first_not_of(" \t");
  if (a == std::string_view::npos) return "";
  const size_t b = s.find_last_not_of(" \t");
  return std::string(s.substr(a, b - a + 1));
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t from = 0;
  for (;;) {
    const size_t at = s.find(sep, from);
    out.push_back(trim(s.substr(from, at == std::string_view::npos ? s.npos : at - from)));
    if (at == std::string_view::npos) return out;
    from = at + 1;
  }
}

// Shortest text that reads back as the same double (describe() round-trips through parse).
std::string num(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// One spec, `part` (for the messages): kind:key=value,... with each key once.
struct Fields {
  std::string part;
  std::vector<std::pair<std::string, std::string>> kv;

  const std::string* find(const std::string& key) const {
    for (const auto& [k, v] : kv)
      if (k == key) return &v;
    return nullptr;
  }
  const std::string& need(const std::string& key) const {
    const std::string* v = find(key);
    if (!v) throw Error("--inject: '" + part + "' lacks " + key + "=");
    return *v;
  }
  long long integer(const std::string& key, long long lo, long long hi) const {
    const std::string& t = need(key);
    char* end = nullptr;
    errno = 0;
    const long long x = std::strtoll(t.c_str(), &end, 10);
    if (t.empty() || errno != 0 || *end != '\0' || x < lo || x > hi)
      throw Error("--inject: '" + part + "': " + key + " must be an integer in [" +
                  std::to_string(lo) + ", " + std::to_string(hi) + "], got '" + t + "'");
    return x;
  }
  // A finite number; `ok` says whether x is in range, `range` how the message says it.
  double number(const std::string& key, bool (*ok)(double), const char* range) const {
    const std::string& t = need(key);
    char* end = nullptr;
    const double x = std::strtod(t.c_str(), &end);
    if (t.empty() || *end != '\0' || !std::isfinite(x) || !ok(x))
      throw Error("--inject: '" + part + "': " + key + " must be " + range + ", got '" + t + "'");
    return x;
  }
};

Fields fields_of(const std::string& part, const std::string& kind, std::string_view rest,
                 const std::vector<std::string>& keys) {
  Fields f{part, {}};
  for (const std::string& item : split(rest, ',')) {
    const size_t eq = item.find('=');
    if (item.empty() || eq == std::string::npos)
      throw Error("--inject: '" + part + "': expected key=value, got '" + item + "'");
    const std::string k = trim(std::string_view(item).substr(0, eq));
    const std::string v = trim(std::string_view(item).substr(eq + 1));
    if (std::find(keys.begin(), keys.end(), k) == keys.end())
      throw Error("--inject: '" + part + "': unknown key '" + k + "' for " + kind + " (valid: " +
                  joined(keys) + ")");
    if (f.find(k)) throw Error("--inject: '" + part + "': " + k + " given twice");
    f.kv.emplace_back(k, v);
  }
  return f;
}

}  // namespace

std::string Injections::describe() const {
  std::string s;
  auto add = [&s](const std::string& part) { s += (s.empty() ? "" : ";") + part; };
  for (const DelayInjection& d : delays)
    add("delay:rank=" + std::to_string(d.rank) + ",phase=" + d.phase + ",ms=" + num(d.ms) +
        (d.every != 1 ? ",every=" + std::to_string(d.every) : ""));
  for (const LinkInjection& l : links)
    add("link:rank=" + std::to_string(l.rank) + ",gbps=" + num(l.gbps));
  return s;
}

void parse_injections(const std::string& spec, Injections& into) {
  Injections got = into;  // `into` changes only when every part is good
  for (const std::string& part : split(spec, ';')) {
    if (part.empty())
      throw Error("--inject: empty spec in '" + spec +
                  "' (expected delay:rank=R,phase=P,ms=D[,every=N] or link:rank=R,gbps=G, "
                  "several joined with ';')");
    const size_t colon = part.find(':');
    const std::string kind = trim(std::string_view(part).substr(0, colon));
    const std::string_view rest =
        colon == std::string::npos ? std::string_view() : std::string_view(part).substr(colon + 1);
    if (kind == "delay") {
      const Fields f = fields_of(part, kind, rest, {"rank", "phase", "ms", "every"});
      DelayInjection d;
      d.rank = int(f.integer("rank", 0, INT_MAX));
      d.phase = f.need("phase");
      const auto& phases = injectable_phases();
      if (std::find(phases.begin(), phases.end(), d.phase) == phases.end())
        throw Error("--inject: '" + part + "': unknown phase '" + d.phase + "' (valid: " +
                    joined(phases) + ")");
      d.ms = f.number("ms", [](double x) { return x > 0 && x <= kMaxDelayMs; },
                      "milliseconds in (0, 600000]");
      d.every = f.find("every") ? int(f.integer("every", 1, INT_MAX)) : 1;
      got.delays.push_back(d);
    } else if (kind == "link") {
      const Fields f = fields_of(part, kind, rest, {"rank", "gbps"});
      LinkInjection l;
      l.rank = int(f.integer("rank", 0, INT_MAX));
      l.gbps = f.number("gbps", [](double x) { return x >= kMinGbps; },
                        "a number of Gb/s >= 1e-6");
      got.links.push_back(l);
    } else {
      throw Error("--inject: unknown kind '" + kind + "' in '" + part +
                  "' (valid: delay:rank=R,phase=P,ms=D[,every=N], link:rank=R,gbps=G)");
    }
  }
  into = std::move(got);
}

void validate_injections(const Injections& inj, int devices) {
  auto check = [devices](int rank, const std::string& what) {
    if (rank < 0 || rank >= devices)
      throw Error("--inject: " + what + " names rank " + std::to_string(rank) + ", but the run has " +
                  std::to_string(devices) + " rank" + (devices == 1 ? "" : "s") + " (0 to " +
                  std::to_string(devices - 1) + ")");
  };
  for (const DelayInjection& d : inj.delays)
    check(d.rank, Injections{{d}, {}}.describe());
  for (const LinkInjection& l : inj.links)
    check(l.rank, Injections{{}, {l}}.describe());
}

void inject_delay(const Injections& inj, int rank, std::string_view phase, int step) {
  double ms = 0;
  for (const DelayInjection& d : inj.delays)
    if (d.rank == rank && d.phase == phase && step % d.every == 0) ms += d.ms;
  // A sleep, not a spin: a slow rank (a busy host, a throttled device) leaves the cores to others.
  if (ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
}

LinkSpec injected_link(const LinkSpec& base, const Injections& inj) {
  LinkSpec l = base;
  for (const LinkInjection& li : inj.links) l.rank_gbps.emplace_back(li.rank, li.gbps);
  return l;
}

}  // namespace dpb
