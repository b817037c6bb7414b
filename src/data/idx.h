// idx.h: the pieces under dataset.h, exposed so tests can reach each check on its own.
//
// read_file_bytes reads a whole file into memory and, when it starts with the gzip magic bytes
// (1f 8b), inflates it with zlib (concatenated gzip members are accepted; anything else after the
// stream is an error). parse_idx_images / parse_idx_labels validate an in-memory IDX buffer
// (big-endian header) and return its payload. Every error is a dpb::Error naming `path`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dpb {

inline constexpr const char* kDefaultDataDir = "/usr/share/datasets/fashion-mnist";
inline constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension

// The whole file, decompressed if gzip. Errors: missing, a directory, unreadable, empty, corrupt or
// truncated gzip stream, trailing bytes after the gzip stream.
std::vector<uint8_t> read_file_bytes(const std::string& path);

struct IdxImages {
  int n = 0, rows = 0, cols = 0;
  std::vector<uint8_t> pixels;  // n * rows * cols
};

// `bytes` is the (decompressed) content of `path`; `path` is only used in messages. The payload is
// moved out of `bytes`. Requires rows x cols == want_rows x want_cols and an exact payload length.
IdxImages parse_idx_images(std::vector<uint8_t>&& bytes, const std::string& path,
                           int want_rows = 28, int want_cols = 28);
// Labels payload; also checks every label is in [0, num_classes - 1].
std::vector<uint8_t> parse_idx_labels(std::vector<uint8_t>&& bytes, const std::string& path,
                                      int num_classes = 10);

// Throws unless `dir` is an existing directory. A missing `default_dir` gets the install hint.
void check_data_dir(const std::string& dir, const std::string& default_dir = kDefaultDataDir);

// DIR/NAME.gz if it exists, else DIR/NAME; throws naming both when neither exists.
std::string find_idx_file(const std::string& dir, const std::string& name);

}  // namespace dpb
