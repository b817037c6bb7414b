// files.cpp: atomic result files and output-path checks (see files.h).
#include "src/core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
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

// Writes `contents` to a temporary file beside r.target, then renames it over r.target.
void replace_file(const Resolved& r, const std::string& contents) {
  const std::string tmp = r.target + ".tmp." + std::to_string(::getpid());
  struct stat old {};
  const bool existed = ::stat(r.target.c_str(), &old) == 0;
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  DPB_CHECK(fd >= 0, "cannot write " << r.shown() << ": cannot create the temporary file '" << tmp
                                     << "' beside it: " << std::strerror(errno));
  if (existed) (void)::fchmod(fd, old.st_mode & 07777);  // keep the permissions; best effort
  int err = 0;
  for (size_t done = 0; done < contents.size() && err == 0;) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n > 0) done += size_t(n);
    else if (n < 0 && errno == EINTR) continue;
    else err = n < 0 ? errno : EIO;
  }
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0 && ::rename(tmp.c_str(), r.target.c_str()) != 0) err = errno;
  if (err != 0) {
    ::unlink(tmp.c_str());
    DPB_CHECK(false, "cannot write " << r.shown() << ": " << std::strerror(err));
  }
}

// The CSV text with the expected header, ready for more rows (ends with '\n').
std::string csv_base(const std::string& text, const std::string& path, const std::string& header) {
  if (text.empty()) return header + "\n";
  DPB_CHECK(text.substr(0, text.find('\n')) == header,
            "cannot append to '" << path << "': its header differs from this run's columns; "
                                 << "write to a new file (expected: " << header << ")");
  return text.back() == '\n' ? text : text + "\n";
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
  std::string text = csv_base(read_file(r.target), path_, header_);
  for (const auto& row : rows) text += row + "\n";
  replace_file(r, text);
}

void append_csv_rows(const std::string& path, const std::string& header,
                     const std::vector<std::string>& rows) {
  CsvAppender(path, header).append(rows);
}

}  // namespace dpb
