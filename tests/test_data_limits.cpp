// test_data_limits.cpp: the IDX reader's resource bounds: size fields a damaged file
// could set (the gzip trailer, the IDX header) never decide what is allocated, inputs that are not
// regular files are refused, input crossing the reader's chunk boundaries decodes exactly, and an
// allocation failure still names the file. Run: ./dpb_tests --gtest_filter='DataLimits*'
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <string>

#include "src/data/byte_stream.h"
#include "src/data/idx.h"
#include "tests/data_test_util.h"

namespace {

using namespace dpb_test;

// The header of an images file claiming `n` images of 28x28, followed by `payload` bytes.
Bytes images_header(uint32_t n, size_t payload) {
  Bytes b;
  put_be32(b, 0x803);
  put_be32(b, n);
  put_be32(b, 28);
  put_be32(b, 28);
  b.resize(b.size() + payload, 7);
  return b;
}

TEST(DataLimits, GzipTrailerSizeIsNotTrusted) {
  // ISIZE (the trailer's last 4 bytes) claims 4 GiB - 1: the reader must not size anything from
  // it; zlib's length check reports the damage once the real content has been decoded.
  Bytes gz = gzip(make_images(5));
  for (size_t i = gz.size() - 4; i < gz.size(); ++i) gz[i] = 0xff;
  expect_damaged(kImg, gz, {"corrupt gzip stream", "incorrect length check"});
}

TEST(DataLimits, HeaderClaimingMoreThanTheFileIsTruncated) {
  // INT_MAX images would be 1.7 TB: reported as truncated after reading the 100 bytes present.
  expect_damaged(kImg, images_header(INT_MAX, 100),
                 {"truncated payload", "2147483647 images of 28x28", "actual 100"}, false);
  expect_damaged(kImg, gzip(images_header(INT_MAX, 100)), {"truncated payload", "actual 100"});
  Bytes lbl = make_labels(0);
  lbl[4] = 0x7f;  // 0x7f000000 labels, none present
  expect_damaged(kLbl, gzip(lbl), {"truncated payload", "2130706432 labels", "actual 0"});
}

TEST(DataLimits, LongTrailingDataIsCountedUpToALimit) {
  Bytes img = make_images(5);
  img.resize(img.size() + (3 << 20), 0);
  expect_damaged(kImg, gzip(img), {"trailing data: more than 1048576 extra bytes"});
}

TEST(DataLimits, NotARegularFileIsRefused) {
  TempDir dir;
  write_dataset(dir, 5, 3, false);
  const std::string fifo = dir.file(kImg);
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);  // opening must not wait for a writer
  expect_error([&] { dpb::load_fashion_mnist(dir.str()); },
               {fifo, "is a FIFO (named pipe), expected a regular file"});
  std::remove(fifo.c_str());
  const std::string dev = dir.file(kLbl);
  std::remove(dev.c_str());
  write_file(fifo, make_images(5));
  fs::create_symlink("/dev/zero", dev);  // followed: the target is what is read
  expect_error([&] { dpb::load_fashion_mnist(dir.str()); },
               {dev, "is a character device, expected a regular file"});
}

TEST(DataLimits, ChunkBoundariesAndMembers) {
  // 2,000 images (1.5 MiB) cross the reader's 256 KiB input chunks raw and gzip, in one member
  // and in three; every form decodes to the same payload.
  TempDir dir;
  const Bytes raw = make_images(2000);
  const Bytes payload(raw.begin() + 16, raw.end());
  Bytes three = gzip(Bytes(raw.begin(), raw.begin() + 5));
  for (const auto& part : {Bytes(raw.begin() + 5, raw.begin() + 700001),
                           Bytes(raw.begin() + 700001, raw.end())}) {
    const Bytes gz = gzip(part);
    three.insert(three.end(), gz.begin(), gz.end());
  }
  write_file(dir.file("raw"), raw);
  write_file(dir.file("one.gz"), gzip(raw));
  write_file(dir.file("three.gz"), three);
  for (const char* name : {"raw", "one.gz", "three.gz"}) {
    const dpb::IdxImages im = dpb::read_idx_images(dir.file(name));
    EXPECT_EQ(im.n, 2000) << name;
    EXPECT_EQ(im.pixels, payload) << name;
  }
}

TEST(DataLimits, MemoryAndFileStreamsAgree) {
  const Bytes gz = gzip(make_labels(40));
  dpb::ByteStream in(gz, "in-memory labels");
  EXPECT_TRUE(in.gzip());
  const Bytes lbl = make_labels(40);
  EXPECT_EQ(dpb::parse_idx_labels(in), Bytes(lbl.begin() + 8, lbl.end()));
  const Bytes bad = {1, 2, 3};
  dpb::ByteStream short_in(bad, "three bytes");
  expect_error([&] { dpb::parse_idx_labels(short_in); },
               {"three bytes", "too short for an IDX header (3 bytes)"});
}

TEST(DataLimits, FileBytesBound) {
  TempDir dir;
  write_file(dir.file("l.gz"), gzip(make_labels(3000)));
  EXPECT_EQ(dpb::read_file_bytes(dir.file("l.gz"), 3008).size(), 3008u);
  expect_error([&] { dpb::read_file_bytes(dir.file("l.gz"), 3007); },
               {dir.file("l.gz"), "more than 3007 bytes"});
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // their shadow memory does not fit under RLIMIT_AS
#else
constexpr bool kSanitized = false;
#endif

// In a child: reads `path` with 16 MiB of address space to spare; exits 1 printing the error.
[[noreturn]] void read_with_little_memory(const std::string& path) {
  long pages = 0;
  std::ifstream("/proc/self/statm") >> pages;
  const rlim_t room = rlim_t(pages) * rlim_t(sysconf(_SC_PAGESIZE)) + (rlim_t(16) << 20);
  const rlimit lim{room, room};
  setrlimit(RLIMIT_AS, &lim);
  try {
    dpb::read_idx_images(path);
  } catch (const dpb::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(1);
  }
  std::exit(0);
}

TEST(DataLimitsDeathTest, AllocationFailureNamesTheFile) {
  if (kSanitized) GTEST_SKIP() << "an address-space limit does not work under sanitizers";
  TempDir dir;
  const std::string path = dir.file("big.gz");
  write_file(path, gzip(images_header(60000, 60000 * 784)));  // 47 MB of content, 46 KB stored
  EXPECT_EXIT(read_with_little_memory(path), ::testing::ExitedWithCode(1), "out of memory: .*big.gz: after");
}

}  // namespace
