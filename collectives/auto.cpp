// auto.cpp: `--allreduce auto`: per call, the algorithm the tuning table (collectives/tuning.h)
// names for the message size, as NCCL picks between its algorithms. Every rank makes the same
// choice (n is collective), so the ranks always run the same algorithm. The chosen algorithms are
// made once, when auto is made; describe() states the rules and which table they came from. On
// emulated nodes over a paced link, hier where its cost model says it is faster (tuning.h).
// Built by make_allreduce("auto", group, {tune_file}); tested by tests/test_allreduce.cpp.
#include <map>
#include <memory>

#include "collectives/comm_volume.h"
#include "collectives/registry.h"
#include "collectives/tuning.h"
#include "src/core/check.h"

namespace dpb {
namespace {

class AutoAllReduce final : public AllReduce {
 public:
  AutoAllReduce(CommGroup& group, const AllReduceOptions& opts) {
    const TuneFile file = load_tune_file(opts.tune_file);
    std::string why;
    // Two levels: hier weighed on the group's emulated link (tuning.h, resolve_tuning_nodes).
    const LinkSpec* paced = paced_link(group.transport());
    LinkSpec link = paced ? *paced : LinkSpec{};
    link.nodes = group.nodes();
    rules_ = resolve_tuning_nodes(file, group.kind(), group.size(), link, group.launcher(), &why);
    describe_ = "auto: " + describe_rules(rules_) + " (" + why + ")";
    for (const TuneRule& r : rules_) {
      if (algs_.count(r.algorithm)) continue;
      const AllReduceEntry& e = find_allreduce(r.algorithm);
      const std::string no = allreduce_refusal(e, group.size(), group.kind(), group.launcher());
      DPB_CHECK(no.empty(), "--allreduce auto (" << why << "): " << no);
      algs_[r.algorithm] = e.make(group, opts);
    }
  }
  std::string name() const override { return "auto"; }
  std::string describe() const override { return describe_; }
  std::string choice(size_t n) const override { return rule(n).algorithm; }
  void run(int rank, float* buf, size_t n) override {
    algs_.at(rule(n).algorithm)->run(rank, buf, n);
  }
  void abort(int rank, const std::string& why) override {
    for (auto& [name, a] : algs_) a->abort(rank, why);
  }

 private:
  const TuneRule& rule(size_t n) const {
    const size_t bytes = n * sizeof(float);
    for (const TuneRule& r : rules_)
      if (r.unbounded || bytes <= r.up_to_bytes) return r;
    return rules_.back();  // not reached: the last rule is unbounded
  }

  std::vector<TuneRule> rules_;
  std::string describe_;
  std::map<std::string, std::unique_ptr<AllReduce>> algs_;
};

}  // namespace

std::unique_ptr<AllReduce> make_auto_allreduce(CommGroup& group, const AllReduceOptions& opts) {
  return std::make_unique<AutoAllReduce>(group, opts);
}

// Its cost on an emulated link (its registry entry carries it): the cost of the algorithm its
// tuning table (q.tune_file, "": the built-in one) picks for this size, k and backend.
double auto_link_cost(const LinkCostQuery& q) {
  std::string why;
  for (const TuneRule& r : resolve_tuning_nodes(load_tune_file(q.tune_file), q.kind, q.k, q.link,
                                                Launcher::Threads, &why))
    if (r.unbounded || q.bytes <= double(r.up_to_bytes))
      return allreduce_link_cost(r.algorithm, q.bytes, q.k, q.link, q.kind, q.tune_file);
  DPB_CHECK(false, "--allreduce auto: the tuning table (" << why << ") has no rule for "
                                                          << q.bytes << " bytes");
}

// Bytes rank q.rank sends in one call (comm_volume.h; its registry entry carries it): the count of
// the algorithm its tuning table (q.tune_file on q.kind with q.k ranks) picks for n floats, by
// the rule run() applies.
uint64_t auto_sent_bytes(const SentBytesQuery& q) {
  std::string why;
  const size_t bytes = q.n * sizeof(float);
  LinkSpec link = q.link;
  link.nodes = q.nodes;
  for (const TuneRule& r : resolve_tuning_nodes(load_tune_file(q.tune_file), q.kind, q.k, link,
                                                Launcher::Threads, &why))
    if (r.unbounded || bytes <= r.up_to_bytes)
      return schedule_sent_bytes(Collective::AllReduce, r.algorithm, q.n, q.k, q.rank, q.kind,
                                 q.tune_file, q.nodes, link);
  DPB_CHECK(false, "--allreduce auto: the tuning table (" << why << ") has no rule for " << bytes
                                                          << " bytes");
}

}  // namespace dpb
