// idx.h: the IDX (MNIST format) reader under dataset.h, exposed so tests and the fuzzer
// (fuzz/idx_fuzz.cpp) can reach each check on its own.
//
// read_idx_images / read_idx_labels stream a file (gzip or raw, see byte_stream.h): they read and
// validate the big-endian header, then exactly the payload it describes. Memory grows with the
// bytes that really arrive, up to the header's size, so a damaged size field (in the gzip trailer
// or the IDX header) cannot make the reader allocate more than the file holds. Every error,
// allocation failure included, is a dpb::Error naming the file.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "src/data/byte_stream.h"

namespace dpb {

inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";
inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension

struct IdxImages {
  int n = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // n * rows * cols
};

// Requires rows x cols == want_rows x want_cols and exactly the payload the header describes.
IdxImages read_idx_images(const std::string& path, int want_rows = 28, int want_cols = 28);
// Labels payload; also checks every label is in [0, num_classes - 1].
std::vector<uint8_t> read_idx_labels(const std::string& path, int num_classes = 10);

// The same checks on an open stream (a file, or stored bytes in memory).
IdxImages parse_idx_images(ByteStream& in, int want_rows = 28, int want_cols = 28);
std::vector<uint8_t> parse_idx_labels(ByteStream& in, int num_classes = 10);

// The whole content of `path`, decompressed if gzip; an error if it exceeds max_bytes.
std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes);

// Throws unless `dir` is an existing directory. A missing `default_dir` gets the install hint.
void check_data_dir(const std::string& dir, const std::string& default_dir = kDefaultDataDir);

// DIR/NAME.gz if it exists, else DIR/NAME; throws naming both when neither exists.
std::string find_idx_file(const std::string& dir, const std::string& name);

}  // namespace dpb
