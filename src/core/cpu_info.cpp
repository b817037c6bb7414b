// cpu_info.cpp: the CPU model name, load samples, rank placement and OpenMP's wait policy (see
// cpu_info.h). Tested by tests/test_core_helpers.cpp and tests/test_cpu_load.cpp.
#include "src/core/cpu_info.h"

#include <dirent.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "src/core/check.h"

namespace dpb {

std::string cpu_model_name(std::istream& cpuinfo) {
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t a = line.find_first_not_of(" \t", colon + 1);
    const size_t b = line.find_last_not_of(" \t\r");
    if (a != std::string::npos && b >= a) return line.substr(a, b - a + 1);
  }
  return "unknown";
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  return cpu_model_name(in);
}

// ---------------------------------------------------------------- load

bool parse_loadavg(std::istream& in, double& load1) {
  double v = 0;
  if (!(in >> v) || v < 0) return false;
  load1 = v;
  return true;
}

bool parse_stat_cpu(std::istream& in, int64_t& steal, int64_t& total) {
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("cpu ", 0) != 0) continue;
    std::istringstream f(line.substr(4));
    int64_t v = 0, sum = 0, st = 0;
    int n = 0;
    // user nice system idle iowait irq softirq steal guest guest_nice; guest time is already
    // counted in user and nice, so the total stops at steal.
    while (n < 8 && f >> v) {
      sum += v;
      if (n == 7) st = v;
      ++n;
    }
    if (n < 8) return false;  // a kernel without steal accounting
    steal = st, total = sum;
    return true;
  }
  return false;
}

bool parse_pressure_some(std::istream& in, double& total_us) {
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("some ", 0) != 0) continue;
    const size_t p = line.find("total=");
    if (p == std::string::npos) return false;
    char* end = nullptr;
    const double v = std::strtod(line.c_str() + p + 6, &end);
    if (end == line.c_str() + p + 6) return false;
    total_us = v;
    return true;
  }
  return false;
}

char parse_task_state(const std::string& stat_line) {
  const size_t p = stat_line.rfind(')');
  if (p == std::string::npos || p + 2 >= stat_line.size()) return '?';
  return stat_line[p + 2];
}

namespace {

bool all_digits(const char* s) {
  if (!*s) return false;
  for (; *s; ++s)
    if (*s < '0' || *s > '9') return false;
  return true;
}

// The parent pid in a /proc/PID/stat line (the field after the state), -1 if unreadable.
long parse_stat_ppid(const std::string& stat_line) {
  const size_t p = stat_line.rfind(')');
  if (p == std::string::npos || p + 4 >= stat_line.size()) return -1;
  return std::strtol(stat_line.c_str() + p + 4, nullptr, 10);
}

std::string exe_of(const std::string& pid) {
  char buf[4096];
  const ssize_t n = readlink(("/proc/" + pid + "/exe").c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// The same job's other ranks: processes of this binary with this process's parent (mpirun's or
// srun's daemon starts every rank of a node), so processes under mpirun are not called busy.
bool sibling_rank(const std::string& pid, const std::string& stat_line, const std::string& my_exe) {
  const long ppid = parse_stat_ppid(stat_line);
  return ppid > 1 && ppid == long(getppid()) && !my_exe.empty() && exe_of(pid) == my_exe;
}

// Runnable tasks (threads) of every process but this one and its sibling ranks: what competes
// with this run.
int others_runnable() {
  DIR* proc = opendir("/proc");
  if (!proc) return -1;
  const std::string self = std::to_string(getpid());
  const std::string my_exe = exe_of(self);
  int n = 0;
  while (dirent* p = readdir(proc)) {
    if (!all_digits(p->d_name) || self == p->d_name) continue;
    {
      std::ifstream f(std::string("/proc/") + p->d_name + "/stat");
      std::string line;
      if (std::getline(f, line) && sibling_rank(p->d_name, line, my_exe)) continue;
    }
    const std::string tdir = std::string("/proc/") + p->d_name + "/task";
    DIR* tasks = opendir(tdir.c_str());
    if (!tasks) continue;  // the process ended meanwhile
    while (dirent* t = readdir(tasks)) {
      if (!all_digits(t->d_name)) continue;
      std::ifstream f(tdir + "/" + t->d_name + "/stat");
      std::string line;
      if (std::getline(f, line) && parse_task_state(line) == 'R') ++n;
    }
    closedir(tasks);
  }
  closedir(proc);
  return n;
}

}  // namespace

CpuSample sample_cpu() {
  CpuSample s;
  s.t = std::chrono::steady_clock::now();
  {
    std::ifstream in("/proc/loadavg");
    parse_loadavg(in, s.load1);
  }
  {
    std::ifstream in("/proc/stat");
    parse_stat_cpu(in, s.steal, s.total);
  }
  {
    std::ifstream in("/proc/pressure/cpu");
    parse_pressure_some(in, s.pressure_us);
  }
  s.others_runnable = others_runnable();
  return s;
}

CpuLoad cpu_load_between(const CpuSample& a, const CpuSample& b) {
  CpuLoad l;
  l.cpus = int(allowed_cpus().size());
  l.load_avg_start = a.load1;
  l.load_avg_end = b.load1;
  if (a.total >= 0 && b.total > a.total && b.steal >= a.steal)
    l.steal_pct = 100.0 * double(b.steal - a.steal) / double(b.total - a.total);
  else if (a.total >= 0 && b.total == a.total)
    l.steal_pct = 0;  // no tick between the samples
  const double wall_us = std::chrono::duration<double, std::micro>(b.t - a.t).count();
  if (a.pressure_us >= 0 && b.pressure_us >= a.pressure_us && wall_us > 0)
    l.pressure_pct = 100.0 * (b.pressure_us - a.pressure_us) / wall_us;
  if (a.others_runnable >= 0 || b.others_runnable >= 0)
    l.others_runnable = std::max(a.others_runnable, b.others_runnable);
  return l;
}

std::string CpuLoad::why_busy() const {
  std::ostringstream os;
  if (cpus > 0 && load_avg_start > cpus) os << "load " << load_avg_start << " > " << cpus << " CPUs";
  if (steal_pct > 2.0) os << (os.tellp() > 0 ? "; " : "") << "steal " << steal_pct << "%";
  if (others_runnable > 0)
    os << (os.tellp() > 0 ? "; " : "") << others_runnable << " runnable task(s) of other processes";
  return os.str();
}

// ---------------------------------------------------------------- placement

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::vector<int> rank_cpu_slice(const std::vector<int>& allowed, int k, int r, bool pin) {
  const int n = int(allowed.size());
  if (!pin || k <= 1 || n == 0 || r < 0 || r >= k) return {};
  // More ranks than CPUs: ranks in blocks of about k / n per CPU (0 and 1 on the first of two),
  // the same placement every run instead of wherever the scheduler puts them.
  if (k > n) return {allowed[size_t(r) * size_t(n) / size_t(k)]};
  const int base = n / k, extra = n % k;
  const int lo = r * base + std::min(r, extra), len = base + (r < extra ? 1 : 0);
  return std::vector<int>(allowed.begin() + lo, allowed.begin() + lo + len);
}

PinMode pin_mode_from_env() {
  const char* e = std::getenv("DPB_PIN");
  if (!e) return PinMode::Auto;
  DPB_CHECK(std::strcmp(e, "0") == 0 || std::strcmp(e, "1") == 0,
            "environment variable DPB_PIN='" << e
                << "' must be 0 (ranks unbound) or 1 (bound); unset: bound while the machine is quiet");
  return e[0] == '1' ? PinMode::Always : PinMode::Never;
}

bool pin_ranks(PinMode mode, int k, const std::vector<int>& allowed) {
  if (mode == PinMode::Never || k <= 1 || allowed.empty()) return false;
  if (mode == PinMode::Always) return true;
  // Busy only when another process is runnable in each of 3 looks 2 ms apart: a build or a busy
  // job is, a passing kernel thread or the launching script is not (one look left the ranks of
  // 1 invocation in 8 unbound on a quiet machine, and that benchmark's time apart; issue 25 item 6).
  for (int i = 0; i < 3; ++i) {
    if (others_runnable() == 0) return true;
    if (i < 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return false;
}

// ---------------------------------------------------------------- OpenMP

void prefer_yielding_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT") ||
      std::getenv("DPB_OMP_SETTLED"))
    return;  // the user's choice, or already re-executed
  setenv("GOMP_SPINCOUNT", kOpenMpSpinCount, 1);
  setenv("DPB_OMP_SETTLED", "1", 1);
  execv("/proc/self/exe", argv);
  // No /proc (or exec refused): run on with libgomp's default rather than fail the run.
  std::fprintf(stderr, "dpbench: note: could not re-execute to set GOMP_SPINCOUNT (%s); OpenMP "
                       "threads spin at barriers (slow when other jobs share the cores)\n",
               std::strerror(errno));
  unsetenv("GOMP_SPINCOUNT");
}

}  // namespace dpb
