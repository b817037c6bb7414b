// memory.cpp: the memory ledger (see memory.h).
#include "src/core/memory.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>
#include <exception>
#include <new>

namespace dpb {

const char* mem_category_name(MemCategory c) {
  switch (c) {
    case MemCategory::Parameters: return "parameters";
    case MemCategory::Gradients: return "gradients";
    case MemCategory::OptimizerState: return "optimizer_state";
    case MemCategory::Activations: return "activations";
    case MemCategory::Temporaries: return "temporaries";
    case MemCategory::Workspace: return "workspace";
    case MemCategory::Comm: return "comm";
    case MemCategory::Data: return "data";
  }
  return "?";
}

size_t MemoryUsage::total() const {
  size_t t = 0;
  for (size_t b : bytes) t += b;
  return t;
}

std::string MemoryUsage::breakdown() const {
  std::string s;
  for (MemCategory c : kMemCategoryList)
    if ((*this)[c]) s += (s.empty() ? "" : ", ") + std::string(mem_category_name(c)) + " " +
                         format_mem_bytes((*this)[c]);
  return s.empty() ? "nothing" : s;
}

std::string format_mem_bytes(size_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  if (u == 0) std::snprintf(buf, sizeof buf, "%zu B", bytes);
  else std::snprintf(buf, sizeof buf, "%.3g %s", v, units[u]);
  return buf;
}

bool parse_bytes(const std::string& text, size_t& out) {
  const char* s = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(s, &end);
  if (end == s || errno != 0 || !std::isfinite(x) || x <= 0) return false;
  std::string unit(end);
  for (char& ch : unit) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  static const struct {
    const char* name;
    double scale;
  } units[] = {{"", 1},      {"b", 1},          {"kb", 1e3},       {"mb", 1e6},
               {"gb", 1e9},  {"tb", 1e12},      {"kib", 1024.0},   {"mib", 1048576.0},
               {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  for (const auto& u : units)
    if (unit == u.name) {
      const double b = std::floor(x * u.scale);
      if (b < 1 || b > 4.6e18) return false;
      out = size_t(b);
      return true;
    }
  return false;
}

void MemoryLedger::set_device(const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  device_ = name;
}

void MemoryLedger::set_capacity(size_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  capacity_ = bytes;
}

size_t MemoryLedger::capacity() const {
  std::lock_guard<std::mutex> lk(mu_);
  return capacity_;
}

void MemoryLedger::throw_oom(size_t bytes, MemCategory c, const char* what,
                             const std::string& cause) const {
  std::ostringstream os;
  os << "out of memory on " << (device_.empty() ? "a device" : device_) << ": allocating "
     << (what ? what : "?") << " (" << mem_category_name(c) << ", " << format_mem_bytes(bytes) << ", "
     << bytes << " bytes) with " << format_mem_bytes(cur_total_) << " in use ("
     << cur_.breakdown() << ")";
  if (capacity_) os << " of a capacity of " << format_mem_bytes(capacity_) << " (" << capacity_ << " bytes)";
  if (!cause.empty()) os << ": " << cause;
  throw OutOfMemory(os.str(), bytes, capacity_);
}

void MemoryLedger::reserve(size_t bytes, MemCategory c, const char* what) {
  std::lock_guard<std::mutex> lk(mu_);
  if (capacity_ && (bytes > capacity_ || cur_total_ > capacity_ - bytes))
    throw_oom(bytes, c, what, "");
  cur_[c] += bytes;
  cur_total_ += bytes;
  if (cur_total_ > peak_total_) peak_total_ = cur_total_, peak_ = cur_;
}

void MemoryLedger::unreserve(size_t bytes, MemCategory c) {
  std::lock_guard<std::mutex> lk(mu_);
  // Never below zero: a bug in a caller must not wrap the counts around.
  const size_t b = bytes < cur_[c] ? bytes : cur_[c];
  cur_[c] -= b;
  cur_total_ -= b;
}

void MemoryLedger::track(const void* p, size_t bytes, MemCategory c) {
  std::lock_guard<std::mutex> lk(mu_);
  live_[p] = Entry{bytes, c};
}

bool MemoryLedger::release(const void* p) {
  Entry e{};
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = live_.find(p);
    if (it == live_.end()) return false;
    e = it->second;
    live_.erase(it);
  }
  unreserve(e.bytes, e.cat);
  return true;
}

void MemoryLedger::fail(size_t bytes, MemCategory c, const char* what, const std::string& cause) {
  unreserve(bytes, c);
  std::lock_guard<std::mutex> lk(mu_);
  throw_oom(bytes, c, what, cause);
}

MemoryUsage MemoryLedger::current() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cur_;
}

MemoryUsage MemoryLedger::peak() const {
  std::lock_guard<std::mutex> lk(mu_);
  return peak_;
}

size_t MemoryLedger::tracked() const {
  std::lock_guard<std::mutex> lk(mu_);
  return live_.size();
}

size_t address_space_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 0;
  return size_t(r.rlim_cur);
}

std::string address_limit_note() {
  const size_t lim = address_space_limit();
  if (!lim) return "";
  return "; the process's address space is limited to " + format_mem_bytes(lim) + " (ulimit -v " +
         std::to_string(lim / 1024) + ")";
}

namespace {

// The crash message, written before any crash: a signal handler may only write(2) and _exit(2).
// Process-wide by nature (signal dispositions are), set once by the function below.
char crash_text[640];
size_t crash_len = 0;

void write_crash(const char* what) {
  ssize_t ignored = write(STDERR_FILENO, crash_text, crash_len);
  ignored = write(STDERR_FILENO, what, std::strlen(what));
  ignored = write(STDERR_FILENO, "\n", 1);
  (void)ignored;
}

void on_crash_signal(int sig) {
  write_crash(sig == SIGSEGV ? "SIGSEGV" : sig == SIGBUS ? "SIGBUS" : "SIGABRT");
  _exit(3);
}

void on_terminate() {
  bool bad_alloc = false;
  if (std::exception_ptr e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::bad_alloc&) {
      bad_alloc = true;
    } catch (...) {
    }
  }
  write_crash(bad_alloc ? "std::bad_alloc outside dpbench's checks" : "std::terminate");
  _exit(3);
}

}  // namespace

void exit_3_on_crash_under_address_limit(const char* prog) {
  const size_t lim = address_space_limit();
  if (!lim) return;
  mallopt(M_ARENA_MAX, 2);
  std::snprintf(crash_text, sizeof crash_text,
                "%s: out of memory (probably): a library that does not check every allocation "
                "(oneDNN, OpenMP, the C++ runtime) crashed under the address-space limit of %s "
                "(ulimit -v %zu); raise the limit, or lower --batch, --devices or --threads. "
                "Crash: ",
                prog, format_mem_bytes(lim).c_str(), lim / 1024);
  crash_len = std::strlen(crash_text);
  // An alternate stack for this thread's handler, so a crash in a full stack still reports.
  static char alt[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_crash_signal;
  sa.sa_flags = SA_ONSTACK | SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT}) sigaction(sig, &sa, nullptr);
  std::set_terminate(on_terminate);
}

}  // namespace dpb
