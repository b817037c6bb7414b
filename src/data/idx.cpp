// idx.cpp: IDX header/payload validation over a ByteStream, and the data directory lookups.
// See idx.h. Everything here runs once at start-up; the 60k+10k Fashion-MNIST set takes ~0.2 s,
// nearly all of it inflate.
#include "src/data/idx.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <iomanip>
#include <new>
#include <sstream>

#include "src/core/check.h"
#include "src/core/memory.h"

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

// Reads the `expected` payload bytes after the header. The buffer starts at most at 64 MiB (and at
// what the input can still hold) and doubles only as bytes arrive, so a header claiming more than
// the file holds costs at most twice what is really there. Then the content must end.
std::vector<uint8_t> read_payload(ByteStream& in, uint64_t expected, int header_bytes,
                                  const std::string& what) {
  constexpr uint64_t kFirst = uint64_t(64) << 20, kExtraShown = uint64_t(1) << 20;
  const std::string& path = in.name();
  std::vector<uint8_t> out;
  uint64_t got = 0;
  try {
    out.resize(size_t(std::min({expected, in.max_remaining(), kFirst})));
    while (got < expected) {
      if (got == out.size())
        out.resize(size_t(std::min<uint64_t>(expected, std::max<uint64_t>(got * 2, 1 << 16))));
      const size_t want = size_t(out.size() - got);
      const size_t n = in.read(out.data() + got, want);
      got += n;
      if (n < want) break;
    }
  } catch (const std::bad_alloc&) {  // a memory limit, not bad data: exit 3 (OutOfMemory)
    std::ostringstream msg;
    msg << "out of memory: " << path << ": after " << got << " of the " << expected
        << " payload bytes the header describes (" << what << ")" << address_limit_note();
    throw OutOfMemory(msg.str(), size_t(expected), 0);
  }
  DPB_CHECK(got == expected, path << ": truncated payload: the header says " << what
                                  << ", expected " << expected << " bytes after the "
                                  << header_bytes << "-byte header, actual " << got);
  const uint64_t extra = in.skip(kExtraShown + 1);
  DPB_CHECK(extra == 0, path << ": trailing data: " << (extra > kExtraShown ? "more than " : "")
                             << std::min(extra, kExtraShown) << " extra bytes after the "
                             << expected << " payload bytes the header describes (" << what
                             << ")");
  return out;
}

// Reads the 4-byte magic number that starts the content and checks it is `want`.
uint32_t read_magic(ByteStream& in, uint32_t want, const char* kind) {
  uint8_t m[4];
  const size_t got = in.read(m, 4);
  DPB_CHECK(got > 0, in.name() << ": file is empty (0 bytes"
                               << (in.gzip() ? " after gzip decompression)" : ")"));
  DPB_CHECK(got == 4, in.name() << ": too short for an IDX header (" << got << " bytes)");
  const uint32_t magic = be32(m);
  DPB_CHECK(magic == want, in.name() << ": bad magic number " << hex32(magic) << ", expected "
                                     << hex32(want) << " (" << kind << ")"
                                     << magic_hint(magic, want));
  return magic;
}

// Runs `read` and turns an allocation failure anywhere in it into an error naming the file.
template <class F>
auto naming_alloc_failure(const std::string& path, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const std::bad_alloc&) {
    DPB_CHECK(false, path << ": out of memory while reading this file");
  }
}

}  // namespace

IdxImages parse_idx_images(ByteStream& in, int want_rows, int want_cols) {
  const std::string& path = in.name();
  read_magic(in, kIdxImagesMagic, "IDX images: unsigned bytes, 3 dimensions");
  uint8_t h[12];
  const size_t got = in.read(h, 12);
  DPB_CHECK(got == 12, path << ": truncated IDX images header: " << 4 + got
                            << " bytes, expected 16");
  const uint32_t n = be32(h), rows = be32(h + 4), cols = be32(h + 8);
  DPB_CHECK(rows == uint32_t(want_rows) && cols == uint32_t(want_cols),
            path << ": wrong image dimensions " << rows << "x" << cols << ", expected "
                 << want_rows << "x" << want_cols);
  DPB_CHECK(n <= uint32_t(INT_MAX), path << ": image count " << n << " is too large");
  std::ostringstream what;
  what << n << " images of " << rows << "x" << cols;
  IdxImages im;
  im.pixels = read_payload(in, uint64_t(n) * rows * cols, 16, what.str());
  im.n = int(n);
  im.rows = int(rows);
  im.cols = int(cols);
  return im;
}

std::vector<uint8_t> parse_idx_labels(ByteStream& in, int num_classes) {
  const std::string& path = in.name();
  read_magic(in, kIdxLabelsMagic, "IDX labels: unsigned bytes, 1 dimension");
  uint8_t h[4];
  const size_t got = in.read(h, 4);
  DPB_CHECK(got == 4, path << ": truncated IDX labels header: " << 4 + got << " bytes, expected 8");
  const uint32_t n = be32(h);
  DPB_CHECK(n <= uint32_t(INT_MAX), path << ": label count " << n << " is too large");
  std::vector<uint8_t> b = read_payload(in, n, 8, std::to_string(n) + " labels");
  const auto bad = std::find_if(b.begin(), b.end(), [&](uint8_t v) { return v >= num_classes; });
  DPB_CHECK(bad == b.end(), path << ": label out of range: label " << int(*bad) << " at index "
                                 << (bad - b.begin()) << " is outside [0, " << num_classes - 1
                                 << "]");
  return b;
}

IdxImages read_idx_images(const std::string& path, int want_rows, int want_cols) {
  return naming_alloc_failure(path, [&] {
    ByteStream in(path);
    return parse_idx_images(in, want_rows, want_cols);
  });
}

std::vector<uint8_t> read_idx_labels(const std::string& path, int num_classes) {
  return naming_alloc_failure(path, [&] {
    ByteStream in(path);
    return parse_idx_labels(in, num_classes);
  });
}

std::vector<uint8_t> read_file_bytes(const std::string& path, uint64_t max_bytes) {
  return naming_alloc_failure(path, [&] {
    ByteStream in(path);
    std::vector<uint8_t> out;
    size_t got = 0;
    for (;;) {
      out.resize(std::max<size_t>(out.size() * 2, 1 << 16));
      got += in.read(out.data() + got, out.size() - got);
      if (got < out.size()) break;
      DPB_CHECK(got <= max_bytes, path << ": more than " << max_bytes << " bytes of content");
    }
    DPB_CHECK(got <= max_bytes, path << ": more than " << max_bytes << " bytes of content");
    out.resize(got);
    return out;
  });
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
