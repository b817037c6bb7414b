// test_watchdog.cpp: the watchdog (src/core/watchdog.h): a wait slot marked by WaitScope and
// labelled by WatchLabel, the verdict (which rank never arrived) from the slots' views, its
// messages, the watchdog's warning once and its timeout on a board, and a threads CommGroup whose
// rank 1 never reaches the barrier: the timeout names it, where the others wait and since when,
// and the collective wrapper's label. Sub-groups (issue 26): a view board shares its parent's
// slots and names its ranks by their numbers in the whole group (composed through nested splits);
// a rank waiting in another sub-group is not one that never arrived; hier on 2 x 2 emulated nodes
// whose rank 3 never arrives is named so, from the view barriers where the others wait. The
// command lines (exit 5 for threads and mpirun, the flagged CSV row) are tests/watchdog_test.sh.
// Run: ./dpb_tests --gtest_filter='Watchdog*'
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectives/allreduce.h"
#include "src/core/check.h"
#include "src/core/watchdog.h"
#include "tests/cpu_ranks.h"
#include "tests/rank_threads.h"

namespace dpb {
namespace {

constexpr int64_t kSecond = 1000000000;

SlotView waiting(double s, std::string label = "", int epoch = -1, int step = -1) {
  SlotView v;
  v.visible = v.local = v.waiting = true;
  v.waited_s = s;
  v.kind = WaitKind::Barrier;
  v.label = std::move(label);
  v.epoch = epoch;
  v.step = step;
  return v;
}

SlotView working(int epoch = -1, int step = -1) {
  SlotView v;
  v.visible = v.local = true;
  v.epoch = epoch;
  v.step = step;
  return v;
}

// Runs all-reduce `alg` on the group's ranks (1000 floats each, at epoch 1, step 5) with rank
// `missing` never arriving (at that step too when missing_at_step), under a 1 s watchdog whose
// handler records the verdict and aborts the group so that the waiters return; checks that the
// verdict came after the timeout and well before 10 s, and returns it.
std::string stall_verdict(CommGroup& group, const std::string& alg, int missing,
                          bool missing_at_step) {
  const int k = group.size();
  auto ar = make_allreduce(alg, group);
  std::mutex mu;
  std::string verdict;
  WatchdogOptions o;
  o.timeout_s = 1;
  o.period_s = 0.02;
  o.on_warn = [](const std::string&) {};
  o.on_timeout = [&](const std::string& m) {
    {
      std::lock_guard<std::mutex> lk(mu);
      verdict = m;
    }
    group.abort(missing, "the watchdog's test ends the wait");
  };
  Watchdog dog(o);
  std::vector<std::vector<float>> bufs(size_t(k), std::vector<float>(1000, 1.0f));
  const auto t0 = std::chrono::steady_clock::now();
  on_ranks(k, [&](int r) {
    if (r == missing && !missing_at_step) return;  // never arrives
    group.watch_slot(r)->set_step(1, 5);
    if (r == missing) return;  // never arrives
    try {
      ar->run(r, bufs[size_t(r)].data(), bufs[size_t(r)].size());
    } catch (const Error&) {  // aborted by the handler
    }
  });
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took, 1.0);
  EXPECT_LT(took, 10.0);
  std::lock_guard<std::mutex> lk(mu);
  return verdict;
}

TEST(Watchdog, WaitScopeMarksOnlyTheOuterWaitAndKeepsTheLongest) {
  WatchSlot s;
  EXPECT_EQ(s.since_ns.load(), 0);
  {
    WaitScope outer(&s, WaitKind::Receive, 3);
    const int64_t since = s.since_ns.load();
    EXPECT_GT(since, 0);
    EXPECT_EQ(s.peer.load(), 3);
    {
      WaitScope inner(&s, WaitKind::Barrier);  // nested: the outer wait stays
      EXPECT_EQ(s.since_ns.load(), since);
      EXPECT_EQ(WaitKind(s.kind.load()), WaitKind::Receive);
    }
    EXPECT_EQ(s.since_ns.load(), since);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(s.since_ns.load(), 0);
  const double longest = s.take_longest_s();
  EXPECT_GE(longest, 0.019);
  EXPECT_LT(longest, 5.0);
  EXPECT_EQ(s.take_longest_s(), 0);  // taken: reset
  WaitScope none(nullptr, WaitKind::Barrier);  // a group without a board: nothing to mark
}

TEST(Watchdog, LabelIsSetClearedAndCut) {
  WatchSlot s;
  {
    WatchLabel l(&s, "all-reduce ring 4.2 MB");
    EXPECT_EQ(s.label_text(), "all-reduce ring 4.2 MB");
  }
  EXPECT_EQ(s.label_text(), "");
  s.set_label(std::string(200, 'x'));
  EXPECT_EQ(s.label_text(), std::string(WatchSlot::kLabelWords * 8 - 1, 'x'));
}

TEST(Watchdog, TheRankNotWaitingIsTheOneThatNeverArrived) {
  // Threads: every rank visible; ranks 0 and 2 wait in a barrier, rank 1 computes.
  std::vector<SlotView> r = {waiting(3.2, "all-reduce ring 246.1 KB", 1, 4), working(1, 4),
                             waiting(2.9, "all-reduce ring 246.1 KB", 1, 4)};
  StallVerdict v = judge_stall(r);
  EXPECT_EQ(v.waiter, 0);
  EXPECT_DOUBLE_EQ(v.waited_s, 3.2);
  EXPECT_EQ(v.culprits, std::vector<int>{1});
  const std::string m = stall_message(r, v, 3, "--timeout");
  for (const char* want : {"rank 1 never arrived", "rank 0 has waited 3.2 s for it in all-reduce ring 246.1 KB",
                           "a barrier; epoch 1, step 4", "rank 2 waits too (2.9 s)",
                           "rank 1 is at epoch 1, step 4, in no collective", "--timeout 3 s"})
    EXPECT_NE(m.find(want), std::string::npos) << want << " not in: " << m;
  const std::string w = stall_warning(r, v, 300, "--dpb_timeout");
  EXPECT_NE(w.find("rank 0 has waited 3.2 s in all-reduce ring 246.1 KB"), std::string::npos) << w;
  EXPECT_NE(w.find("for rank 1"), std::string::npos) << w;
  EXPECT_NE(w.find("--dpb_timeout 300 s"), std::string::npos) << w;
}

TEST(Watchdog, ARankStoppedInsideAnEndedBarrierIsBehind) {
  // mpirun, shared memory: rank 1 was SIGSTOPped while asleep in generation 41's barrier, which
  // ended; rank 0 waits in generation 42. Both slots say "waiting": the generation tells.
  std::vector<SlotView> r = {waiting(3.1, "allreduce ring 85.0 KB", 3, 10),
                             waiting(3.1, "allreduce ring 85.0 KB", 3, 9)};
  r[0].ticket = 42;
  r[1].ticket = 41;
  r[1].local = false;
  EXPECT_EQ(judge_stall(r).culprits, std::vector<int>{1});
  r[1].ticket = 42;  // the same barrier: not behind ...
  EXPECT_TRUE(judge_stall(r).culprits.empty());
  r[1].proc_state = 'T';  // ... unless its process is stopped
  r[1].pid = 4242;
  const StallVerdict v = judge_stall(r);
  EXPECT_EQ(v.culprits, std::vector<int>{1});
  EXPECT_NE(stall_message(r, v, 3, "--timeout").find("its process 4242 is stopped"), std::string::npos);
}

TEST(Watchdog, OverMessagesThePeerItWaitsOnIsNamed) {
  // MPI messages: only this process's rank is visible; it waits in a receive from rank 2.
  std::vector<SlotView> r(3);
  r[1] = waiting(7, "all-reduce ring 4.2 MB");
  r[1].kind = WaitKind::Receive;
  r[1].peer = 2;
  StallVerdict v = judge_stall(r);
  EXPECT_EQ(v.waiter, 1);
  EXPECT_EQ(v.culprits, std::vector<int>{2});
  const std::string m = stall_message(r, v, 5, "--timeout");
  EXPECT_NE(m.find("rank 2 never arrived"), std::string::npos) << m;
  EXPECT_NE(m.find("a receive from rank 2"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 2 is not visible"), std::string::npos) << m;
}

TEST(Watchdog, NoWaiterNoVerdictAndOnlyLocalRanksReport) {
  EXPECT_EQ(judge_stall({working(), working()}).waiter, -1);
  // Another process's rank waits longest: this process reports its own waiter only.
  std::vector<SlotView> r = {waiting(1), waiting(9), working()};
  r[1].local = false;
  StallVerdict v = judge_stall(r);
  EXPECT_EQ(v.waiter, 0);
  EXPECT_EQ(v.culprits, std::vector<int>{2});
  // A stopped process named from /proc's state.
  r[2].local = false;
  r[2].pid = 4242;
  r[2].proc_state = 'T';
  EXPECT_NE(stall_message(r, v, 3, "--timeout").find("its process 4242 is stopped"), std::string::npos);
}

TEST(Watchdog, WarnsOnceThenTimesOutOnABoard) {
  WatchBoard board(2);
  std::vector<std::string> warned, fired;
  WatchdogOptions o;
  o.timeout_s = 8;  // warn at 2 s
  o.period_s = 3600;  // the test looks itself, at chosen times
  o.on_warn = [&](const std::string& m) { warned.push_back(m); };
  o.on_timeout = [&](const std::string& m) { fired.push_back(m); };
  Watchdog dog(o);
  WatchSlot* s0 = board.local_slot(0);
  board.local_slot(1)->set_step(2, 7);
  WaitScope w(s0, WaitKind::Barrier);
  WatchLabel l(s0, "all-gather ring 1.0 MB");
  const int64_t t0 = s0->since_ns.load();
  dog.check(t0 + kSecond);  // 1 s: quiet
  EXPECT_TRUE(warned.empty());
  dog.check(t0 + 3 * kSecond);
  dog.check(t0 + 4 * kSecond);  // the same wait: said once
  ASSERT_EQ(warned.size(), 1u);
  EXPECT_NE(warned[0].find("rank 0 has waited 3.0 s in all-gather ring 1.0 MB"), std::string::npos)
      << warned[0];
  EXPECT_TRUE(fired.empty());
  dog.check(t0 + 9 * kSecond);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_NE(fired[0].find("rank 1 never arrived: rank 0 has waited 9.0 s"), std::string::npos) << fired[0];
  EXPECT_NE(fired[0].find("rank 1 is at epoch 2, step 7"), std::string::npos) << fired[0];
}

TEST(Watchdog, ThreadsGroupTimesOutNamingTheRankThatNeverArrived) {
  // Three CPU ranks; ranks 0 and 2 enter an all-reduce, rank 1 never does. The watchdog's
  // handler (here: record, then abort the group so that the waiters return) gets the verdict.
  CpuRanks ranks(3);
  const std::string verdict = stall_verdict(ranks.group, "ring", 1, false);
  for (const char* want : {"rank 1 never arrived", "has waited 1.", "allreduce ring 4.0 KB",
                           "epoch 1, step 5", "waits too", "in no collective"})
    EXPECT_NE(verdict.find(want), std::string::npos) << want << " not in: " << verdict;
}

TEST(Watchdog, LabelCarriesItsSubGroup) {
  WatchSlot s;
  {
    WatchLabel l(&s, "reducescatter ring 85.0 KB", "node 1's group");
    EXPECT_EQ(s.label_text(), "reducescatter ring 85.0 KB");
    EXPECT_EQ(s.group_text(), "node 1's group");
  }
  EXPECT_EQ(s.label_text(), "");
  EXPECT_EQ(s.group_text(), "");
}

TEST(Watchdog, ViewBoardSharesSlotsAndNamesWholeGroupRanks) {
  WatchBoard whole(6);
  WatchBoard cross(whole, {1, 3, 5});  // a split: its rank i is the whole group's rank 2 i + 1
  cross.set_group("the cross-node group of local rank 1");
  WatchBoard nested(cross, {2, 0});    // a split of the split: ranks 5 and 1
  nested.set_group("a pair");
  ASSERT_EQ(cross.size(), 3);
  EXPECT_EQ(cross.name(0), 1);
  EXPECT_EQ(cross.name(2), 5);
  EXPECT_EQ(nested.name(0), 5);
  EXPECT_EQ(nested.name(1), 1);
  EXPECT_EQ(whole.name(4), 4);
  EXPECT_EQ(cross.local_slot(1), whole.local_slot(3));  // one slot per rank for the whole group
  EXPECT_EQ(nested.local_slot(0), whole.local_slot(5));
  EXPECT_EQ(whole.group(), "");
  EXPECT_EQ(nested.group(), "a pair within the cross-node group of local rank 1");
  try {
    WatchBoard bad(whole, {0, 6});
    FAIL() << "a member outside the parent accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 6, not in a group of 6"), std::string::npos)
        << e.what();
  }
  // Only the whole group's board is judged: a wait in the view shows there, in its numbers.
  std::vector<std::string> fired;
  WatchdogOptions o;
  o.timeout_s = 2;
  o.period_s = 3600;
  o.on_warn = [](const std::string&) {};
  o.on_timeout = [&](const std::string& m) { fired.push_back(m); };
  Watchdog dog(o);
  // Rank 1 (the view's rank 0) waits first, in the view; ranks 0, 2 and 4 in the whole group.
  WatchLabel l(cross.local_slot(0), "allreduce ring 1.0 KB", cross.group());
  std::vector<std::unique_ptr<WaitScope>> waits;
  waits.push_back(std::make_unique<WaitScope>(cross.local_slot(0), WaitKind::Barrier, -1, 2));
  for (int r : {0, 2, 4})
    waits.push_back(std::make_unique<WaitScope>(whole.local_slot(r), WaitKind::Barrier, -1, 7));
  dog.check(whole.local_slot(1)->since_ns.load() + 3 * kSecond);
  ASSERT_EQ(fired.size(), 1u);  // the views are not boards of their own: one verdict
  for (const char* want : {"ranks 3, 5 never arrived",
                           "rank 1 has waited 3.0 s for them in allreduce ring 1.0 KB in the "
                           "cross-node group of local rank 1 (a barrier)",
                           "rank 0 waits too (3.0 s, in a barrier)"})
    EXPECT_NE(fired[0].find(want), std::string::npos) << want << " not in: " << fired[0];
}

TEST(Watchdog, ARankWaitingInAnotherSubGroupArrived) {
  // Rank 0 waits in its cross-node group's barrier (generation 4) for rank 2, which waits in its
  // node's (generation 9) for rank 3: rank 3 never arrived, rank 2 did (another barrier).
  std::vector<SlotView> r = {waiting(3.2, "allreduce ring 42.5 KB"), working(),
                             waiting(3.1, "reducescatter ring 85.0 KB"), working()};
  r[0].group = "the cross-node group of local rank 0";
  r[0].ticket = 4;
  r[2].group = "node 1's group";
  r[2].ticket = 9;
  r[1] = waiting(3.0, "allreduce ring 42.5 KB");
  r[1].group = "the cross-node group of local rank 1";
  r[1].ticket = 4;
  const StallVerdict v = judge_stall(r);
  EXPECT_EQ(v.waiter, 0);
  EXPECT_EQ(v.culprits, std::vector<int>{3});
  const std::string m = stall_message(r, v, 3, "--timeout");
  for (const char* want : {"rank 3 never arrived: rank 0 has waited 3.2 s for it in allreduce ring "
                           "42.5 KB in the cross-node group of local rank 0 (a barrier)",
                           "rank 2 waits too (3.1 s, in reducescatter ring 85.0 KB in node 1's "
                           "group"})
    EXPECT_NE(m.find(want), std::string::npos) << want << " not in: " << m;
}

TEST(Watchdog, HierOnTwoNodesNamesTheWholeGroupsRankThatNeverArrived) {
  // 2 x 2 emulated nodes as threads, hier all-reduce: rank 3 never arrives. Rank 2 waits at node
  // 1's view barrier (the node's reduce-scatter), ranks 0 and 1 at their cross-node groups'
  // (issue 26: these barriers were not watched, and a sub-group's verdict said "rank 1").
  LinkSpec link;
  link.nodes = 2;
  CpuRanks ranks(4, link);
  const std::string verdict = stall_verdict(ranks.group, "hier", 3, true);
  for (const char* want : {"rank 3 never arrived", "in node 1's group (a barrier; epoch 1, step 5)",
                           "in the cross-node group of local rank 0",
                           "in the cross-node group of local rank 1",
                           "rank 3 is at epoch 1, step 5, in no collective"})
    EXPECT_NE(verdict.find(want), std::string::npos) << want << " not in: " << verdict;
  EXPECT_EQ(verdict.find("rank 1 never arrived"), std::string::npos) << verdict;
}

TEST(Watchdog, WarnThreshold) {
  EXPECT_DOUBLE_EQ(stall_warn_s(300), 30);
  EXPECT_DOUBLE_EQ(stall_warn_s(8), 2);
  EXPECT_DOUBLE_EQ(stall_warn_s(0), 30);  // off: epochs are still flagged
}

}  // namespace
}  // namespace dpb
