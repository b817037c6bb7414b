// dataset.cpp: Fashion-MNIST loading on top of idx.h (directory resolution, file lookup, pairing,
// limits). See dataset.h for the contract; tests/test_data.cpp exercises every error.
#include "src/data/dataset.h"

#include <cstdlib>
#include <future>

#include "src/core/check.h"
#include "src/data/idx.h"

namespace dpb {
namespace {

// Keeps the first `limit` examples (0 = all). A limit above the available count is an error, not a
// silent clamp: a run asked for N examples must not quietly use fewer.
void apply_limit(Split& s, int limit, const char* what, const std::string& images_path) {
  if (limit == 0) return;
  DPB_CHECK(limit <= s.n, what << " " << limit << " exceeds the " << s.n
                               << " examples available in " << images_path
                               << " (use 0 for all examples)");
  s.n = limit;
  s.images.resize(size_t(limit) * s.rows * s.cols);
  s.labels.resize(size_t(limit));
  s.images.shrink_to_fit();
  s.labels.shrink_to_fit();
}

}  // namespace

std::string resolve_data_dir(const std::string& cli_dir) {
  if (!cli_dir.empty()) return cli_dir;
  const char* env = std::getenv("DPBENCH_DATA");
  if (env != nullptr && env[0] != '\0') return env;
  return kDefaultDataDir;
}

Split read_idx_pair(const std::string& images_path, const std::string& labels_path) {
  IdxImages im = read_idx_images(images_path);
  std::vector<uint8_t> labels = read_idx_labels(labels_path);
  DPB_CHECK(size_t(im.n) == labels.size(),
            "image/label count mismatch: " << images_path << " has " << im.n << " images but "
                                           << labels_path << " has " << labels.size()
                                           << " labels");
  Split s;
  s.n = im.n;
  s.rows = im.rows;
  s.cols = im.cols;
  s.images = std::move(im.pixels);
  s.labels = std::move(labels);
  return s;
}

Dataset load_fashion_mnist(const std::string& dir, int train_limit, int test_limit) {
  DPB_CHECK(train_limit >= 0, "train_limit " << train_limit << " is negative (use 0 for all)");
  DPB_CHECK(test_limit >= 0, "test_limit " << test_limit << " is negative (use 0 for all)");
  check_data_dir(dir);
  // Find all four files before reading any, so a missing one is reported at once.
  const std::string train_images = find_idx_file(dir, "train-images-idx3-ubyte");
  const std::string train_labels = find_idx_file(dir, "train-labels-idx1-ubyte");
  const std::string test_images = find_idx_file(dir, "t10k-images-idx3-ubyte");
  const std::string test_labels = find_idx_file(dir, "t10k-labels-idx1-ubyte");

  // The test split inflates on a second thread while this one does the (6x larger) train split.
  // If the train split throws, the future's destructor waits for the thread before unwinding on.
  auto test = std::async(std::launch::async, [&] { return read_idx_pair(test_images, test_labels); });
  Dataset d;
  d.dir = dir;
  d.train = read_idx_pair(train_images, train_labels);
  d.test = test.get();
  apply_limit(d.train, train_limit, "train_limit", train_images);
  apply_limit(d.test, test_limit, "test_limit", test_images);
  return d;
}

}  // namespace dpb
