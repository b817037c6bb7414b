// dataset.h: Fashion-MNIST (any MNIST-format data) from IDX files, gzip-compressed or raw.
//
// Directory resolution: --data-dir if given, else $DPBENCH_DATA, else
// /usr/share/datasets/fashion-mnist (Debian's dataset-fashion-mnist). Each of the four files is
// looked up as NAME.gz then NAME (raw).
// Validation: magic numbers (0x00000803 images, 0x00000801 labels), dimensions (28x28), the
// payload size against the header, truncated or trailing data, corrupt gzip streams, image/label
// count agreement, labels in [0, 9]. Every error is a dpb::Error naming the file and the problem; a
// missing default directory also says how to install the dataset (apt-get install
// dataset-fashion-mnist). The checks themselves live in idx.h. Loading the full 60k+10k set takes
// about 0.3 s (zlib inflate; the test split is read on a second thread).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dpb {

// n examples of rows * cols uint8 features each (scaled by 1/255 when loaded onto a device):
// images of 28x28 pixels, or flat vectors (rows 1: --data synthetic's MLP inputs).
struct Split {
  int n = 0, rows = 28, cols = 28;
  std::vector<uint8_t> images;  // n * rows * cols, row-major per image; repeated: one example
  std::vector<uint8_t> labels;  // n, each in [0, 9]
  // Every example is the same features, stored once (synthetic data: a batch of ones of any size
  // costs one example of host memory).
  bool repeated = false;
  int features() const { return rows * cols; }
  const uint8_t* example(int i) const {
    return images.data() + (repeated ? 0 : size_t(i) * size_t(features()));
  }
};

struct Dataset {
  std::string dir;  // the directory it came from ("synthetic" for src/data/synthetic.h's)
  Split train, test;
};

// Resolves the directory as described above ("" means: not given on the command line).
std::string resolve_data_dir(const std::string& cli_dir);

// Reads one IDX images file / labels file (path given exactly; .gz detected by magic bytes).
Split read_idx_pair(const std::string& images_path, const std::string& labels_path);

// Loads train (train-images-idx3-ubyte, train-labels-idx1-ubyte) and test (t10k-...) splits.
// train_limit / test_limit > 0 keep only the first N examples of each split; a limit above the
// available count, or a negative one, is an error (never a silent clamp).
Dataset load_fashion_mnist(const std::string& dir, int train_limit = 0, int test_limit = 0);

}  // namespace dpb
