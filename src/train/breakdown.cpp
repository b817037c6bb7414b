// breakdown.cpp: per-rank, per-step phases from the timelines, waiting for peers, the straggler
// report (see breakdown.h).
#include "src/train/breakdown.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "src/core/check.h"
#include "src/core/files.h"

namespace dpb {

const std::vector<BreakdownPhase>& breakdown_phases() {
  static const std::vector<BreakdownPhase> p = {
      {"data", &StepRow::data, "loading the batch onto the device (compute stream)"},
      {"forward", &StepRow::forward, "forward and loss, less nested comm waits"},
      {"backward", &StepRow::backward, "backward, less nested comm waits"},
      {"optimizer", &StepRow::optimizer, "the optimizer step, less nested comm waits"},
      {"exposed_comm", &StepRow::exposed_comm, "compute waiting on comm"},
      {"comm_busy", &StepRow::comm_busy, "comm stream time in the step's collectives"},
      {"wait", &StepRow::wait, "in collectives before the last peer arrived"},
      {"comm_own", &StepRow::comm_own,
       "own communication: emulated links' busy time, else comm_busy - wait"},
  };
  return p;
}

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t m = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + m, v.end());
  const double hi = v[m];
  if (v.size() % 2) return hi;
  return (*std::max_element(v.begin(), v.begin() + m) + hi) / 2;
}

double percentile(std::vector<double> v, double q) {  // linear interpolation (numpy's default)
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t i = size_t(pos);
  if (i + 1 >= v.size()) return v.back();
  return v[i] + (pos - double(i)) * (v[i + 1] - v[i]);
}

bool named(const Span& s, const char* n) { return std::strcmp(s.name, n) == 0; }

}  // namespace

RankSteps rank_steps(const std::vector<Span>& spans, int rank, int epoch, int steps,
                     const std::vector<double>& link_send) {
  DPB_CHECK(link_send.empty() || link_send.size() == size_t(steps) + 1,
            "rank_steps: " << link_send.size() << " link readings for " << steps << " steps");
  RankSteps out;
  out.rows.resize(size_t(steps));
  std::vector<double> first(size_t(steps), INFINITY), last(size_t(steps), -INFINITY);
  std::vector<std::vector<const Span*>> compute(static_cast<size_t>(steps));
  for (int s = 0; s < steps; ++s) {
    StepRow& r = out.rows[size_t(s)];
    r.rank = rank, r.epoch = epoch, r.step = s;
    r.comm_own = link_send.empty() ? -1 : link_send[size_t(s) + 1] - link_send[size_t(s)];
  }
  for (const Span& sp : spans) {
    const bool in_step = sp.epoch == epoch && sp.step >= 0 && sp.step < steps;
    if (sp.track == Track::Comm) {
      out.arrivals.push_back(sp.t0);
      out.arrival_step.push_back(in_step ? sp.step : -1);
      if (in_step) out.rows[size_t(sp.step)].comm_busy += sp.t1 - sp.t0;
      continue;
    }
    if (sp.track != Track::Compute || !in_step) continue;
    compute[size_t(sp.step)].push_back(&sp);
    first[size_t(sp.step)] = std::min(first[size_t(sp.step)], sp.t0);
    last[size_t(sp.step)] = std::max(last[size_t(sp.step)], sp.t1);
  }
  for (int s = 0; s < steps; ++s) {
    StepRow& r = out.rows[size_t(s)];
    if (compute[size_t(s)].empty()) continue;
    r.start = first[size_t(s)];
    r.step_s = last[size_t(s)] - first[size_t(s)];
    auto container = [&](const Span& in) -> const Span* {  // the phase a comm wait is nested in
      for (const Span* o : compute[size_t(s)])
        if (o != &in && !named(*o, "comm wait") && o->t0 <= in.t0 && in.t1 <= o->t1) return o;
      return nullptr;
    };
    auto field = [](const Span& sp) -> double StepRow::* {
      if (named(sp, "data")) return &StepRow::data;
      if (named(sp, "forward")) return &StepRow::forward;
      if (named(sp, "backward")) return &StepRow::backward;
      if (named(sp, "optimizer step")) return &StepRow::optimizer;
      if (named(sp, "gradient sync wait")) return &StepRow::exposed_comm;
      return nullptr;
    };
    for (const Span* sp : compute[size_t(s)]) {
      const double d = sp->t1 - sp->t0;
      if (named(*sp, "comm wait")) {
        const Span* o = container(*sp);
        if (o && named(*o, "gradient sync wait")) continue;  // counted as the whole wait
        r.exposed_comm += d;
        if (o && field(*o)) r.*field(*o) -= d;
      } else if (auto f = field(*sp)) {
        r.*f += d;
      }
    }
    for (double StepRow::*f : {&StepRow::data, &StepRow::forward, &StepRow::backward,
                               &StepRow::optimizer})
      r.*f = std::max(0.0, r.*f);
  }
  return out;
}

std::vector<StepRow> gather_steps(CommGroup& group, int rank, RankSteps mine, bool* waits_known) {
  const int k = group.size();
  const size_t n = mine.rows.size();
  // Every rank runs the same steps; a count that differs is a bug, not a user's error.
  const uint64_t counts[2] = {n, mine.arrivals.size()};
  std::vector<uint64_t> all_counts(size_t(2) * k);
  group.allgather_host(rank, counts, all_counts.data(), sizeof counts);
  for (int p = 0; p < k; ++p)
    DPB_CHECK(all_counts[2 * p] == n, "breakdown: rank " << p << " has " << all_counts[2 * p]
                                                         << " steps, rank " << rank << " " << n);
  std::vector<StepRow> rows(n * size_t(k));
  group.allgather_host(rank, mine.rows.data(), rows.data(), n * sizeof(StepRow));
  bool match = true;
  for (int p = 0; p < k; ++p) match = match && all_counts[2 * p + 1] == mine.arrivals.size();
  if (match && !mine.arrivals.empty()) {
    const size_t J = mine.arrivals.size();
    std::vector<double> arr(J * size_t(k));
    group.allgather_host(rank, mine.arrivals.data(), arr.data(), J * sizeof(double));
    for (size_t j = 0; j < J; ++j) {
      const int s = mine.arrival_step[j];
      if (s < 0) continue;
      double latest = -INFINITY;
      for (int p = 0; p < k; ++p) latest = std::max(latest, arr[size_t(p) * J + j]);
      for (int p = 0; p < k; ++p) rows[size_t(p) * n + size_t(s)].wait += latest - arr[size_t(p) * J + j];
    }
  }
  for (StepRow& r : rows)
    if (r.comm_own < 0) r.comm_own = std::max(0.0, r.comm_busy - r.wait);
  std::stable_sort(rows.begin(), rows.end(), [](const StepRow& a, const StepRow& b) {
    return a.step != b.step ? a.step < b.step : a.rank < b.rank;
  });
  if (waits_known) *waits_known = match;
  return rows;
}

std::vector<Span> gather_spans(CommGroup& group, int rank, const std::vector<Span>& mine) {
  const int k = group.size();
  const uint64_t n = mine.size();
  std::vector<uint64_t> counts(static_cast<size_t>(k));
  group.allgather_host(rank, &n, counts.data(), sizeof n);
  const uint64_t most = *std::max_element(counts.begin(), counts.end());
  std::vector<Span> padded(mine);
  padded.resize(size_t(most));
  std::vector<Span> all(size_t(most) * size_t(k));
  if (most > 0) group.allgather_host(rank, padded.data(), all.data(), size_t(most) * sizeof(Span));
  std::vector<Span> out;
  for (int p = 0; p < k; ++p)
    out.insert(out.end(), all.begin() + ptrdiff_t(size_t(p) * most),
               all.begin() + ptrdiff_t(size_t(p) * most + counts[size_t(p)]));
  return out;
}

double clock_offset_to_rank0(CommGroup& group, int rank) {
  const int k = group.size();
  std::vector<double> a(static_cast<size_t>(k)), b(static_cast<size_t>(k));
  double best = INFINITY, offset = 0;
  for (int round = 0; round < 8; ++round) {
    const double ta = steady_seconds();
    group.allgather_host(rank, &ta, a.data(), sizeof ta);
    const double tb = steady_seconds();
    group.allgather_host(rank, &tb, b.data(), sizeof tb);
    // Rank 0 entered (a[0]) before this rank left (tb), and left (b[0]) after this rank entered.
    const double lo = a[0] - tb, hi = b[0] - ta;
    if (hi - lo < best) best = hi - lo, offset = (lo + hi) / 2;
  }
  return rank == 0 ? 0.0 : offset;
}

// A straggler's excess is over the threshold in at least this share of the steps: noise on a
// shared CPU puts a rank's median over it by chance in about half (measured: 3-6 of 10 quiet LeNet
// runs at k = 3 named one with the median alone; none with this rule; an injected delay or slow
// link is over it in every step).
constexpr double kStragglerSteps = 0.75;

Straggler find_straggler(const std::vector<StepRow>& rows) {
  Straggler st;
  std::map<std::pair<int, int>, std::vector<const StepRow*>> by_step;
  int k = 0;
  for (const StepRow& r : rows) {
    by_step[{r.epoch, r.step}].push_back(&r);
    k = std::max(k, r.rank + 1);
  }
  struct Ph {
    const char* name;
    double StepRow::*f;
  };
  const Ph phases[] = {{"data", &StepRow::data}, {"forward", &StepRow::forward},
                       {"backward", &StepRow::backward}, {"optimizer", &StepRow::optimizer},
                       {"comm", &StepRow::comm_own}};
  const int P = int(std::size(phases));
  std::vector<std::vector<double>> excess(static_cast<size_t>(k) * P), waits(static_cast<size_t>(k));
  std::vector<double> step_max;
  for (auto& [key, rs] : by_step) {
    if (int(rs.size()) != k) continue;  // a step missing a rank: not comparable
    double smax = 0;
    for (const StepRow* r : rs) smax = std::max(smax, r->step_s);
    step_max.push_back(smax);
    for (int p = 0; p < P; ++p) {
      double sum = 0;
      for (const StepRow* r : rs) sum += r->*phases[p].f;
      for (const StepRow* r : rs) {
        const double others = k > 1 ? (sum - r->*phases[p].f) / (k - 1) : r->*phases[p].f;
        excess[size_t(r->rank) * P + p].push_back(r->*phases[p].f - others);
      }
    }
    for (const StepRow* r : rs) waits[size_t(r->rank)].push_back(r->wait);
  }
  st.step_s = median(step_max);
  st.threshold_s = 0.10 * st.step_s;
  if (k < 2 || step_max.empty()) return st;
  // The candidate: the largest median excess; a straggler: the largest median excess of a
  // (rank, phase) over the threshold in at least kStragglerSteps of the steps.
  double best = -INFINITY, named = -INFINITY;
  int br = 0, bp = 0, nr = -1, np = 0;
  for (int r = 0; r < k; ++r)
    for (int p = 0; p < P; ++p) {
      const std::vector<double>& ex = excess[size_t(r) * P + p];
      const double e = median(ex);
      if (e > best) best = e, br = r, bp = p;
      const double over = double(std::count_if(ex.begin(), ex.end(), [&](double x) {
                            return x > st.threshold_s;
                          })) / double(ex.size());
      if (e > st.threshold_s && over >= kStragglerSteps && e > named) named = e, nr = r, np = p;
    }
  st.candidate_rank = br;
  st.candidate_phase = phases[bp].name;
  st.candidate_s = best;
  if (nr >= 0) br = nr, bp = np, best = named;
  double others = 0;
  for (int r = 0; r < k; ++r)
    if (r != br) others += median(waits[size_t(r)]);
  if (nr >= 0) {
    st.rank = br;
    st.phase = phases[bp].name;
    st.loss_s = best;
    st.others_wait_s = others / (k - 1);
    st.own_wait_s = median(waits[size_t(br)]);
  }
  return st;
}

std::string Straggler::describe() const {
  char buf[512];
  if (rank >= 0) {
    std::snprintf(buf, sizeof buf,
                  "straggler: rank %d loses %.2f ms per step in %s (median excess over the other "
                  "ranks' mean); the others wait %.2f ms per step for their peers (rank %d: %.2f ms)."
                  "\n  threshold: 10%% of the median step (%.2f ms of %.2f ms), in 3/4 of the steps",
                  rank, loss_s * 1e3, phase.c_str(), others_wait_s * 1e3, rank, own_wait_s * 1e3,
                  threshold_s * 1e3, step_s * 1e3);
  } else if (candidate_rank >= 0) {
    std::snprintf(buf, sizeof buf,
                  "no straggler: no rank spends more than 10%% of the median step (%.2f ms of "
                  "%.2f ms) longer than the others in one phase in 3/4 of the steps (largest "
                  "median: rank %d %s, %+.2f ms)",
                  threshold_s * 1e3, step_s * 1e3, candidate_rank, candidate_phase.c_str(),
                  candidate_s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "no straggler: one rank");
  }
  return buf;
}

BreakdownStats summarize_steps(const std::vector<StepRow>& rows) {
  BreakdownStats b;
  const auto& phases = breakdown_phases();
  std::map<int, std::vector<double>> totals;  // rank -> per phase total
  std::map<std::pair<int, int>, double> step_max;
  for (const StepRow& r : rows) {
    auto& t = totals[r.rank];
    t.resize(phases.size());
    for (size_t p = 0; p < phases.size(); ++p) t[p] += r.*phases[p].field;
    double& m = step_max[{r.epoch, r.step}];
    m = std::max(m, r.step_s);
  }
  b.ranks = int(totals.size());
  b.steps = int(step_max.size());
  b.phases.resize(phases.size());
  for (size_t p = 0; p < phases.size(); ++p) {
    PhaseSpread& s = b.phases[p];
    bool first = true;
    for (auto& [rank, t] : totals) {
      s.min = first ? t[p] : std::min(s.min, t[p]);
      s.max = first ? t[p] : std::max(s.max, t[p]);
      s.avg += t[p] / double(totals.size());
      first = false;
    }
  }
  std::vector<double> steps;
  for (auto& [key, m] : step_max) steps.push_back(m);
  b.step_p50 = percentile(steps, 0.50);
  b.step_p95 = percentile(steps, 0.95);
  b.step_p99 = percentile(steps, 0.99);
  b.straggler = find_straggler(rows);
  return b;
}

std::string format_breakdown(const std::vector<StepRow>& rows) {
  std::map<int, std::vector<const StepRow*>> by_rank;
  for (const StepRow& r : rows) by_rank[r.rank].push_back(&r);
  std::ostringstream os;
  size_t n = by_rank.empty() ? 0 : by_rank.begin()->second.size();
  os << "per-rank breakdown (ms per step, medians over " << n << " steps):\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%5s %8s %8s %9s %9s %9s %9s %8s %9s %8s\n", "rank", "data",
                "forward", "backward", "optimizer", "exposed", "comm busy", "wait", "comm own",
                "step");
  os << buf;
  for (auto& [rank, rs] : by_rank) {
    auto med = [&](double StepRow::*f) {
      std::vector<double> v;
      for (const StepRow* r : rs) v.push_back(r->*f * 1e3);
      return median(v);
    };
    std::snprintf(buf, sizeof buf, "%5d %8.2f %8.2f %9.2f %9.2f %9.2f %9.2f %8.2f %9.2f %8.2f\n",
                  rank, med(&StepRow::data), med(&StepRow::forward), med(&StepRow::backward),
                  med(&StepRow::optimizer), med(&StepRow::exposed_comm), med(&StepRow::comm_busy),
                  med(&StepRow::wait), med(&StepRow::comm_own), med(&StepRow::step_s));
    os << buf;
  }
  os << find_straggler(rows).describe() << "\n";
  return os.str();
}

void write_steps_csv(const std::string& path, const std::vector<StepRow>& rows) {
  std::ostringstream os;
  os << "rank,epoch,step,start_s,step_s";
  for (const BreakdownPhase& p : breakdown_phases()) os << "," << p.name << "_s";
  os << "\n";
  const double t0 = rows.empty() ? 0 : std::min_element(rows.begin(), rows.end(),
                                                        [](const StepRow& a, const StepRow& b) {
                                                          return a.start < b.start;
                                                        })->start;
  char buf[64];
  auto num = [&](double v) {
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return std::string(buf);
  };
  for (const StepRow& r : rows) {
    os << r.rank << "," << r.epoch << "," << r.step << "," << num(r.start - t0) << ","
       << num(r.step_s);
    for (const BreakdownPhase& p : breakdown_phases()) os << "," << num(r.*p.field);
    os << "\n";
  }
  write_file_atomic(path, os.str());
}

}  // namespace dpb
