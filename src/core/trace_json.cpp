// trace_json.cpp: spans as a Chrome trace event file (see trace_json.h). The events are formatted
// by hand into a 1 MiB buffer that is flushed to the file as it fills: nlohmann::json is used for
// the few strings that need escaping, never for the whole document (10^6 spans as one json object
// would take seconds and gigabytes).
#include "src/core/trace_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "src/core/files.h"

namespace dpb {
namespace {

constexpr size_t kFlushBytes = size_t(1) << 20;
constexpr int kTracks = 3;

int pid_of(int rank) { return rank + 1; }
int tid_of(int rank, Track t) { return 10 * (rank + 1) + int(t) + 1; }

// Appends events to a buffer that goes to `put` whenever it passes kFlushBytes.
class Out {
 public:
  explicit Out(const FilePieceSink& put) : put_(put) { buf_.reserve(kFlushBytes + 4096); }
  ~Out() = default;
  void raw(std::string_view s) { buf_.append(s); }
  void ch(char c) { buf_.push_back(c); }
  // A JSON string: printable ASCII without quotes or backslashes as it is (every name dpbench
  // makes), anything else through nlohmann (escapes; invalid UTF-8, e.g. a name truncated inside
  // a character, becomes U+FFFD).
  void str(std::string_view s) {
    const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
      return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
    });
    if (plain) {
      ch('"'), raw(s), ch('"');
      return;
    }
    raw(nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  template <class I>
  void integer(I v) {
    char b[24];
    const auto r = std::to_chars(b, b + sizeof b, v);
    buf_.append(b, r.ptr);
  }
  void micros(double us) {  // microseconds to the nanosecond; no exponents, no "-0.000"
    if (!std::isfinite(us) || std::fabs(us) < 5e-4) us = 0;
    char b[48];
    const auto r = std::to_chars(b, b + sizeof b, us, std::chars_format::fixed, 3);
    buf_.append(b, r.ptr);
  }
  void end_event() {  // after each event: flush a full buffer
    if (buf_.size() >= kFlushBytes) flush();
  }
  void flush() {
    put_(buf_);
    buf_.clear();
  }

 private:
  const FilePieceSink& put_;
  std::string buf_;
};

void metadata(Out& o, bool& first, const char* what, int pid, int tid, const char* key,
              const std::function<void()>& value) {
  o.raw(first ? "\n" : ",\n");
  first = false;
  o.raw("{\"ph\":\"M\",\"name\":\"");
  o.raw(what);
  o.raw("\",\"pid\":");
  o.integer(pid);
  o.raw(",\"tid\":");
  o.integer(tid);
  o.raw(",\"args\":{\"");
  o.raw(key);
  o.raw("\":");
  value();
  o.raw("}}");
}

}  // namespace

std::string trace_thread_name(Track t) {
  return t == Track::Host ? "host" : std::string(to_string(t)) + " stream";
}

void write_chrome_trace(const std::string& path, const std::vector<Span>& spans,
                        const TraceInfo& info) {
  // Per rank and track in time order, the longer span first at equal starts (so that viewers
  // nest it outside the shorter).
  std::vector<uint32_t> order(spans.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const Span &x = spans[a], &y = spans[b];
    if (x.rank != y.rank) return x.rank < y.rank;
    if (x.track != y.track) return x.track < y.track;
    if (x.t0 != y.t0) return x.t0 < y.t0;
    return x.t1 - x.t0 > y.t1 - y.t0;
  });
  double origin = 0;
  bool any = false;
  for (const Span& s : spans)
    if (std::isfinite(s.t0)) origin = any ? std::min(origin, s.t0) : s.t0, any = true;

  // Ranks: those named and those with spans; tracks: those with spans.
  std::set<int> ranks;
  for (size_t r = 0; r < info.process_names.size(); ++r) ranks.insert(int(r));
  std::set<std::pair<int, int>> tracks;
  for (const Span& s : spans) ranks.insert(s.rank), tracks.insert({s.rank, int(s.track)});

  write_file_atomic(path, [&](const FilePieceSink& put) {
    Out o(put);
    o.raw("{\"displayTimeUnit\":\"ms\",\"otherData\":{");
    for (const auto& [key, value] : info.other) {
      o.str(key), o.ch(':'), o.str(value), o.ch(',');
    }
    o.raw("\"time_origin_s\":");
    char b[48];
    const auto r = std::to_chars(b, b + sizeof b, origin, std::chars_format::fixed, 9);
    o.raw(std::string_view(b, size_t(r.ptr - b)));
    o.raw("},\"traceEvents\":[");
    bool first = true;
    for (int rank : ranks) {
      const std::string name = size_t(rank) < info.process_names.size() &&
                                       !info.process_names[size_t(rank)].empty()
                                   ? info.process_names[size_t(rank)]
                                   : "rank " + std::to_string(rank);
      const int pid = pid_of(rank);
      const int tid0 = tid_of(rank, Track::Host);  // process events: the rank's first thread
      metadata(o, first, "process_name", pid, tid0, "name", [&] { o.str(name); });
      metadata(o, first, "process_sort_index", pid, tid0, "sort_index", [&] { o.integer(rank); });
      for (int t = 0; t < kTracks; ++t) {
        if (!tracks.count({rank, t})) continue;
        const Track track = Track(t);
        metadata(o, first, "thread_name", pid, tid_of(rank, track), "name",
                 [&] { o.str(trace_thread_name(track)); });
        metadata(o, first, "thread_sort_index", pid, tid_of(rank, track), "sort_index",
                 [&] { o.integer(t); });
      }
    }
    for (uint32_t i : order) {
      const Span& s = spans[i];
      o.raw(first ? "\n" : ",\n");
      first = false;
      o.raw("{\"ph\":\"X\",\"name\":");
      o.str(std::string_view(s.name, strnlen(s.name, sizeof s.name)));
      o.raw(",\"cat\":\"");
      o.raw(to_string(s.track));
      o.raw("\",\"pid\":");
      o.integer(pid_of(s.rank));
      o.raw(",\"tid\":");
      o.integer(tid_of(s.rank, s.track));
      o.raw(",\"ts\":");
      o.micros((s.t0 - origin) * 1e6);
      o.raw(",\"dur\":");
      o.micros(std::max(0.0, s.t1 - s.t0) * 1e6);
      o.raw(",\"args\":{\"epoch\":");
      o.integer(s.epoch);
      o.raw(",\"step\":");
      o.integer(s.step);
      if (s.track == Track::Comm) {
        o.raw(",\"algorithm\":");
        o.str(std::string_view(s.algorithm, strnlen(s.algorithm, sizeof s.algorithm)));
        o.raw(",\"bytes\":");
        o.integer(s.bytes);
        o.raw(",\"bucket\":");
        o.integer(s.bucket);
      }
      o.raw("}}");
      o.end_event();
    }
    o.raw("\n]}\n");
    o.flush();
  });
}

}  // namespace dpb
