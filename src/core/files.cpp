// files.cpp: atomic result files (see files.h).
#include "src/core/files.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "src/core/check.h"

namespace dpb {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    DPB_CHECK(out, "cannot write '" << tmp << "': " << std::strerror(errno));
    out.write(contents.data(), std::streamsize(contents.size()));
    out.flush();
    DPB_CHECK(out, "writing '" << tmp << "' failed: " << std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    DPB_CHECK(false, "cannot rename '" << tmp << "' to '" << path << "': " << std::strerror(err));
  }
}

void append_csv_rows(const std::string& path, const std::string& header,
                     const std::vector<std::string>& rows) {
  std::string text = read_file(path);
  if (text.empty()) {
    text = header + "\n";
  } else {
    std::string existing = text.substr(0, text.find('\n'));
    DPB_CHECK(existing == header, "--csv '" << path << "': the file has a different header; "
                                            << "write to a new file (expected: " << header << ")");
    if (text.back() != '\n') text += '\n';
  }
  for (const auto& r : rows) text += r + "\n";
  write_file_atomic(path, text);
}

}  // namespace dpb
