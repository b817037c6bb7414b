// data_test_util.h: helpers for the data-loader tests (test_data*.cpp): temp dirs, IDX and gzip
// writers, and matchers for errors that must name the input.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "src/core/check.h"
#include "src/data/dataset.h"

namespace dpb_test {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dpb_test_data_XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline void put_be32(Bytes& b, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) b.push_back(uint8_t(v >> shift));
}

// n images of rows x cols; pixel values encode (image, position) so prefixes can be checked.
inline Bytes make_images(uint32_t n, uint32_t rows = 28, uint32_t cols = 28,
                         uint32_t magic = 0x803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) b.push_back(uint8_t(i * 7 + i / (rows * cols)));
  return b;
}

inline Bytes make_labels(uint32_t n, uint32_t magic = 0x801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, n);
  for (uint32_t i = 0; i < n; ++i) b.push_back(uint8_t((i * 3 + 1) % 10));
  return b;
}

inline Bytes gzip(const Bytes& raw) {
  z_stream zs{};
  if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) throw 1;
  Bytes out(deflateBound(&zs, raw.size()) + 64);
  zs.next_in = const_cast<Bytef*>(raw.data());
  zs.avail_in = uInt(raw.size());
  zs.next_out = out.data();
  zs.avail_out = uInt(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  if (rc != Z_STREAM_END) throw 2;
  return out;
}

inline void write_file(const std::string& path, const Bytes& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

// A valid four-file dataset (train n_train, test n_test) in `dir`, gzip or raw.
inline void write_dataset(const TempDir& dir, uint32_t n_train, uint32_t n_test, bool gz) {
  const std::string ext = gz ? ".gz" : "";
  auto put = [&](const std::string& name, const Bytes& b) {
    write_file(dir.file(name + ext), gz ? gzip(b) : b);
  };
  put("train-images-idx3-ubyte", make_images(n_train));
  put("train-labels-idx1-ubyte", make_labels(n_train));
  put("t10k-images-idx3-ubyte", make_images(n_test));
  put("t10k-labels-idx1-ubyte", make_labels(n_test));
}

// Expects fn() to throw dpb::Error whose message contains every one of `parts`.
inline void expect_error(const std::function<void()>& fn,
                         std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const dpb::Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "missing \"" << p << "\" in: " << msg;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-dpb::Error: " << e.what();
    return;
  }
  ADD_FAILURE() << "no exception; expected one mentioning \"" << *parts.begin() << "\"";
}

// Sets (or with nullopt unsets) an environment variable for one scope.
struct EnvGuard {
  std::string name;
  std::optional<std::string> old;
  EnvGuard(const std::string& n, std::optional<std::string> value) : name(n) {
    if (const char* v = std::getenv(n.c_str())) old = v;
    if (value) setenv(n.c_str(), value->c_str(), 1);
    else unsetenv(n.c_str());
  }
  ~EnvGuard() {
    if (old) setenv(name.c_str(), old->c_str(), 1);
    else unsetenv(name.c_str());
  }
};

inline constexpr const char* kImg = "train-images-idx3-ubyte";
inline constexpr const char* kLbl = "train-labels-idx1-ubyte";

// Writes a valid dataset, replaces train images or labels with `bytes`, and loads it.
inline void expect_damaged(const char* name, const Bytes& bytes,
                           std::initializer_list<std::string> parts, bool gz = true) {
  TempDir dir;
  write_dataset(dir, 5, 3, gz);
  const std::string path = dir.file(std::string(name) + (gz ? ".gz" : ""));
  write_file(path, bytes);
  std::vector<std::string> all(parts);
  all.push_back(path);
  try {
    dpb::load_fashion_mnist(dir.str());
    ADD_FAILURE() << "no exception for damaged " << path << "; expected \"" << *parts.begin()
                  << "\"";
  } catch (const dpb::Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : all)
      EXPECT_NE(msg.find(p), std::string::npos) << "missing \"" << p << "\" in: " << msg;
  }
}

}  // namespace dpb_test
