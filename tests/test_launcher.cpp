// test_launcher.cpp: detect_launch_env (src/core/launcher.h) reads mpirun's, PMI's and srun's
// variables, ignores a Slurm batch shell, runs one process's ranks as threads whatever the
// launcher and PMI (srun -n 1 with pmix, pmi2 or none; mpirun -np 1), and refuses a malformed
// value naming the variable; rank_error_message names the rank once.
// Run: ./dpb_tests --gtest_filter='Launcher*'
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "src/core/check.h"
#include "src/core/launcher.h"

namespace dpb {
namespace {

const char* kVars[] = {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_SIZE",
                       "PMI_RANK", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_STEP_ID"};

// Sets exactly `vars` among the launcher variables for the test's duration.
class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& vars) {
    for (const char* v : kVars) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      unsetenv(v);
    }
    for (auto& [k, v] : vars) setenv(k.c_str(), v.c_str(), 1);
  }
  ~Env() {
    for (const char* v : kVars) unsetenv(v);
    for (auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

TEST(Launcher, NoneMeansThreads) {
  Env e({});
  EXPECT_FALSE(detect_launch_env().processes);
}

TEST(Launcher, OpenMpi) {
  Env e({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"}});
  const LaunchEnv l = detect_launch_env();
  EXPECT_TRUE(l.processes);
  EXPECT_EQ(l.size, 4);
  EXPECT_EQ(l.rank, 2);
}

TEST(Launcher, PmiAndPmix) {
  {
    Env e({{"PMI_SIZE", "3"}, {"PMI_RANK", "1"}});
    const LaunchEnv l = detect_launch_env();
    EXPECT_TRUE(l.processes);
    EXPECT_EQ(l.size, 3);
    EXPECT_EQ(l.rank, 1);
  }
  Env e({{"PMIX_RANK", "5"}, {"SLURM_NTASKS", "8"}});
  const LaunchEnv l = detect_launch_env();
  EXPECT_TRUE(l.processes);
  EXPECT_EQ(l.size, 8);
  EXPECT_EQ(l.rank, 5);
}

TEST(Launcher, SrunStepButNotBatchShell) {
  {
    Env e({{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}});  // sbatch's own shell: no step
    EXPECT_FALSE(detect_launch_env().processes);
  }
  Env e({{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "3"}, {"SLURM_STEP_ID", "0"}});
  const LaunchEnv l = detect_launch_env();
  EXPECT_TRUE(l.processes);
  EXPECT_EQ(l.size, 4);
  EXPECT_EQ(l.rank, 3);
}

// srun -n 1 sets these (Slurm 22.05) beside its PMI's own: one process is threads, as with
// mpirun -np 1; its size said so, so MPI is never initialized (pmi2/none die in MPI_Init).
TEST(Launcher, OneProcessUnderAnyLauncherIsThreads) {
  const std::map<std::string, std::string> slurm = {
      {"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    extra.insert(slurm.begin(), slurm.end());
    return extra;
  };
  const std::map<std::string, std::string> cases[] = {
      with({}),                                          // srun --mpi=none
      with({{"PMIX_RANK", "0"}}),                        // srun --mpi=pmix
      with({{"PMI_SIZE", "1"}, {"PMI_RANK", "0"}}),      // srun --mpi=pmi2
      {{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}},  // mpirun -np 1
      {{"PMI_SIZE", "1"}, {"PMI_RANK", "0"}},            // MPICH's hydra, -np 1
  };
  for (const auto& vars : cases) {
    Env e(vars);
    const LaunchEnv l = detect_launch_env();
    std::string names;
    for (auto& [k, v] : vars) names += k + "=" + v + " ";
    EXPECT_FALSE(l.processes) << names;
    EXPECT_EQ(l.size, 1) << names;
    EXPECT_EQ(l.rank, 0) << names;
  }
  {  // two tasks of a step are processes, under every PMI alike
    Env e({{"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "1"}, {"SLURM_STEP_ID", "0"},
           {"PMIX_RANK", "1"}});
    const LaunchEnv l = detect_launch_env();
    EXPECT_TRUE(l.processes);
    EXPECT_EQ(l.size, 2);
    EXPECT_EQ(l.rank, 1);
  }
  // PMIx without any size: MPI_Init tells (dpbench train runs a world of one as threads).
  Env e(std::map<std::string, std::string>{{"PMIX_RANK", "0"}});
  const LaunchEnv l = detect_launch_env();
  EXPECT_TRUE(l.processes);
  EXPECT_EQ(l.size, 0);
}

TEST(Launcher, RankErrorMessageNamesTheRankOnce) {
  EXPECT_EQ(rank_error_message(0, "rank 0: rank 1 (pid 42) is gone"),
            "rank 0: error: rank 1 (pid 42) is gone");
  EXPECT_EQ(rank_error_message(1, "--batch: bad"), "rank 1: error: --batch: bad");
  // another rank's name is the message's own
  EXPECT_EQ(rank_error_message(1, "rank 10: x"), "rank 1: error: rank 10: x");
  EXPECT_EQ(rank_error_message(1, "rank 1x"), "rank 1: error: rank 1x");
}

TEST(Launcher, MalformedValueNamesTheVariable) {
  Env e(std::map<std::string, std::string>{{"OMPI_COMM_WORLD_SIZE", "two"}});
  try {
    detect_launch_env();
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("OMPI_COMM_WORLD_SIZE='two'"), std::string::npos);
  }
}

}  // namespace
}  // namespace dpb
