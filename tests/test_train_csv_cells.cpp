// test_train_csv_cells.cpp: the training CSV's rows keep the header's columns when a cell holds a
// comma (--inject's specs, found by scripts/chaos.sh: the row had two cells more than the header,
// every later column shifted) or a quote: such cells are quoted as RFC 4180 says. The two-level
// settings (issue 26) are columns: nodes as the run resolved them (--nodes, else DPB_NODES) and
// the link between nodes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "src/train/inject.h"
#include "src/train/train_csv.h"
#include "src/train/trainer.h"

namespace dpb {
namespace {

// An RFC 4180 line split into its cells (quoted cells unquoted).
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted && ch == '"' && i + 1 < line.size() && line[i + 1] == '"') cells.back() += '"', ++i;
    else if (ch == '"') quoted = !quoted;
    else if (ch == ',' && !quoted) cells.emplace_back();
    else cells.back() += ch;
  }
  return cells;
}

TEST(TrainCsvCells, InjectSpecWithCommasIsOneCell) {
  TrainConfig cfg;
  parse_injections("delay:rank=1,phase=backward,ms=30;link:rank=0,gbps=0.5", cfg.inject);
  const TrainCsvRun run{cfg, 300, 50, true, false, "auto: direct<=32KiB, ring"};
  EpochStats e;
  e.epoch = 1;
  const std::vector<std::string> cells = split_csv(train_csv_row(run, e));
  const auto& cols = train_csv_columns();
  ASSERT_EQ(cells.size(), cols.size()) << train_csv_row(run, e);
  for (size_t i = 0; i < cols.size(); ++i) {
    if (std::string(cols[i].name) == "inject") EXPECT_EQ(cells[i], cfg.inject.describe());
    if (std::string(cols[i].name) == "allreduce_resolved")
      EXPECT_EQ(cells[i], "auto: direct<=32KiB, ring");
    if (std::string(cols[i].name) == "epoch") EXPECT_EQ(cells[i], "1");
  }
}

// The row's cells by column name.
std::map<std::string, std::string> row_cells(const TrainConfig& cfg) {
  const TrainCsvRun run{cfg, 300, 50, true, false, "hier"};
  EpochStats e;
  e.epoch = 1;
  const std::vector<std::string> cells = split_csv(train_csv_row(run, e));
  const auto& cols = train_csv_columns();
  std::map<std::string, std::string> m;
  for (size_t i = 0; i < cols.size() && i < cells.size(); ++i) m[cols[i].name] = cells[i];
  return m;
}

// DPB_NODES set for one scope, restored after (tests in this process run one at a time).
class EnvNodes {
 public:
  explicit EnvNodes(const char* v) {
    if (const char* old = std::getenv("DPB_NODES")) old_ = old;
    if (v) setenv("DPB_NODES", v, 1);
    else unsetenv("DPB_NODES");
  }
  ~EnvNodes() {
    if (old_.empty()) unsetenv("DPB_NODES");
    else setenv("DPB_NODES", old_.c_str(), 1);
  }

 private:
  std::string old_;
};

TEST(TrainCsvCells, TwoLevelSettings) {
  TrainConfig cfg;
  cfg.devices = 4;
  {
    EnvNodes env(nullptr);
    auto m = row_cells(cfg);  // one node, no link between nodes
    EXPECT_EQ(m["nodes"], "1");
    EXPECT_EQ(m["node_link_gbps"], "0");
    EXPECT_EQ(m["node_link_latency_us"], "0");
    cfg.link.nodes = 2;
    cfg.link.gbps = 100;
    cfg.link.node_gbps = 10;
    cfg.link.node_latency_us = 50;
    m = row_cells(cfg);
    EXPECT_EQ(m["nodes"], "2");
    EXPECT_EQ(m["link_gbps"], "100");
    EXPECT_EQ(m["node_link_gbps"], "10");
    EXPECT_EQ(m["node_link_latency_us"], "50");
  }
  {  // --nodes wins over DPB_NODES; without it, DPB_NODES is what the run split by
    EnvNodes env("4");
    EXPECT_EQ(row_cells(cfg)["nodes"], "2");
    cfg.link.nodes = 1;
    EXPECT_EQ(row_cells(cfg)["nodes"], "4");
  }
}

}  // namespace
}  // namespace dpb
