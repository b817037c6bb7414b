// cpu_info.h: this machine's CPU as a run sees it, read in one place for every caller: the model
// name (`dpbench info`, selftest, the projection profile); the load, steal and CPU pressure
// around a run (issue 25 item 5: every result says whether it was measured on a busy machine);
// where the rank threads go (rank_threads.cpp); and the OpenMP wait policy the binaries start
// with (prefer_yielding_openmp).
#pragma once
#include <chrono>
#include <cstdint>
#include <istream>
#include <string>
#include <vector>

namespace dpb {

// The first "model name" line's value, without surrounding blanks; "unknown" when there is none
// (no /proc, or a CPU whose /proc/cpuinfo has no such line, e.g. many ARM kernels).
std::string cpu_model_name();
std::string cpu_model_name(std::istream& cpuinfo);  // the same, from /proc/cpuinfo's text

// ---- load around a run

// One look at the machine. A value that cannot be read stays negative (never a guess).
struct CpuSample {
  std::chrono::steady_clock::time_point t;
  double load1 = -1;               // /proc/loadavg, 1-minute average
  int64_t steal = -1, total = -1;  // /proc/stat "cpu" line: steal and all jiffies
  double pressure_us = -1;         // /proc/pressure/cpu "some" total, microseconds
  int others_runnable = -1;        // tasks of other processes in state R (/proc/*/task/*/stat),
                                   // this job's sibling ranks (same binary and parent) left out
};
CpuSample sample_cpu();

// The load seen over a run, from a sample at its start and one at its end.
struct CpuLoad {
  int cpus = 0;                 // CPUs this process may run on (its affinity mask)
  double load_avg_start = -1;   // 1-minute load average at the start and at the end
  double load_avg_end = -1;
  double steal_pct = -1;        // CPU time the hypervisor gave others: steal / all jiffies, %
  double pressure_pct = -1;     // time some runnable task waited for a CPU (PSI), % of wall
  int others_runnable = -1;     // the larger of the two samples' others_runnable
  // Measured on a busy machine: load above the CPUs before the run started, steal above 2%, or
  // another process's task runnable at the start or the end. why_busy() says which ("" if not).
  bool busy() const { return !why_busy().empty(); }
  std::string why_busy() const;
};
CpuLoad cpu_load_between(const CpuSample& start, const CpuSample& end);

// Parsers of the /proc texts (the sampler's, exposed for the tests). Each returns false (and
// leaves its outputs) when the text has no such field.
bool parse_loadavg(std::istream& in, double& load1);
bool parse_stat_cpu(std::istream& in, int64_t& steal, int64_t& total);
bool parse_pressure_some(std::istream& in, double& total_us);
// The state letter of a /proc/PID/task/TID/stat line ('?' when malformed; the command name may
// hold blanks and parentheses, so the state is the field after the last ')').
char parse_task_state(const std::string& stat_line);

// ---- placement

// The CPUs this thread may run on (sched_getaffinity), ascending; empty when unknown.
std::vector<int> allowed_cpus();
// Rank r's CPUs when k ranks share `allowed`: a contiguous slice of size(allowed)/k (the first
// size % k ranks one more), so that no two ranks' threads (nor the OpenMP and communication
// threads each rank starts, which inherit its mask) compete for a core. More ranks than CPUs:
// one CPU each, ranks in blocks (rank r on allowed[r * size / k]), so that every run places
// them alike (left to the scheduler, 4 ranks on 2 CPUs landed differently in each invocation,
// and their timings spread 1.4-1.9x; issue 25 item 6). Empty (do not pin) when k is 1, no CPU
// is known, or DPB_PIN=0.
std::vector<int> rank_cpu_slice(const std::vector<int>& allowed, int k, int r, bool pin = true);
// DPB_PIN: unset = auto (bind unless another process has a runnable task in 3 looks: on a busy
// machine a bound rank waits for its one core's time slice at every hand-off, 40-60 ms for a
// 2-rank 4 MiB ring on the loaded 2-core EPYC against 3 ms unbound), "1" always, "0" never;
// anything else is an error.
enum class PinMode { Auto, Always, Never };
PinMode pin_mode_from_env();
// Whether k ranks on `allowed` are bound now under `mode` (Auto: looks at the machine).
bool pin_ranks(PinMode mode, int k, const std::vector<int>& allowed);

// ---- OpenMP's waiting

// libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT once, when it loads (before main): by default
// an idle team thread spins for ~300k iterations at every barrier, which on cores that another
// job also uses takes the time slices the working threads need (a 1-device epoch beside a busy
// job ran 21x slower than with --threads 1). Unless the user set either variable, this sets
// GOMP_SPINCOUNT=kOpenMpSpinCount (a short poll, then sleep) and re-executes the binary once
// (marker DPB_OMP_SETTLED=1); returns only when nothing was to be done or the exec failed (then
// the run goes on with libgomp's default). Call first thing in main.
constexpr const char* kOpenMpSpinCount = "10000";
void prefer_yielding_openmp(char** argv);

}  // namespace dpb
