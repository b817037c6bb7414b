// test_launcher.cpp: detect_launch_env (src/core/launcher.h) reads mpirun's, PMI's and srun's
// variables, ignores a Slurm batch shell, and refuses a malformed value naming the variable.
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
