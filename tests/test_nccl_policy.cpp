// test_nccl_policy.cpp: the nccl all-reduce's GPU-free decisions (collectives/cuda/nccl_allreduce.h)
// on the CPU, in every build:
//   - placement: whether NCCL may run the ranks is judged per node (ranks on this node
//     against this node's GPUs): 8 processes on two 4-GPU nodes are accepted, 2 ranks on one GPU
//     are refused before NCCL 2.30 and allowed from 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1.
//   - abort: a rank that fails before its first call aborts every communicator before the rank
//     threads are joined: peers polling a call that can never complete (NCCL connecting to the
//     failed rank) return with an error. The fake backend gives up after a deadline, so the test
//     fails instead of hanging when the abort does not come.
//   ./dpb_tests --gtest_filter='NcclPolicy*'
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "collectives/cuda/nccl_allreduce.h"
#include "src/core/check.h"
#include "tests/rank_threads.h"

namespace dpb {
namespace {

constexpr int k2_28 = 22809;  // NCCL 2.28.9
constexpr int k2_30 = 23000;

TEST(NcclPolicy, RanksAreComparedWithGpusPerNode) {
  // README: mpirun -np 8 --map-by ppr:4:node on two 4-GPU nodes.
  EXPECT_EQ(nccl_shared_gpu_refusal({8, 4, 4, false}, k2_28, nullptr), "");
  // The same 8 processes on one 4-GPU node share GPUs.
  const std::string one_node = nccl_shared_gpu_refusal({8, 8, 4, false}, k2_28, nullptr);
  EXPECT_NE(one_node.find("8 ranks on 4 GPU(s), up to 2 on one GPU"), std::string::npos) << one_node;
  // 3 of 6 ranks on a 2-GPU node: refused, naming the node's share.
  const std::string share = nccl_shared_gpu_refusal({6, 3, 2, false}, k2_28, nullptr);
  EXPECT_NE(share.find("3 of the 6 ranks on this node on 2 GPU(s)"), std::string::npos) << share;
  // Threads: every rank is on this node.
  EXPECT_EQ(nccl_shared_gpu_refusal({4, 4, 4, false}, k2_28, nullptr), "");
  EXPECT_EQ(nccl_shared_gpu_refusal({1, 1, 1, false}, k2_28, nullptr), "");
  // Not known here (processes, node size unknown) or each process sees its own GPU: NCCL decides.
  EXPECT_EQ(nccl_shared_gpu_refusal({8, 0, 4, false}, k2_28, nullptr), "");
  EXPECT_EQ(nccl_shared_gpu_refusal({8, 4, 1, true}, k2_28, nullptr), "");
}

TEST(NcclPolicy, TwoRanksOnOneGpuNeedNccl230AndTheSetting) {
  const std::string old = nccl_shared_gpu_refusal({2, 2, 1, false}, k2_28, nullptr);
  EXPECT_NE(old.find("2 ranks on 1 GPU(s)"), std::string::npos) << old;
  EXPECT_NE(old.find("This NCCL is 2.28.9, NCCL_MULTI_RANK_GPU_ENABLE is unset"), std::string::npos)
      << old;
  EXPECT_NE(nccl_shared_gpu_refusal({2, 2, 1, false}, k2_28, "1"), "") << "2.28 refuses anyway";
  EXPECT_NE(nccl_shared_gpu_refusal({2, 2, 1, false}, k2_30, nullptr), "") << "needs the setting";
  EXPECT_NE(nccl_shared_gpu_refusal({2, 2, 1, false}, k2_30, "0"), "");
  EXPECT_EQ(nccl_shared_gpu_refusal({2, 2, 1, false}, k2_30, "1"), "");
  // At most 2 per GPU even then.
  const std::string three = nccl_shared_gpu_refusal({3, 3, 1, false}, k2_30, "1");
  EXPECT_NE(three.find("up to 3 on one GPU"), std::string::npos) << three;
  EXPECT_EQ(nccl_shared_gpu_refusal({8, 8, 4, false}, k2_30, "1"), "");
}

TEST(NcclPolicy, VersionCodes) {
  EXPECT_EQ(nccl_version_str(22809), "2.28.9");
  EXPECT_EQ(nccl_version_str(23000), "2.30.0");
  EXPECT_EQ(nccl_version_str(2708), "2.7.8");
}

// A fake communicator backend: a call never completes on its own (NCCL connecting to a peer that
// failed before its first call); it only reports "in progress", until a deadline after which it
// throws, so that a missing abort fails the test rather than hanging it.
TEST(NcclPolicy, FailureBeforeFirstCallAbortsPeersBeforeJoin) {
  const int k = 3;
  NcclCallGate gate({0, 1, 2});
  std::atomic<int> killed{0}, polls{0};
  std::vector<std::string> peer_error(k);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::atomic<bool> joined{false};
  try {
    on_ranks(
        k,
        [&](int r) {
          if (r == 0) {  // fails before its first call, once the peers are inside theirs
            while (polls.load() < 2 * (k - 1)) std::this_thread::yield();
            throw Error("rank 0: injected failure before the first all-reduce");
          }
          try {
            gate.call(
                r, [] { return false; },  // issued: "in progress"
                [&] {
                  ++polls;
                  if (std::chrono::steady_clock::now() > deadline)
                    throw Error("fake NCCL call never aborted");
                  return false;
                },
                "fake all-reduce");
          } catch (const Error& e) {
            peer_error[size_t(r)] = e.what();
            throw;
          }
        },
        [&](int r, const std::string& why) {  // the trainer's on_error: RankSet::abort
          gate.abort(why, [&](int rank) {
            EXPECT_FALSE(joined.load()) << "abort after the rank threads were joined";
            (void)rank;
            ++killed;
          });
        });
  } catch (const Error& e) {
    joined = true;
    EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(joined.load()) << "run() must rethrow rank 0's failure";
  EXPECT_EQ(killed.load(), k) << "every rank's communicator is aborted, once";
  for (int r = 1; r < k; ++r)
    EXPECT_NE(peer_error[size_t(r)].find("fake all-reduce aborted: rank 0 failed"),
              std::string::npos)
        << "rank " << r << ": " << peer_error[size_t(r)];
  EXPECT_TRUE(gate.aborted());
  EXPECT_THROW(gate.call(1, [] { return true; }, [] { return true; }, "late call"), Error);
  EXPECT_FALSE(gate.abort("again", [&](int) { ++killed; })) << "abort runs once";
  EXPECT_EQ(killed.load(), k);
}

// kill(r) never runs while rank r is inside a call: it waits for the call's lock.
TEST(NcclPolicy, AbortWaitsForACallInProgressOnThatRank) {
  NcclCallGate gate({0, 0});  // two ranks sharing a GPU share the lock
  std::atomic<bool> inside{false}, leave{false}, kill_overlapped{false};
  std::thread caller([&] {
    gate.call(
        0,
        [&] {
          inside = true;
          while (!leave.load()) std::this_thread::yield();
          inside = false;
          return true;
        },
        [] { return true; }, "call");
  });
  while (!inside.load()) std::this_thread::yield();
  std::thread aborter([&] {
    gate.abort("test", [&](int) {
      if (inside.load()) kill_overlapped = true;
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  leave = true;
  caller.join();
  aborter.join();
  EXPECT_FALSE(kill_overlapped.load());
}

}  // namespace
}  // namespace dpb
