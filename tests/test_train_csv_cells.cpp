// test_train_csv_cells.cpp: the training CSV's rows keep the header's columns when a cell holds a
// comma (--inject's specs, found by scripts/chaos.sh: the row had two cells more than the header,
// every later column shifted) or a quote: such cells are quoted as RFC 4180 says.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace dpb
