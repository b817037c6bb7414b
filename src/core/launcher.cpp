// launcher.cpp: detect_launch_env (see launcher.h). Tested by tests/test_launcher.cpp.
#include "src/core/launcher.h"

#include <cstdlib>

#include "src/core/check.h"

namespace dpb {
namespace {

// The integer in variable `name`, or -1 when it is unset.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return -1;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  DPB_CHECK(end != v && *end == '\0' && x >= 0 && x < (1L << 30),
            "environment variable " << name << "='" << v << "' is not a non-negative integer");
  return int(x);
}

}  // namespace

LaunchEnv detect_launch_env() {
  LaunchEnv e;
  if (const int n = env_int("OMPI_COMM_WORLD_SIZE"); n >= 0) {
    e = {true, "OpenMPI (OMPI_COMM_WORLD_SIZE)", n, std::max(0, env_int("OMPI_COMM_WORLD_RANK"))};
  } else if (const int r = env_int("PMIX_RANK"); r >= 0) {
    int n = env_int("PMI_SIZE");
    if (n < 0) n = env_int("SLURM_NTASKS");
    e = {true, "PMIx (PMIX_RANK)", std::max(0, n), r};
  } else if (const int n = env_int("PMI_SIZE"); n >= 0) {
    e = {true, "PMI (PMI_SIZE)", n, std::max(0, env_int("PMI_RANK"))};
  } else if (const int n = env_int("SLURM_NTASKS"); n >= 1 && std::getenv("SLURM_STEP_ID")) {
    e = {true, "Slurm srun (SLURM_NTASKS)", n, std::max(0, env_int("SLURM_PROCID"))};
  }
  if (e.size == 1) e.processes = false;  // one process: its ranks are threads (launcher.h)
  return e;
}

std::string rank_error_message(int rank, const std::string& msg) {
  const std::string own = "rank " + std::to_string(rank) + ": ";
  const bool named = msg.compare(0, own.size(), own) == 0;
  return own + "error: " + (named ? msg.substr(own.size()) : msg);
}

}  // namespace dpb
