// byte_stream.h: a data file's content as a stream, inflated on the fly when it is gzip.
//
// The IDX reader (idx.h) pulls the header first and then exactly the payload the header describes,
// so memory follows what the file really holds, never a size field a damaged file could set (the
// gzip trailer's ISIZE is not used). Input is a regular file (a FIFO, a device or a socket is
// refused: it could be endless) or bytes in memory (tests, the fuzzer). Content starting with the
// gzip magic (1f 8b) is inflated; concatenated members are decoded in turn, as gunzip does; other
// bytes after the last member are an error. Every error is a dpb::Error naming the input.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace dpb {

class ByteStream {
 public:
  // Opens `path`. Throws when it is missing, not a regular file, unreadable or empty.
  explicit ByteStream(const std::string& path);
  // Reads `stored` (not copied: it must outlive the stream); `name` is used in messages.
  ByteStream(std::span<const uint8_t> stored, std::string name);
  ~ByteStream();
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  // Fills dst[0, n) unless the content ends first; returns the count (< n only at the end).
  size_t read(uint8_t* dst, size_t n);
  // Reads and discards the rest of the content, counting at most `limit` bytes (then stops).
  uint64_t skip(uint64_t limit);
  // An upper bound on the content bytes left (exact for raw input; 1032:1, deflate's maximum
  // ratio, for gzip). Lets a reader size its first allocation without trusting a header.
  uint64_t max_remaining() const;

  const std::string& name() const { return name_; }
  bool gzip() const;

 private:
  struct Impl;
  std::string name_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dpb
