// idx_fuzz.cpp: the fuzzing entry point for the IDX reader (src/data/idx.h, byte_stream.h). The
// input is a data file's stored bytes (gzip or raw); it is read as an images file and as a labels
// file. A dpb::Error is the expected outcome for damaged input; a crash, a sanitizer report, an
// allocation beyond the fuzzer's limit (-malloc_limit_mb) or any other exception is a finding.
//   libFuzzer (clang):  fuzz/CMakeLists.txt, run by scripts/sanitize.sh fuzz
//   without libFuzzer:  dpb_fuzz_replay FILE|DIR... (fuzz/replay_main.cpp; ctest runs the corpus)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "src/core/check.h"
#include "src/data/byte_stream.h"
#include "src/data/idx.h"

namespace {

// A broken invariant in an accepted file: report and abort, so the fuzzer keeps the input.
void require(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "idx_fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> stored(data, size);
  try {
    dpb::ByteStream in(stored, "fuzz-images");
    const dpb::IdxImages im = dpb::parse_idx_images(in);
    require(im.rows == 28 && im.cols == 28 && im.n >= 0, "accepted dimensions differ from 28x28");
    require(im.pixels.size() == size_t(im.n) * 784, "payload size differs from the header's");
  } catch (const dpb::Error&) {  // damaged input, reported with its name: the expected outcome
  }
  try {
    dpb::ByteStream in(stored, "fuzz-labels");
    for (uint8_t v : dpb::parse_idx_labels(in)) require(v < 10, "a label >= 10 was accepted");
  } catch (const dpb::Error&) {
  }
  return 0;
}
