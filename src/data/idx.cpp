// idx.cpp: whole-file reads, in-memory gunzip (zlib inflate) and IDX header/payload validation.
// See idx.h. Everything here runs once at start-up; the 60k+10k Fashion-MNIST set takes ~0.2 s,
// nearly all of it inflate.
#include "src/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <memory>

#include "src/core/check.h"

namespace dpb {
namespace {

namespace fs = std::filesystem;

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string hex32(uint32_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return os.str();
}

std::string strip_trailing_slashes(std::string s) {
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// The file's bytes as stored (no decompression).
std::vector<uint8_t> read_stored(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  DPB_CHECK(st.type() != fs::file_type::not_found, path << ": file does not exist");
  DPB_CHECK(!ec, path << ": cannot access file: " << ec.message());
  DPB_CHECK(st.type() != fs::file_type::directory, path << ": is a directory, expected a file");

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  DPB_CHECK(f, path << ": cannot open file for reading: " << std::strerror(errno));
  std::vector<uint8_t> buf;
  if (st.type() == fs::file_type::regular) {
    const uintmax_t size = fs::file_size(path, ec);
    if (!ec) buf.resize(size_t(size) + 1);  // +1 so a full buffer means "maybe more": keep reading
  }
  if (buf.empty()) buf.resize(1 << 16);
  size_t got = 0;
  for (;;) {
    got += std::fread(buf.data() + got, 1, buf.size() - got, f.get());
    DPB_CHECK(!std::ferror(f.get()), path << ": read error: " << std::strerror(errno));
    if (got < buf.size()) break;  // short read without error: end of file
    buf.resize(buf.size() * 2);
  }
  buf.resize(got);
  return buf;
}

// Inflates a gzip file held in memory. Concatenated members are decoded in turn (as gunzip does);
// other bytes after the last member are an error.
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  z_stream zs{};
  DPB_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK, path << ": zlib inflateInit2 failed");  // gzip only
  struct Ender {
    z_stream* z;
    ~Ender() { inflateEnd(z); }
  } ender{&zs};

  // The trailer's ISIZE (uncompressed size mod 2^32, last member only) is a good first guess;
  // capped at deflate's maximum ratio so a damaged trailer cannot ask for absurd memory.
  size_t hint = in.size() >= 4 ? size_t(in[in.size() - 4]) | size_t(in[in.size() - 3]) << 8 |
                                     size_t(in[in.size() - 2]) << 16 | size_t(in[in.size() - 1]) << 24
                               : 0;
  hint = std::min(hint, in.size() * 1032 + 1024);
  std::vector<uint8_t> out(std::max<size_t>(hint, 4096));

  constexpr size_t kChunk = size_t(1) << 30;  // avail_in / avail_out are 32-bit
  size_t in_pos = 0, out_pos = 0;
  for (;;) {
    if (out_pos == out.size()) out.resize(out.size() * 2);
    zs.next_in = const_cast<Bytef*>(in.data() + in_pos);
    zs.avail_in = uInt(std::min(in.size() - in_pos, kChunk));
    zs.next_out = out.data() + out_pos;
    zs.avail_out = uInt(std::min(out.size() - out_pos, kChunk));
    const uInt avail_in = zs.avail_in, avail_out = zs.avail_out;
    const int rc = inflate(&zs, Z_NO_FLUSH);
    in_pos += avail_in - zs.avail_in;
    out_pos += avail_out - zs.avail_out;
    if (rc == Z_OK) continue;
    if (rc == Z_STREAM_END) {
      if (in_pos == in.size()) break;
      const bool next_member = in.size() - in_pos >= 2 && in[in_pos] == 0x1f && in[in_pos + 1] == 0x8b;
      DPB_CHECK(next_member, path << ": trailing bytes after the gzip stream ("
                                  << in.size() - in_pos << " bytes at offset " << in_pos << ")");
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_BUF_ERROR && in_pos < in.size()) continue;  // output full: grown at the loop top
    DPB_CHECK(rc != Z_BUF_ERROR, path << ": corrupt gzip stream: truncated (input ended after "
                                      << in.size() << " compressed bytes, before the end of the "
                                      << "stream)");
    DPB_CHECK(false, path << ": corrupt gzip stream: " << (zs.msg ? zs.msg : "inflate error")
                          << " (zlib code " << rc << ", near compressed byte " << in_pos << ")");
  }
  out.resize(out_pos);
  return out;
}

// Explains a wrong magic number when the cause is recognisable.
std::string magic_hint(uint32_t magic, uint32_t want) {
  const uint32_t swapped = (magic >> 24) | ((magic >> 8) & 0xff00) | ((magic << 8) & 0xff0000) |
                           (magic << 24);
  if (magic == kIdxLabelsMagic && want == kIdxImagesMagic) return " (this is an IDX labels file)";
  if (magic == kIdxImagesMagic && want == kIdxLabelsMagic) return " (this is an IDX images file)";
  if (swapped == want) return " (byte-swapped: the IDX header must be big-endian)";
  if ((magic >> 16) != 0) return " (not an IDX file)";
  return "";
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  std::vector<uint8_t> bytes = read_stored(path);
  DPB_CHECK(!bytes.empty(), path << ": file is empty (0 bytes)");
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) {
    bytes = gunzip(bytes, path);
    DPB_CHECK(!bytes.empty(), path << ": file is empty (0 bytes after gzip decompression)");
  }
  return bytes;
}

IdxImages parse_idx_images(std::vector<uint8_t>&& b, const std::string& path, int want_rows,
                           int want_cols) {
  DPB_CHECK(!b.empty(), path << ": file is empty (0 bytes)");
  DPB_CHECK(b.size() >= 4, path << ": too short for an IDX header (" << b.size() << " bytes)");
  const uint32_t magic = be32(b.data());
  DPB_CHECK(magic == kIdxImagesMagic,
            path << ": bad magic number " << hex32(magic) << ", expected " << hex32(kIdxImagesMagic)
                 << " (IDX images: unsigned bytes, 3 dimensions)"
                 << magic_hint(magic, kIdxImagesMagic));
  DPB_CHECK(b.size() >= 16, path << ": truncated IDX images header: " << b.size()
                                 << " bytes, expected 16");
  const uint32_t n = be32(b.data() + 4), rows = be32(b.data() + 8), cols = be32(b.data() + 12);
  DPB_CHECK(rows == uint32_t(want_rows) && cols == uint32_t(want_cols),
            path << ": wrong image dimensions " << rows << "x" << cols << ", expected "
                 << want_rows << "x" << want_cols);
  DPB_CHECK(n <= uint32_t(INT_MAX), path << ": image count " << n << " is too large");
  const uint64_t expected = uint64_t(n) * rows * cols, actual = b.size() - 16;
  DPB_CHECK(actual >= expected, path << ": truncated payload: the header says " << n << " images of "
                                     << rows << "x" << cols << ", expected " << expected
                                     << " bytes after the 16-byte header, actual " << actual);
  DPB_CHECK(actual == expected, path << ": trailing data: " << actual - expected
                                     << " extra bytes after the " << expected << " payload bytes "
                                     << "the header describes (" << n << " images of " << rows
                                     << "x" << cols << ")");
  b.erase(b.begin(), b.begin() + 16);  // one memmove; the payload keeps the buffer
  IdxImages im;
  im.n = int(n);
  im.rows = int(rows);
  im.cols = int(cols);
  im.pixels = std::move(b);
  return im;
}

std::vector<uint8_t> parse_idx_labels(std::vector<uint8_t>&& b, const std::string& path,
                                      int num_classes) {
  DPB_CHECK(!b.empty(), path << ": file is empty (0 bytes)");
  DPB_CHECK(b.size() >= 4, path << ": too short for an IDX header (" << b.size() << " bytes)");
  const uint32_t magic = be32(b.data());
  DPB_CHECK(magic == kIdxLabelsMagic,
            path << ": bad magic number " << hex32(magic) << ", expected " << hex32(kIdxLabelsMagic)
                 << " (IDX labels: unsigned bytes, 1 dimension)"
                 << magic_hint(magic, kIdxLabelsMagic));
  DPB_CHECK(b.size() >= 8, path << ": truncated IDX labels header: " << b.size()
                                << " bytes, expected 8");
  const uint32_t n = be32(b.data() + 4);
  DPB_CHECK(n <= uint32_t(INT_MAX), path << ": label count " << n << " is too large");
  const uint64_t expected = n, actual = b.size() - 8;
  DPB_CHECK(actual >= expected, path << ": truncated payload: the header says " << n
                                     << " labels, expected " << expected
                                     << " bytes after the 8-byte header, actual " << actual);
  DPB_CHECK(actual == expected, path << ": trailing data: " << actual - expected
                                     << " extra bytes after the " << expected << " labels the "
                                     << "header describes");
  b.erase(b.begin(), b.begin() + 8);
  const auto bad = std::find_if(b.begin(), b.end(), [&](uint8_t v) { return v >= num_classes; });
  DPB_CHECK(bad == b.end(), path << ": label out of range: label " << int(*bad) << " at index "
                                 << (bad - b.begin()) << " is outside [0, " << num_classes - 1
                                 << "]");
  return std::move(b);
}

void check_data_dir(const std::string& dir, const std::string& default_dir) {
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (st.type() == fs::file_type::not_found) {
    const bool is_default = strip_trailing_slashes(dir) == strip_trailing_slashes(default_dir);
    DPB_CHECK(!is_default,
              "Fashion-MNIST data directory " << dir << " does not exist. Install it with "
              << "`sudo apt-get install dataset-fashion-mnist`, or pass --data-dir DIR or set "
              << "DPBENCH_DATA=DIR to use a directory holding the four MNIST-format IDX files");
    DPB_CHECK(false, "data directory " << dir << " does not exist (check --data-dir / "
                                       << "DPBENCH_DATA)");
  }
  DPB_CHECK(!ec, "cannot access data directory " << dir << ": " << ec.message());
  DPB_CHECK(st.type() == fs::file_type::directory, "data directory " << dir
                                                       << " is not a directory");
}

std::string find_idx_file(const std::string& dir, const std::string& name) {
  const std::string base = strip_trailing_slashes(dir) + "/" + name;
  std::error_code ec;
  if (fs::exists(base + ".gz", ec)) return base + ".gz";
  DPB_CHECK(fs::exists(base, ec), "missing data file " << name << " in " << dir << ": tried "
                                                       << base << ".gz and " << base);
  return base;
}

}  // namespace dpb
