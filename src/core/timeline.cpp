// timeline.cpp: a rank's spans on its host thread and streams (see timeline.h).
#include "src/core/timeline.h"

#include <algorithm>
#include <cstring>

#include "src/core/check.h"

namespace dpb {

const char* to_string(Track t) {
  switch (t) {
    case Track::Host: return "host";
    case Track::Compute: return "compute";
    case Track::Comm: return "comm";
  }
  return "?";
}

namespace {
template <size_t N>
void copy_name(char (&dst)[N], std::string_view s) {
  const size_t n = std::min(s.size(), N - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}
}  // namespace

void Span::set_name(std::string_view s) { copy_name(name, s); }
void Span::set_algorithm(std::string_view s) { copy_name(algorithm, s); }

RankTimeline::RankTimeline(Device& dev, int rank, bool host_spans)
    : rank_(rank), host_spans_(host_spans), compute_(dev.make_stamps(StreamKind::Compute)),
      comm_(dev.make_stamps(StreamKind::Comm)) {}

RankTimeline::Open RankTimeline::begin_phase(const char* name) {
  Open o;
  o.name = name;
  o.epoch = epoch_;
  o.step = step_;
  if (host_spans_) o.h0 = steady_seconds();
  o.s0 = compute_->stamp();
  return o;
}

void RankTimeline::end_phase(const Open& o) {
  const size_t s1 = compute_->stamp();
  Span sp;
  sp.set_name(o.name);
  sp.rank = rank_;
  sp.epoch = o.epoch;
  sp.step = o.step;
  sp.track = Track::Compute;
  compute_spans_.push_back({sp, o.s0, s1});
  if (host_spans_) {
    sp.track = Track::Host;
    sp.t0 = o.h0;
    sp.t1 = steady_seconds();
    host_spans_list_.push_back({sp, 0, 0});
  }
}

RankTimeline::OpenComm RankTimeline::begin_comm(int epoch, int step) {
  OpenComm o;
  o.epoch = epoch;
  o.step = step;
  o.s0 = comm_->stamp();
  return o;
}

void RankTimeline::end_comm(const OpenComm& o, const CommJobInfo& info) {
  const size_t s1 = comm_->stamp();
  Span sp;
  sp.set_name(info.name);
  sp.set_algorithm(info.algorithm);
  sp.rank = rank_;
  sp.track = Track::Comm;
  sp.epoch = o.epoch;
  sp.step = o.step;
  sp.bucket = info.bucket;
  sp.bytes = info.bytes;
  std::lock_guard<std::mutex> lk(comm_mu_);
  comm_spans_.push_back({sp, o.s0, s1});
}

std::vector<Span> RankTimeline::take() {
  std::vector<Span> out;
  auto resolve = [&](std::vector<Pending>& list, StreamStamps& st) {
    const std::vector<double> t = st.take();
    for (Pending& p : list) {
      DPB_CHECK(p.s1 < t.size(), "rank " << rank_ << ": timeline stamp " << p.s1 << " of "
                                         << t.size() << " on the " << to_string(p.span.track)
                                         << " track");
      p.span.t0 = t[p.s0] + offset_;
      p.span.t1 = std::max(t[p.s1], t[p.s0]) + offset_;
      out.push_back(p.span);
    }
    list.clear();
  };
  resolve(compute_spans_, *compute_);
  for (Pending& p : host_spans_list_) {
    p.span.t0 += offset_;
    p.span.t1 += offset_;
    out.push_back(p.span);
  }
  host_spans_list_.clear();
  std::lock_guard<std::mutex> lk(comm_mu_);
  resolve(comm_spans_, *comm_);
  return out;
}

}  // namespace dpb
