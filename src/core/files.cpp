// files.cpp: atomic result files and output-path checks (see files.h).
#include "src/core/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "src/core/check.h"

namespace dpb {
namespace {

// The path the user gave and, when it is a symbolic link (or a chain of them), the file it names.
struct Resolved {
  std::string given, target;
  std::string shown() const {
    return target == given ? "'" + given + "'" : "'" + given + "' (a link to '" + target + "')";
  }
};

std::string parent_dir(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : p.substr(0, slash);
}

Resolved follow_links(const std::string& given) {
  Resolved r{given, given};
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(r.target.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return r;
    DPB_CHECK(hops < 40, "cannot write '" << given << "': too many levels of symbolic links");
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(r.target.c_str(), buf, sizeof buf);
    DPB_CHECK(n > 0 && size_t(n) < sizeof buf, "cannot write '" << given << "': cannot read the "
                                                  << "symbolic link '" << r.target << "'");
    const std::string to(buf, size_t(n));
    r.target = to[0] == '/' ? to : parent_dir(r.target) + "/" + to;
  }
}

// Everything that can be checked without writing; returns the file to replace.
Resolved resolve_output(const std::string& given) {
  DPB_CHECK(!given.empty(), "output file name is empty");
  const Resolved r = follow_links(given);
  struct stat st {};
  if (::stat(r.target.c_str(), &st) == 0) {
    DPB_CHECK(!S_ISDIR(st.st_mode), "cannot write " << r.shown() << ": it is a directory; give a "
                                                    << "file name");
    DPB_CHECK(S_ISREG(st.st_mode), "cannot write " << r.shown() << ": not a regular file (results "
                                                   << "are written to a temporary file and "
                                                   << "renamed over it)");
    DPB_CHECK((st.st_mode & 0222) != 0 && ::access(r.target.c_str(), W_OK) == 0,
              "cannot write " << r.shown() << ": the file is read-only; make it writable "
                              << "(chmod u+w) or choose another file");
    return r;
  }
  const int err = errno;
  DPB_CHECK(err == ENOENT || err == ENOTDIR,
            "cannot write " << r.shown() << ": " << std::strerror(err));
  const std::string dir = parent_dir(r.target);
  if (::stat(dir.c_str(), &st) != 0) {
    const int derr = errno;
    DPB_CHECK(derr != ENOENT, "cannot write " << r.shown() << ": directory '" << dir
                                              << "' does not exist");
    DPB_CHECK(false, "cannot write " << r.shown() << ": directory '" << dir << "': "
                                     << std::strerror(derr));
  }
  DPB_CHECK(S_ISDIR(st.st_mode), "cannot write " << r.shown() << ": '" << dir
                                                 << "' is not a directory");
  return r;
}

// Writes what fill puts to a temporary file beside r.target, then renames it over r.target.
void replace_file(const Resolved& r, const std::function<void(const FilePieceSink&)>& fill) {
  const std::string tmp = r.target + ".tmp." + std::to_string(::getpid());
  struct stat old {};
  const bool existed = ::stat(r.target.c_str(), &old) == 0;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  DPB_CHECK(fd >= 0, "cannot write " << r.shown() << ": cannot create the temporary file '" << tmp
                                     << "' beside it: " << std::strerror(errno));
  if (existed) (void)::fchmod(fd, old.st_mode & 07777);  // keep the permissions; best effort
  int err = 0;
  const FilePieceSink put = [&](std::string_view piece) {
    for (size_t done = 0; done < piece.size() && err == 0;) {
      const ssize_t n = ::write(fd, piece.data() + done, piece.size() - done);
      if (n > 0) done += size_t(n);
      else if (n < 0 && errno == EINTR) continue;
      else err = n < 0 ? errno : EIO;
    }
  };
  try {
    fill(put);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), r.target.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    DPB_CHECK(false, "cannot write " << r.shown() << ": " << std::strerror(err));
  }
}

void replace_file(const Resolved& r, const std::string& contents) {
  replace_file(r, [&](const FilePieceSink& put) { put(contents); });
}

// The CSV text with the expected header, ready for more rows (ends with '\n').
std::string csv_base(const std::string& text, const std::string& path, const std::string& header) {
  if (text.empty()) return header + "\n";
  DPB_CHECK(text.substr(0, text.find('\n')) == header,
            "cannot append to '" << path << "': its header differs from this run's columns; "
                                 << "write to a new file (expected: " << header << ")");
  return text.back() == '\n' ? text : text + "\n";
}

// An exclusive flock on the file that r.target names, held while the file is read, extended and
// renamed over: a concurrent appender (another run given the same --csv) waits, then sees the new
// file. The rename replaces the inode, so a waiter that wakes on the old one opens the path again.
class TargetLock {
 public:
  explicit TargetLock(const Resolved& r) {
    for (;;) {
      created_ = false;
      fd_ = ::open(r.target.c_str(), O_RDWR | O_CLOEXEC);
      if (fd_ < 0 && errno == ENOENT) {
        fd_ = ::open(r.target.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        created_ = fd_ >= 0;
        if (fd_ < 0 && errno == EEXIST) continue;  // another appender created it first
      }
      DPB_CHECK(fd_ >= 0, "cannot write " << r.shown() << ": " << std::strerror(errno));
      int rc;
      while ((rc = ::flock(fd_, LOCK_EX)) != 0 && errno == EINTR) {}
      const int err = errno;
      struct stat held {}, now {};
      if (rc == 0 && ::fstat(fd_, &held) == 0 && ::stat(r.target.c_str(), &now) == 0 &&
          held.st_dev == now.st_dev && held.st_ino == now.st_ino)
        return;  // locked, and still the file at the path
      ::close(fd_);
      DPB_CHECK(rc == 0, "cannot lock " << r.shown() << " for appending: " << std::strerror(err));
    }
  }
  // An appender that created the file and then failed leaves no empty file behind.
  void release_created_if_empty(const Resolved& r) {
    struct stat st {};
    if (created_ && ::fstat(fd_, &st) == 0 && st.st_size == 0) ::unlink(r.target.c_str());
  }
  ~TargetLock() { ::close(fd_); }  // releases the lock
  TargetLock(const TargetLock&) = delete;
  TargetLock& operator=(const TargetLock&) = delete;

 private:
  int fd_ = -1;
  bool created_ = false;
};

// What makes two output paths one file: the inode of an existing file (links, "./", hard links
// seen through), else the canonical path it would be created at.
struct FileIdentity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string path;
  bool operator==(const FileIdentity& o) const {
    return exists == o.exists && (exists ? dev == o.dev && ino == o.ino : path == o.path);
  }
};

FileIdentity identity_of(const std::string& given) {
  FileIdentity id;
  const std::string target = follow_links(given).target;
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
    return id;
  }
  std::error_code ec;
  std::filesystem::path p = std::filesystem::weakly_canonical(target, ec);  // absolute, links resolved
  if (ec) p = std::filesystem::path(target);
  id.path = p.lexically_normal().string();
  return id;
}

}  // namespace

void check_output_path(const std::string& path) {
  const Resolved r = resolve_output(path);
  // The rename needs a temporary file beside the target: make sure one can be created, now.
  const std::string probe = r.target + ".probe." + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  DPB_CHECK(fd >= 0, "cannot write " << r.shown() << ": cannot create files in '"
                                     << parent_dir(r.target) << "': " << std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  replace_file(resolve_output(path), contents);
}

void write_file_atomic(const std::string& path,
                       const std::function<void(const FilePieceSink&)>& fill) {
  replace_file(resolve_output(path), fill);
}

std::string read_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 && errno == ENOENT) return "";
  std::ifstream in(path, std::ios::binary);
  DPB_CHECK(in, "cannot read '" << path << "': " << std::strerror(errno));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

CsvAppender::CsvAppender(std::string path, std::string header)
    : path_(std::move(path)), header_(std::move(header)) {
  check_output_path(path_);
  csv_base(read_file(follow_links(path_).target), path_, header_);
}

void CsvAppender::append(const std::vector<std::string>& rows) {
  const Resolved r = resolve_output(path_);
  TargetLock lock(r);  // from reading the rows there to the rename: no appender's rows are lost
  try {
    std::string text = csv_base(read_file(r.target), path_, header_);
    for (const auto& row : rows) text += row + "\n";
    replace_file(r, text);
  } catch (...) {
    lock.release_created_if_empty(r);
    throw;
  }
}

void append_csv_rows(const std::string& path, const std::string& header,
                     const std::vector<std::string>& rows) {
  CsvAppender(path, header).append(rows);
}

void check_distinct_outputs(const std::vector<std::pair<std::string, std::string>>& option_path) {
  std::vector<FileIdentity> ids;
  for (const auto& [option, path] : option_path) ids.push_back(path.empty() ? FileIdentity{} : identity_of(path));
  for (size_t i = 0; i < option_path.size(); ++i)
    for (size_t j = 0; j < i; ++j) {
      const auto& [a, pa] = option_path[j];
      const auto& [b, pb] = option_path[i];
      if (pa.empty() || pb.empty() || !(ids[i] == ids[j])) continue;
      DPB_CHECK(false, a << " and " << b << " name the same file ("
                         << (pa == pb ? "'" + pa + "'" : "'" + pa + "' and '" + pb + "'")
                         << "): one would overwrite the other; give each its own file");
    }
}

namespace {

// The path the termination handler removes: a fixed buffer, as a handler may only unlink(2).
char term_tmp[PATH_MAX];

void on_termination_signal(int sig) {
  if (term_tmp[0]) unlink(term_tmp);
  signal(sig, SIG_DFL);  // then end as the signal would have (exit status 128 + sig)
  raise(sig);
}

}  // namespace

void remove_on_termination_signal(const std::string& tmp_path) {
  DPB_CHECK(tmp_path.size() < sizeof term_tmp, "temporary path too long: " << tmp_path);
  // The first byte last: a handler running meanwhile sees "" (nothing to remove), never a mix.
  term_tmp[0] = '\0';
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (tmp_path.empty()) return;
  std::memcpy(term_tmp + 1, tmp_path.c_str() + 1, tmp_path.size());
  std::atomic_signal_fence(std::memory_order_seq_cst);
  term_tmp[0] = tmp_path[0];
  struct sigaction sa {};
  sa.sa_handler = on_termination_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction old {};
    // A signal the parent set to be ignored (nohup) stays ignored.
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &sa, nullptr);
  }
}

int remove_stale_temps(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const std::string prefix = p.filename().string() + ".tmp.";
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos)
      continue;
    if (kill(pid_t(std::stol(pid)), 0) == 0 || errno != ESRCH) continue;  // alive, or not ours
    std::error_code rm;
    if (fs::remove(e.path(), rm)) ++removed;
  }
  return removed;
}

}  // namespace dpb
