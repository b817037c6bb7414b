// test_limits.cpp: issue 25's limits on what one process is asked to do.
//   - --batch past the training examples is clamped to them (src/train/run_data.h), and the
//     clamped batch is what train() runs and reports;
//   - --devices x --threads is bounded (check_thread_budget, src/train/run_options.h), naming both;
//   - under an address-space limit (ulimit -v) a library's crash (SIGSEGV, SIGABRT) or a
//     std::bad_alloc escaping a thread ends the process with exit 3 and a message naming the limit
//     (exit_3_on_crash_under_address_limit, src/core/memory.h); without a limit nothing changes.
// Run: ./dpb_tests --gtest_filter='Limits*'
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <string>
#include <thread>

#include "src/core/check.h"
#include "src/core/memory.h"
#include "src/data/synthetic.h"
#include "src/train/run_data.h"
#include "src/train/run_options.h"
#include "src/train/trainer.h"

namespace dpb {
namespace {

TEST(Limits, BatchPastTheDataIsClampedToIt) {
  const Dataset data = synthetic_dataset(28 * 28, 512, 16);
  TrainConfig cfg;
  cfg.batch = 16384;
  const std::string note = clamp_batch_to_data(cfg, data);
  EXPECT_EQ(cfg.batch, 512);
  EXPECT_NE(note.find("--batch 16384 is more than the 512 training examples"), std::string::npos)
      << note;
  cfg.batch = 512;  // equal: nothing to say
  EXPECT_EQ(clamp_batch_to_data(cfg, data), "");
  cfg.batch = 100;
  EXPECT_EQ(clamp_batch_to_data(cfg, data), "");
  EXPECT_EQ(cfg.batch, 100);
}

// The clamped run is the same training as the asked one (one step of every example per epoch,
// split alike), with buffers for the examples instead of for --batch: a smaller peak.
TEST(Limits, ClampedBatchTrainsAlikeInLessMemory) {
  const Dataset data = synthetic_dataset(28 * 28, 64, 16);
  TrainConfig cfg;
  cfg.backend = "cpu";
  cfg.devices = 2;
  cfg.threads = 1;
  cfg.epochs = 1;
  cfg.batch = 512;
  const TrainResult asked = train(cfg, data);
  clamp_batch_to_data(cfg, data);
  ASSERT_EQ(cfg.batch, 64);
  const TrainResult ran = train(cfg, data);
  ASSERT_EQ(asked.epochs.size(), 1u);
  ASSERT_EQ(ran.epochs.size(), 1u);
  EXPECT_NEAR(ran.epochs[0].train_loss, asked.epochs[0].train_loss, 1e-6);
  EXPECT_LT(ran.peak_mem[1].total(), asked.peak_mem[1].total());
}

TEST(Limits, DevicesTimesThreadsIsBounded) {
  EXPECT_NO_THROW(check_thread_budget(1, kMaxThreads));
  EXPECT_NO_THROW(check_thread_budget(8, kMaxThreads / 8));
  EXPECT_NO_THROW(check_thread_budget(64, 0));  // 0: cores / devices
  try {
    check_thread_budget(8, kMaxThreads);
    FAIL() << "8 x 4096 threads accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--devices 8 x --threads 4096 = 32768"), std::string::npos) << m;
  }
  // train() refuses it before any thread starts
  const Dataset data = synthetic_dataset(28 * 28, 64, 16);
  TrainConfig cfg;
  cfg.backend = "cpu";
  cfg.devices = 8;
  cfg.threads = 1024;
  cfg.batch = 64;
  EXPECT_THROW(validate(cfg, data), Error);
  cfg.procs = {8, 0, 0, 8};  // one rank per process: 1024 threads in each
  try {
    validate(cfg, data);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).find("--threads"), std::string::npos) << e.what();
  }
}

// A limit far above anything a test maps (sanitizers reserve terabytes of shadow).
void limit_address_space() {
  rlimit r{};
  getrlimit(RLIMIT_AS, &r);
  r.rlim_cur = rlim_t(1) << 47;
  if (r.rlim_max != RLIM_INFINITY && r.rlim_max < r.rlim_cur) r.rlim_cur = r.rlim_max;
  setrlimit(RLIMIT_AS, &r);
}

TEST(Limits, AddressLimitNoteNamesTheLimit) {
  EXPECT_EXIT(
      {
        limit_address_space();
        const std::string note = address_limit_note();
        std::fprintf(stderr, "%s", note.c_str());
        std::_Exit(address_space_limit() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "address space is limited to .* \\(ulimit -v [0-9]+\\)");
}

TEST(Limits, CrashUnderAnAddressLimitIsExit3) {
  EXPECT_EXIT(
      {
        limit_address_space();
        exit_3_on_crash_under_address_limit("dpbench");
        raise(SIGSEGV);
      },
      ::testing::ExitedWithCode(3), "dpbench: out of memory \\(probably\\).*ulimit -v.*SIGSEGV");
  EXPECT_EXIT(
      {
        limit_address_space();
        exit_3_on_crash_under_address_limit("dpbench");
        std::abort();
      },
      ::testing::ExitedWithCode(3), "SIGABRT");
  EXPECT_EXIT(
      {
        limit_address_space();
        exit_3_on_crash_under_address_limit("dpbench");
        std::thread([] { throw std::bad_alloc(); }).join();
      },
      ::testing::ExitedWithCode(3), "std::bad_alloc");
}

TEST(Limits, NoAddressLimitChangesNothing) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "a sanitizer's own SIGSEGV handler reports the raised signal instead";
#endif
  rlimit r{};
  getrlimit(RLIMIT_AS, &r);
  if (r.rlim_cur != RLIM_INFINITY) GTEST_SKIP() << "this test process runs under ulimit -v";
  EXPECT_EQ(address_limit_note(), "");
  EXPECT_EXIT(
      {
        exit_3_on_crash_under_address_limit("dpbench");
        raise(SIGSEGV);
      },
      ::testing::KilledBySignal(SIGSEGV), "");
}

}  // namespace
}  // namespace dpb
