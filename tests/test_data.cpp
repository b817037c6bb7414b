// test_data.cpp: the IDX / Fashion-MNIST loader (src/data). Loads the real dataset when Debian's
// dataset-fashion-mnist is installed (skipped otherwise), then checks every kind of damaged input
// on small synthetic files in a temp dir. Run: ./dpb_tests --gtest_filter='Data*'
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include "src/core/check.h"
#include "src/data/dataset.h"
#include "src/data/idx.h"
#include "tests/data_test_util.h"

namespace {

using namespace dpb_test;

// ---- the real Fashion-MNIST ----

class DataReal : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = dpb::resolve_data_dir("");  // $DPBENCH_DATA first (a GPU bundle's data), else Debian's
    if (!fs::is_directory(dir_)) return;
    const auto t0 = std::chrono::steady_clock::now();
    full_ = std::make_unique<dpb::Dataset>(dpb::load_fashion_mnist(dir_));
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  static void TearDownTestSuite() { full_.reset(); }
  void SetUp() override {
    if (!full_)
      GTEST_SKIP() << dir_ << " not found (sudo apt-get install dataset-fashion-mnist, or set "
                   << "DPBENCH_DATA)";
  }
  static inline std::string dir_;
  static inline std::unique_ptr<dpb::Dataset> full_;
  static inline double seconds_ = 0;
};

TEST_F(DataReal, SizesHistogramAndFirstLabel) {
  const dpb::Dataset& d = *full_;
  std::cout << "[ info ] loaded 60k+10k Fashion-MNIST in " << seconds_ << " s\n";
  ASSERT_EQ(d.train.n, 60000);
  ASSERT_EQ(d.test.n, 10000);
  EXPECT_EQ(d.train.rows, 28);
  EXPECT_EQ(d.train.cols, 28);
  EXPECT_EQ(d.train.images.size(), 60000u * 784);
  EXPECT_EQ(d.test.images.size(), 10000u * 784);
  EXPECT_EQ(d.train.labels[0], 9);  // ankle boot
  std::array<int, 10> train_hist{}, test_hist{};
  for (uint8_t l : d.train.labels) train_hist[l]++;
  for (uint8_t l : d.test.labels) test_hist[l]++;
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(train_hist[c], 6000) << "class " << c;
    EXPECT_EQ(test_hist[c], 1000) << "class " << c;
  }
  EXPECT_LT(seconds_, 5.0);  // ~0.2 s expected; generous for loaded CI machines
}

TEST_F(DataReal, LimitsKeepThePrefix) {
  const dpb::Dataset d = dpb::load_fashion_mnist(dir_, 1000, 10);
  ASSERT_EQ(d.train.n, 1000);
  ASSERT_EQ(d.test.n, 10);
  EXPECT_EQ(d.train.labels, Bytes(full_->train.labels.begin(), full_->train.labels.begin() + 1000));
  EXPECT_EQ(d.train.images, Bytes(full_->train.images.begin(), full_->train.images.begin() + 784000));
  EXPECT_EQ(d.test.images, Bytes(full_->test.images.begin(), full_->test.images.begin() + 7840));
}

TEST_F(DataReal, RawFilesMatchGzip) {
  TempDir dir;
  for (const char* name : {"t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
    write_file(dir.file(name),
               dpb::read_file_bytes(dir_ + "/" + name + ".gz", 1 << 30));
  const dpb::Split s =
      dpb::read_idx_pair(dir.file("t10k-images-idx3-ubyte"), dir.file("t10k-labels-idx1-ubyte"));
  EXPECT_EQ(s.n, 10000);
  EXPECT_EQ(s.images, full_->test.images);
  EXPECT_EQ(s.labels, full_->test.labels);
}

// ---- synthetic datasets: what must load ----

TEST(DataSynthetic, GzipAndRawLoadTheSame) {
  TempDir gz, raw;
  write_dataset(gz, 50, 20, true);
  write_dataset(raw, 50, 20, false);
  const dpb::Dataset a = dpb::load_fashion_mnist(gz.str()), b = dpb::load_fashion_mnist(raw.str());
  EXPECT_EQ(a.dir, gz.str());
  EXPECT_EQ(a.train.n, 50);
  EXPECT_EQ(a.test.n, 20);
  const Bytes img = make_images(50), lbl = make_labels(50);
  EXPECT_EQ(a.train.images, Bytes(img.begin() + 16, img.end()));
  EXPECT_EQ(a.train.labels, Bytes(lbl.begin() + 8, lbl.end()));
  EXPECT_EQ(a.train.images, b.train.images);
  EXPECT_EQ(a.test.labels, b.test.labels);
}

TEST(DataSynthetic, LimitsAndGzPreferredOverRaw) {
  TempDir dir;
  write_dataset(dir, 50, 20, true);
  write_file(dir.file(std::string(kLbl)), Bytes{1, 2, 3});  // raw twin is ignored: .gz wins
  const dpb::Dataset d = dpb::load_fashion_mnist(dir.str(), 7, 3);
  EXPECT_EQ(d.train.n, 7);
  EXPECT_EQ(d.train.images.size(), 7u * 784);
  EXPECT_EQ(d.train.labels.size(), 7u);
  EXPECT_EQ(d.test.n, 3);
  expect_error([&] { dpb::load_fashion_mnist(dir.str(), 0, 21); },
               {"test_limit 21 exceeds the 20 examples", "t10k-images-idx3-ubyte"});
  expect_error([&] { dpb::load_fashion_mnist(dir.str(), -1); }, {"train_limit -1 is negative"});
}

TEST(DataSynthetic, MultiMemberGzip) {
  TempDir dir;
  const Bytes raw = make_labels(30);
  Bytes two = gzip(Bytes(raw.begin(), raw.begin() + 13));
  const Bytes rest = gzip(Bytes(raw.begin() + 13, raw.end()));
  two.insert(two.end(), rest.begin(), rest.end());
  write_file(dir.file("l.gz"), two);
  EXPECT_EQ(dpb::read_file_bytes(dir.file("l.gz"), 1 << 20), raw);
}

TEST(DataSynthetic, ResolveDataDir) {
  {
    EnvGuard env("DPBENCH_DATA", "/env/dir");
    EXPECT_EQ(dpb::resolve_data_dir("/cli/dir"), "/cli/dir");
    EXPECT_EQ(dpb::resolve_data_dir(""), "/env/dir");
  }
  {
    EnvGuard env("DPBENCH_DATA", "");
    EXPECT_EQ(dpb::resolve_data_dir(""), dpb::kDefaultDataDir);
  }
  EnvGuard env("DPBENCH_DATA", std::nullopt);
  EXPECT_EQ(dpb::resolve_data_dir(""), dpb::kDefaultDataDir);
}

TEST(DataSynthetic, DpbenchDataOverride) {
  TempDir dir;
  write_dataset(dir, 12, 4, true);
  EnvGuard env("DPBENCH_DATA", dir.str());
  const dpb::Dataset d = dpb::load_fashion_mnist(dpb::resolve_data_dir(""));
  EXPECT_EQ(d.dir, dir.str());
  EXPECT_EQ(d.train.n, 12);
  EXPECT_EQ(d.test.n, 4);
}

// ---- damaged inputs: each is rejected with the file name and the problem ----


TEST(DataDamaged, BadMagic) {
  expect_damaged(kImg, gzip(make_images(5, 28, 28, 0x804)),
                 {"bad magic number 0x00000804", "expected 0x00000803"});
  expect_damaged(kImg, gzip(make_labels(5)), {"bad magic number", "this is an IDX labels file"});
  expect_damaged(kLbl, gzip(make_labels(5, 0x01080000)), {"bad magic number", "byte-swapped"});
  expect_damaged(kLbl, gzip(Bytes{'h', 'e', 'l', 'l', 'o', '\n'}), {"not an IDX file"});
}

TEST(DataDamaged, WrongDims) {
  expect_damaged(kImg, gzip(make_images(5, 32, 32)), {"wrong image dimensions 32x32, expected 28x28"});
}

TEST(DataDamaged, TruncatedHeaderAndPayload) {
  Bytes img = make_images(5);
  img.pop_back();
  expect_damaged(kImg, gzip(img), {"truncated payload", "expected 3920 bytes", "actual 3919"});
  expect_damaged(kImg, img, {"truncated payload", "expected 3920 bytes", "actual 3919"}, false);
  Bytes lbl = make_labels(5);
  lbl.resize(11);
  expect_damaged(kLbl, gzip(lbl), {"truncated payload", "expected 5 bytes", "actual 3"});
  expect_damaged(kImg, gzip(Bytes(img.begin(), img.begin() + 10)),
                 {"truncated IDX images header", "10 bytes"});
}

TEST(DataDamaged, TrailingBytes) {
  Bytes img = make_images(5);
  img.push_back(0);
  expect_damaged(kImg, gzip(img), {"trailing data: 1 extra bytes"});
  Bytes lbl = make_labels(5);
  lbl.insert(lbl.end(), {1, 2});
  expect_damaged(kLbl, lbl, {"trailing data: 2 extra bytes"}, false);
  Bytes gz = gzip(make_labels(5));
  gz.insert(gz.end(), {'j', 'u', 'n', 'k'});
  expect_damaged(kLbl, gz, {"trailing bytes after the gzip stream"});
}

TEST(DataDamaged, CorruptGzip) {
  const Bytes good = gzip(make_images(5));
  expect_damaged(kImg, Bytes(good.begin(), good.begin() + good.size() / 2),
                 {"corrupt gzip stream", "truncated"});
  Bytes flipped = good;
  for (size_t i = 20; i < 40; ++i) flipped[i] ^= 0x5a;
  expect_damaged(kImg, flipped, {"corrupt gzip stream"});
  Bytes bad_crc = good;
  bad_crc[bad_crc.size() - 8] ^= 1;  // CRC32 in the trailer
  expect_damaged(kImg, bad_crc, {"corrupt gzip stream", "incorrect data check"});
}

TEST(DataDamaged, CountMismatch) {
  expect_damaged(kLbl, gzip(make_labels(4)),
                 {"image/label count mismatch", "has 5 images but", "has 4 labels", kImg});
}

TEST(DataDamaged, LabelOutOfRange) {
  Bytes lbl = make_labels(5);
  lbl[8 + 3] = 10;
  expect_damaged(kLbl, gzip(lbl), {"label out of range", "label 10 at index 3", "[0, 9]"});
}

TEST(DataDamaged, EmptyFile) {
  expect_damaged(kImg, Bytes{}, {"file is empty"});
  expect_damaged(kLbl, Bytes{}, {"file is empty"}, false);
  expect_damaged(kLbl, gzip(Bytes{}), {"file is empty (0 bytes after gzip decompression)"});
}

TEST(DataDamaged, DirectoryInsteadOfFile) {
  TempDir dir;
  write_dataset(dir, 5, 3, false);
  fs::create_directory(dir.file("t10k-images-idx3-ubyte.gz"));
  expect_error([&] { dpb::load_fashion_mnist(dir.str()); },
               {dir.file("t10k-images-idx3-ubyte.gz"), "is a directory"});
}

TEST(DataDamaged, UnreadableFile) {
  TempDir dir;
  write_dataset(dir, 5, 3, true);
  const std::string path = dir.file(std::string(kLbl) + ".gz");
  chmod(path.c_str(), 0);
  if (access(path.c_str(), R_OK) == 0) GTEST_SKIP() << "running as root: chmod 000 still readable";
  expect_error([&] { dpb::load_fashion_mnist(dir.str()); },
               {path, "cannot open file for reading", "Permission denied"});
}

TEST(DataDamaged, MissingFile) {
  TempDir dir;
  write_dataset(dir, 5, 3, true);
  fs::remove(dir.file("t10k-labels-idx1-ubyte.gz"));
  expect_error([&] { dpb::load_fashion_mnist(dir.str()); },
               {"missing data file t10k-labels-idx1-ubyte", dir.file("t10k-labels-idx1-ubyte.gz"),
                "and " + dir.file("t10k-labels-idx1-ubyte")});
}

TEST(DataDamaged, MissingDir) {
  TempDir dir;
  const std::string gone = dir.file("nope");
  expect_error([&] { dpb::load_fashion_mnist(gone); },
               {"data directory " + gone + " does not exist", "--data-dir"});
  write_file(gone, Bytes{1});
  expect_error([&] { dpb::load_fashion_mnist(gone); }, {gone, "is not a directory"});
  // The default directory, when missing, says how to install it (checked with a stand-in path).
  const std::string dflt = dir.file("fashion-mnist");
  expect_error([&] { dpb::check_data_dir(dflt + "/", dflt); },
               {dflt, "does not exist", "sudo apt-get install dataset-fashion-mnist", "--data-dir",
                "DPBENCH_DATA"});
}

}  // namespace
