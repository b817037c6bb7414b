// train_csv.h: the training CSV's one schema (`dpbench train --csv`). Every column's name, type,
// meaning and formatter live in one table, which writes both the header and the rows, so they
// cannot drift. Readers take the column list from it: `dpbench info` prints it, and
// scripts/train_csv_columns.json is the same table as a file for the Python scripts (tests/
// cli_test.sh fails when the two differ; regenerate with
// `build/dpbench info --csv-columns > scripts/train_csv_columns.json`).
#pragma once
#include <string>
#include <vector>

#include "src/train/trainer.h"

namespace dpb {

// What a row describes besides its epoch: the run's settings and data.
struct TrainCsvRun {
  const TrainConfig& cfg;
  int train_examples = 0, test_examples = 0;
  bool quick = false;       // data subsets (--train-limit / --test-limit)
  bool shared_gpu = false;  // CUDA ranks share GPUs
  std::string allreduce_resolved;  // TrainResult::allreduce_resolved
};

enum class CsvType { Number, Text };

struct CsvColumn {
  const char* name;
  CsvType type;
  std::string doc;  // one line: what the value is, with its unit
  std::string (*format)(const TrainCsvRun& run, const EpochStats& epoch);
};

// The columns in file order.
const std::vector<CsvColumn>& train_csv_columns();
std::string train_csv_header();  // names joined by ','
std::string train_csv_row(const TrainCsvRun& run, const EpochStats& epoch);
// {"columns": [{"name": ..., "type": "number"|"text", "doc": ...}, ...]}, pretty-printed with a
// final newline: the content of scripts/train_csv_columns.json.
std::string train_csv_schema_json();

}  // namespace dpb
