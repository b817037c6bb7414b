// check.h: error type and checking macros shared by every backend.
// Errors are exceptions carrying file:line and a message that names the input or call that failed;
// the CLI catches them, prints the message and exits non-zero. No exit() deep in helpers.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace dpb {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail_at(const char* file, int line, const std::string& msg) {
  std::ostringstream os;
  os << msg << " [" << file << ":" << line << "]";
  throw Error(os.str());
}

}  // namespace dpb

// DPB_CHECK(cond, "message " << value): throws dpb::Error with the streamed message.
#define DPB_CHECK(cond, msg)                               \
  do {                                                     \
    if (!(cond)) {                                         \
      std::ostringstream dpb_os_;                          \
      dpb_os_ << msg;                                      \
      ::dpb::fail_at(__FILE__, __LINE__, dpb_os_.str());   \
    }                                                      \
  } while (0)
