// test_two_level_cost.cpp: issue 26 items 2 (auto) and 4 (the two-level projection): every
// collective's cost model on two links (a flat step that crosses nodes waits for the slow link;
// hier's levels on each), the named links table, `dpbench project` on G x N devices (every shard
// mode charged on both links), and `--allreduce auto` choosing hier on emulated nodes where its
// cost on the link is lower (2 x 2, a 10x slower network: hier at large n, the flat rule at tiny
// n; exact sums either way).
// Run: ./dpb_tests --gtest_filter='TwoLevelCost*:NamedLinks*:AutoNodes*'
#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <vector>

#include "collectives/named_links.h"
#include "collectives/registry.h"
#include "collectives/tuning.h"
#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"
#include "src/model/model.h"
#include "src/train/projection.h"
#include "tests/cpu_ranks.h"
#include "tests/links.h"
#include "tests/rank_threads.h"

namespace dpb {
namespace {

// 2 x 2: 1 Gb/s and 10 us inside a node, 0.1 Gb/s and 100 us between.
LinkSpec two_by_two() { return two_level_link(2, 1, 10, 0.1, 100); }

double T(double bytes, double gbps, double us) { return us * 1e-6 + bytes * 8 / (gbps * 1e9); }

TEST(TwoLevelCost, FlatStepsThatCrossWaitForTheSlowLink) {
  const LinkSpec l = two_by_two();
  const double n = 4e6;  // bytes
  const double slow = T(n / 4, 0.1, 100);
  // ring and direct: every one of the 2(k-1) steps has a transfer across nodes.
  EXPECT_NEAR(allreduce_link_cost("ring", n, 4, l), 6 * slow, 1e-12);
  EXPECT_NEAR(allreduce_link_cost("direct", n, 4, l), 6 * slow, 1e-12);
  EXPECT_NEAR(find_collective(Collective::ReduceScatter, "ring")
                  .link_cost(LinkCostQuery{n, 4, l}), 3 * slow, 1e-12);
  // rhd: the exchange at distance 2 crosses, the one at distance 1 stays in the node.
  EXPECT_NEAR(allreduce_link_cost("rhd", n, 4, l), 2 * T(n / 2, 0.1, 100) + 2 * T(n / 4, 1, 10),
              1e-12);
  // naive: rank 0 with rank 1 inside its node, with ranks 2 and 3 across, each way.
  EXPECT_NEAR(allreduce_link_cost("naive", n, 4, l), 2 * (T(n, 1, 10) + 2 * T(n, 0.1, 100)), 1e-12);
  // hier: 2(g-1) steps of n/g inside, 2(N-1) of n/k across.
  EXPECT_NEAR(allreduce_link_cost("hier", n, 4, l), 2 * T(n / 2, 1, 10) + 2 * T(n / 4, 0.1, 100),
              1e-12);
  // One node (or no node link): the intra-node model, unchanged.
  LinkSpec one = l;
  one.nodes = 1;
  EXPECT_NEAR(allreduce_link_cost("ring", n, 4, one), 6 * T(n / 4, 1, 10), 1e-12);
  // Every rank its own node (g = 1): every transfer crosses, the fast link plays no part.
  LinkSpec own = l;
  own.nodes = 4;
  own.node_gbps = 10;  // faster than the node's own (no ranks share a node, so it is unused)
  EXPECT_NEAR(allreduce_link_cost("ring", n, 4, own), 6 * T(n / 4, 10, 100), 1e-12);
}

TEST(NamedLinks, TableIsWellFormedAndLookupsNameTheOption) {
  ASSERT_GE(named_links().size(), 5u);
  for (const NamedLink& l : named_links()) {
    EXPECT_GT(l.gbps, 0) << l.name;
    EXPECT_GT(l.latency_us, 0) << l.name;
    EXPECT_FALSE(l.help.empty()) << l.name;
    EXPECT_EQ(&find_named_link(l.name), &l);
  }
  EXPECT_EQ(find_named_link("nvlink-h100").gbps, 3600);
  EXPECT_EQ(find_named_link("ib-ndr400").latency_us, 14);
  try {
    find_named_link("nvlink9", "--node-link");
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--node-link: unknown link 'nvlink9'"), std::string::npos) << m;
    EXPECT_NE(m.find("pcie4"), std::string::npos) << m;
  }
}

// LeNet's layout, 1 s forward, 2 s backward, gradients ready evenly from the last back.
StepProfile lenet_profile() {
  StepProfile p;
  p.model = "lenet";
  p.backend = "cpu";
  p.batch = 100;
  p.forward_s = 1;
  p.backward_s = 2;
  const auto layout = model_param_layout("lenet", ModelOptions{});
  const int n = int(layout.size());
  for (int i = 0; i < n; ++i)
    p.params.push_back({layout[i].name, layout[i].size, 2.0 * double(n - i) / n});
  return p;
}

TEST(TwoLevelCost, ProjectionChargesEveryCollectiveOnBothLinks) {
  const StepProfile prof = lenet_profile();
  size_t floats = 0;
  for (const auto& q : prof.params) floats += q.floats;
  ProjectConfig cfg;
  cfg.devices = 4;
  cfg.batch = 400;
  cfg.train_examples = 400;  // one step
  cfg.sync.mode = SyncMode::Fused;
  cfg.link = two_by_two();
  const double n = double(floats) * 4;
  for (const char* alg : {"ring", "hier"}) {
    cfg.allreduce = alg;
    cfg.shard = ShardMode::None;
    Projection p = project(prof, cfg);
    EXPECT_NEAR(p.comm_s, allreduce_link_cost(alg, n, 4, cfg.link), 1e-12) << alg;
    // ZeRO-1: the all-reduce, then one all-gather of the (single) unit, both on two levels.
    cfg.shard = ShardMode::Optimizer;
    p = project(prof, cfg);
    const double ag = find_collective(Collective::AllGather, alg)
                          .link_cost(LinkCostQuery{n, 4, cfg.link});
    EXPECT_NEAR(p.comm_s, allreduce_link_cost(alg, n, 4, cfg.link) + ag, 1e-12) << alg;
  }
  // Hier sends 1/g of the data across: on this 10x slower network it is the cheaper one.
  cfg.shard = ShardMode::None;
  cfg.allreduce = "ring";
  const double ring = project(prof, cfg).comm_s;
  cfg.allreduce = "hier";
  EXPECT_LT(project(prof, cfg).comm_s, 0.6 * ring);
  const nlohmann::json j = projection_to_json(prof, cfg, project(prof, cfg));
  EXPECT_EQ(j["nodes"], 2);
  EXPECT_EQ(j["devices_per_node"], 2);
  EXPECT_EQ(j["node_link_gbps"], 0.1);
  EXPECT_EQ(j["node_link_latency_us"], 100.0);
  EXPECT_NE(j["link"].get<std::string>().find("2 nodes"), std::string::npos) << j["link"];
  cfg.devices = 6;
  cfg.link.nodes = 4;  // 6 devices do not split into 4 nodes
  EXPECT_THROW(project(prof, cfg), Error);
}

// A table for 4 CPU ranks: rhd up to 64 KiB, ring above (a test's, not the default).
constexpr const char* kTable = R"({"format": "dpbench-allreduce-tuning/1", "tables": [
  {"backend": "cpu", "ranks": 4, "rules": [{"up_to_bytes": 65536, "algorithm": "rhd"},
                                          {"up_to_bytes": null, "algorithm": "ring"}]}]})";

TEST(AutoNodes, ChoosesHierWhereItsCostOnTheLinkIsLower) {
  // A fast link (so the test's runs take milliseconds) whose network is 10x slower.
  const LinkSpec l = two_level_link(2, 100, 5, 10, 50);
  const std::string path = testing::TempDir() + "dpb_auto_nodes_test.json";
  { std::ofstream(path) << kTable; }
  const TuneFile table = load_tune_file(path);
  std::string why;
  // rhd and hier both cross twice at tiny n (2 L + 2 L'): within the margin, rhd stays; ring's
  // six slow steps lose to hier from the first byte of its range.
  auto rules = resolve_tuning_nodes(table, BackendKind::Cpu, 4, l, Launcher::Threads, &why);
  EXPECT_EQ(describe_rules(rules), "rhd<=64KiB; hier") << why;
  EXPECT_NE(why.find("2 nodes: hier where its cost on the link (100 Gb/s 5 us inside; 10 Gb/s "
                     "50 us between) is 15% lower"), std::string::npos) << why;
  // The default table (naive, direct, ring for k = 4): hier at large n there too.
  rules = resolve_tuning_nodes(load_tune_file(""), BackendKind::Cpu, 4, l, Launcher::Threads, &why);
  EXPECT_EQ(rules.back().algorithm, "hier") << describe_rules(rules);
  // Without nodes, or without an emulated link, the flat rules stand.
  std::string flat_why;
  const auto flat = resolve_tuning(table, BackendKind::Cpu, 4, &flat_why);
  LinkSpec one = l;
  one.nodes = 1;
  EXPECT_EQ(describe_rules(resolve_tuning_nodes(table, BackendKind::Cpu, 4, one,
                                                Launcher::Threads, &why)),
            describe_rules(flat));
  LinkSpec none;
  none.nodes = 2;
  EXPECT_EQ(describe_rules(resolve_tuning_nodes(table, BackendKind::Cpu, 4, none,
                                                Launcher::Threads, &why)),
            describe_rules(flat));

  CpuRanks c(4, l);  // 2 x 2 emulated nodes on l (threads)
  auto ar = make_allreduce("auto", c.group, AllReduceOptions{path});
  EXPECT_NE(ar->describe().find("hier"), std::string::npos) << ar->describe();
  EXPECT_EQ(ar->describe().find(','), std::string::npos) << "must fit a CSV field";
  const size_t tiny = 1, large = size_t(4) << 20;  // 4 B, 16 MiB
  EXPECT_EQ(ar->choice(large), "hier");
  EXPECT_EQ(ar->choice(tiny), "rhd");
  // auto's link cost and byte count follow the same rules.
  EXPECT_EQ(allreduce_link_cost("auto", double(large) * 4, 4, l, BackendKind::Cpu, path),
            allreduce_link_cost("hier", double(large) * 4, 4, l));
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(schedule_sent_bytes(Collective::AllReduce, "auto", large / 64, 4, r,
                                  BackendKind::Cpu, path, 2, l),
              schedule_sent_bytes(Collective::AllReduce, ar->choice(large / 64), large / 64, 4, r,
                                  BackendKind::Cpu, "", 2))
        << r;
  // Exact sums whichever it runs (hier at 64K floats, the flat rule at 1).
  for (size_t n : {size_t(1), size_t(65536)}) {
    std::vector<size_t> wrong(4, 0);
    std::vector<Buffer> bufs;
    for (int r = 0; r < 4; ++r) bufs.push_back(c.group.alloc(r, n, MemCategory::Workspace, "t"));
    on_ranks(4, [&](int r) {
      std::vector<float> host(n);
      for (size_t i = 0; i < n; ++i) host[i] = float((r + 1) * int(i % 7 + 1));
      Device& d = c.group.device(r);
      d.upload(bufs[size_t(r)].get(), host.data(), n);
      ar->run(r, bufs[size_t(r)].get(), n);
      d.download(host.data(), bufs[size_t(r)].get(), n);
      for (size_t i = 0; i < n; ++i) wrong[size_t(r)] += host[i] != float(10 * int(i % 7 + 1));
    });
    for (int r = 0; r < 4; ++r) EXPECT_EQ(wrong[size_t(r)], 0u) << "rank " << r << " n=" << n;
  }
}

}  // namespace
}  // namespace dpb
