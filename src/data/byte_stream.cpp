// byte_stream.cpp: file or memory input in chunks, zlib inflate on the fly (see byte_stream.h).
#include "src/data/byte_stream.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "src/core/check.h"

namespace dpb {
namespace {

constexpr size_t kFileChunk = size_t(256) << 10;  // stored bytes per read() from a file
constexpr size_t kMaxZ = size_t(1) << 30;         // zlib's avail_in / avail_out are 32-bit

const char* file_type_name(mode_t m) {
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

struct ByteStream::Impl {
  int fd = -1;                    // file input, or -1: memory input
  std::span<const uint8_t> mem;   // memory input
  uint64_t stored_size = 0;       // as stored (for a file: its size when opened)
  uint64_t consumed = 0;          // stored bytes moved into the window so far
  std::vector<uint8_t> buf;       // file input chunk
  const uint8_t* win = nullptr;   // stored bytes not yet used (raw input)
  size_t win_len = 0;
  bool gz = false, at_end = false;
  z_stream zs{};
  bool zs_live = false;

  ~Impl() {
    if (zs_live) inflateEnd(&zs);
    if (fd >= 0) ::close(fd);
  }

  // Moves the next stored bytes into the window; false at the end of the input.
  bool refill(const std::string& name) {
    size_t len = 0;
    if (fd < 0) {
      if (consumed >= mem.size()) return false;
      win = mem.data() + consumed;
      len = std::min<size_t>(mem.size() - consumed, kMaxZ);
    } else {
      while (len < buf.size()) {
        const ssize_t r = ::read(fd, buf.data() + len, buf.size() - len);
        if (r < 0 && errno == EINTR) continue;
        DPB_CHECK(r >= 0, name << ": read error: " << std::strerror(errno));
        if (r == 0) break;
        len += size_t(r);
      }
      if (len == 0) return false;
      win = buf.data();
    }
    consumed += len;
    win_len = len;
    return true;
  }

  void start(const std::string& name) {
    DPB_CHECK(refill(name), name << ": file is empty (0 bytes)");
    gz = win_len >= 2 && win[0] == 0x1f && win[1] == 0x8b;
    if (!gz) return;
    // 15 + 16: a 32 KiB window, gzip framing only
    DPB_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK, name << ": zlib inflateInit2 failed");
    zs_live = true;
    feed();
  }

  void feed() {  // window -> zlib input
    zs.next_in = const_cast<Bytef*>(win);
    zs.avail_in = uInt(win_len);
    win_len = 0;
  }

  uint64_t stored_pos() const { return consumed - win_len - (gz ? zs.avail_in : 0); }

  size_t read_raw(uint8_t* dst, size_t n, const std::string& name) {
    size_t got = 0;
    while (got < n) {
      if (win_len == 0 && !refill(name)) break;
      const size_t c = std::min(n - got, win_len);
      std::memcpy(dst + got, win, c);
      win += c;
      win_len -= c;
      got += c;
    }
    return got;
  }

  // A member ended: the input must end here or hold another gzip member.
  void next_member(const std::string& name) {
    const uint64_t pos = stored_pos();
    if (zs.avail_in == 0) {
      if (!refill(name)) {
        at_end = true;
        return;
      }
      feed();
    }
    const bool magic = zs.next_in[0] == 0x1f && (zs.avail_in < 2 || zs.next_in[1] == 0x8b);
    DPB_CHECK(magic, name << ": trailing bytes after the gzip stream ("
                          << std::max(stored_size, consumed) - pos << " bytes at offset " << pos
                          << ")");
    inflateReset(&zs);
  }

  size_t read_gzip(uint8_t* dst, size_t n, const std::string& name) {
    size_t got = 0;
    while (got < n && !at_end) {
      if (zs.avail_in == 0) {
        DPB_CHECK(refill(name), name << ": corrupt gzip stream: truncated (input ended after "
                                     << consumed << " compressed bytes, before the end of the "
                                     << "stream)");
        feed();
      }
      zs.next_out = dst + got;
      zs.avail_out = uInt(std::min(n - got, kMaxZ));
      const uInt before = zs.avail_out;
      const int rc = inflate(&zs, Z_NO_FLUSH);
      got += before - zs.avail_out;
      if (rc == Z_OK || (rc == Z_BUF_ERROR && zs.avail_in == 0)) continue;
      if (rc == Z_STREAM_END) {
        next_member(name);
        continue;
      }
      DPB_CHECK(false, name << ": corrupt gzip stream: " << (zs.msg ? zs.msg : "inflate error")
                            << " (zlib code " << rc << ", near compressed byte " << stored_pos()
                            << ")");
    }
    return got;
  }
};

ByteStream::ByteStream(const std::string& path) : name_(path), impl_(std::make_unique<Impl>()) {
  // O_NONBLOCK so that opening a FIFO does not wait for a writer before it can be refused.
  impl_->fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (impl_->fd < 0) {
    const int err = errno;
    DPB_CHECK(err != ENOENT, path << ": file does not exist");
    DPB_CHECK(false, path << ": cannot open file for reading: " << std::strerror(err));
  }
  struct stat st {};
  DPB_CHECK(::fstat(impl_->fd, &st) == 0, path << ": cannot stat file: " << std::strerror(errno));
  DPB_CHECK(!S_ISDIR(st.st_mode), path << ": is a directory, expected a file");
  DPB_CHECK(S_ISREG(st.st_mode), path << ": is " << file_type_name(st.st_mode)
                                      << ", expected a regular file");
  ::fcntl(impl_->fd, F_SETFL, ::fcntl(impl_->fd, F_GETFL) & ~O_NONBLOCK);
  impl_->stored_size = uint64_t(st.st_size);
  impl_->buf.resize(kFileChunk);
  impl_->start(name_);
}

ByteStream::ByteStream(std::span<const uint8_t> stored, std::string name)
    : name_(std::move(name)), impl_(std::make_unique<Impl>()) {
  impl_->mem = stored;
  impl_->stored_size = stored.size();
  impl_->start(name_);
}

ByteStream::~ByteStream() = default;

bool ByteStream::gzip() const { return impl_->gz; }

size_t ByteStream::read(uint8_t* dst, size_t n) {
  return impl_->gz ? impl_->read_gzip(dst, n, name_) : impl_->read_raw(dst, n, name_);
}

uint64_t ByteStream::skip(uint64_t limit) {
  std::vector<uint8_t> scratch(std::min<uint64_t>(limit, 64 << 10));
  uint64_t n = 0;
  while (n < limit) {
    const size_t want = size_t(std::min<uint64_t>(scratch.size(), limit - n));
    const size_t got = read(scratch.data(), want);
    n += got;
    if (got < want) break;
  }
  return n;
}

uint64_t ByteStream::max_remaining() const {
  const Impl& s = *impl_;
  const uint64_t stored_left = std::max(s.stored_size, s.consumed) - s.stored_pos();
  // Deflate expands at most 1032:1; the slack covers a match zlib holds between calls.
  return s.gz ? stored_left * 1032 + (64 << 10) : stored_left;
}

}  // namespace dpb
