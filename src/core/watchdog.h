// watchdog.h: a stalled rank is detected. Every rank publishes what it waits for in a WatchSlot
// (entered by the blocking waits of the transports: the threads transport's host barrier, the
// shared-memory process barrier, the MPI calls; labelled by the collective wrapper "all-reduce
// ring 4.2 MB" and by the trainer with its epoch and step); a WatchBoard holds a group's slots
// (threads: every rank's; processes on one node: every rank's, in the shared arena; otherwise
// this process's own); one Watchdog thread per process looks at every board now and then.
// Sub-groups (a node group, a cross-node group: Transport::split) get a view board over their
// parent's slots: one slot per rank for the whole group, so that a rank waiting in any of its
// groups is seen as waiting on the whole group's board, the one the watchdog judges, in the whole
// group's rank numbers (WatchBoard::name), with the sub-group the wait is in said ("in node 1's
// group": the collective wrapper's WatchLabel carries it).
//
//   Watchdog dog({.timeout_s = 300});            // dpbench train --timeout, dpbench-micro --dpb_timeout
//   WatchBoard board(k);                          // a transport's: registers itself with the process
//   { WaitScope w(board.local_slot(r), WaitKind::Barrier); ...block... }   // only on the slow path
//   WatchBoard sub(board, {2, 3}); sub.set_group("node 1's group");       // a split's view board
//
// A wait longer than the warn threshold prints once "rank 0 has waited 31 s in all-reduce ring
// 4.2 MB (epoch 2, step 17) for rank 1"; a wait past the timeout prints the verdict (the rank
// that never arrived, where the others wait and since when) and ends the process with exit 5
// (WatchdogOptions::on_timeout: under mpirun the front end ends the job with MPI_Abort). The
// slot also keeps the longest wait it saw (take_longest_s), so an epoch stretched by a stall is
// recorded as such (the training CSV's stalled_s). Tested by tests/test_watchdog.cpp and
// tests/watchdog_test.sh (threads and mpirun, a SIGSTOPped process).
#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace dpb {

// dpbench's exit code for a rank that stalled past the timeout (1 error, 2 bad input, 3 out of
// memory, 4 divergence).
inline constexpr int kExitStalled = 5;

// The default timeout. Collective libraries wait minutes before they call a peer lost (PyTorch's
// NCCL process group 10 min, Gloo 30 min; NCCL itself forever): a wait there spans one
// collective, which no healthy rank of dpbench stretches past seconds. The longest legitimate
// wait is the processes' between epochs while rank 0 evaluates the test set (ResNet-18 on a
// 2-core CPU: about a minute); 300 s leaves that five times over and still ends a hung job of a
// suite within its step budget instead of the CI's 2-hour kill.
inline constexpr double kDefaultTimeoutS = 300;
// A wait past min(timeout / 4, 30 s) is a stall worth saying (and its epoch is flagged), not
// noise: a step of the slowest run here is well under a second.
double stall_warn_s(double timeout_s);

enum class WaitKind : int32_t { None = 0, Barrier, Receive, Send, Library };
// "a barrier", "a receive", "a send", "an MPI call"
const char* wait_kind_name(WaitKind k);

// One rank's published state: plain lock-free atomics and no pointers, so that it may live in
// memory that the processes of a node share (the MPI transport's arena header) and any of them
// reads it. Times are CLOCK_MONOTONIC nanoseconds (std::chrono::steady_clock), one clock per node.
struct alignas(64) WatchSlot {
  static constexpr int kLabelWords = 8;  // 63 characters of label
  static constexpr int kGroupWords = 8;  // 63 characters of the sub-group's name
  std::atomic<int64_t> since_ns{0};      // the current wait began then; 0: not waiting
  std::atomic<int64_t> longest_ns{0};    // the longest wait that ended since take_longest_s()
  std::atomic<int32_t> kind{0};          // WaitKind of the current wait
  std::atomic<int32_t> peer{-1};         // the rank it waits on when the wait knows (a receive)
  std::atomic<int32_t> epoch{-1};        // the trainer's epoch (1-based) and step; -1: none
  std::atomic<int32_t> step{-1};
  std::atomic<int32_t> pid{0};           // the process the rank lives in
  std::atomic<int64_t> ticket{-1};       // the barrier generation it waits for; -1: not a barrier
  std::atomic<uint32_t> label_seq{0};    // odd while the label is being written
  std::atomic<uint64_t> label[kLabelWords]{};
  std::atomic<uint64_t> group[kGroupWords]{};  // the labelled work's sub-group; "": the board's

  // The label and the sub-group it runs in ("node 1's group"; "" the whole group): "" clears
  // them; longer texts are cut. Written together, read together (a sequence lock).
  void set_label(std::string_view text, std::string_view group_name = "");
  std::string label_text() const;
  std::string group_text() const;
  void set_step(int e, int s) {
    epoch.store(e, std::memory_order_relaxed);
    step.store(s, std::memory_order_relaxed);
  }
  // Seconds of the longest wait that ended since the last call; resets it.
  double take_longest_s() { return double(longest_ns.exchange(0)) * 1e-9; }
};
static_assert(std::atomic<int64_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free,
              "WatchSlot lives in memory shared between processes: lock-free atomics only");

int64_t watch_now_ns();  // steady_clock, as the slots' times

// Marks a wait of the slot's rank for its lifetime: enter it where a rank blocks (after a
// barrier's polling, around an MPI call), not on fast paths. A null slot, or a slot already
// waiting (a nested wait, or the rank's other thread), is left alone.
class WaitScope {
 public:
  // ticket: a barrier's generation (ranks waiting for another one are behind), else -1.
  WaitScope(WatchSlot* slot, WaitKind kind, int peer = -1, int64_t ticket = -1);
  ~WaitScope();
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;

 private:
  WatchSlot* slot_ = nullptr;
  int64_t since_ = 0;
};

// Sets the slot's label for its lifetime ("all-reduce ring 4.2 MB", in group "node 1's group":
// WatchBoard::group of the collective's group), then clears it.
class WatchLabel {
 public:
  WatchLabel(WatchSlot* slot, std::string_view text, std::string_view group = "") : slot_(slot) {
    if (slot_) slot_->set_label(text, group);
  }
  ~WatchLabel() {
    if (slot_) slot_->set_label("");
  }
  WatchLabel(const WatchLabel&) = delete;
  WatchLabel& operator=(const WatchLabel&) = delete;

 private:
  WatchSlot* slot_;
};

// A group's slots, index = rank: the ones this process sees (nullptr: not visible here) and which
// of them are its own ranks'. Registers itself with the process while it lives, so that the
// watchdog looks at every group without being told; a sub-group's view board does not: its
// slots are its parent's, judged on the whole group's board.
class WatchBoard {
 public:
  // k ranks, all of this process (the threads transport): the board owns their slots.
  explicit WatchBoard(int k);
  // k ranks of which `mine` is this process's: own (nullptr: the board owns one) and, for the
  // other ranks, peers[r] (nullptr where not visible, e.g. on another node).
  WatchBoard(int k, int mine, WatchSlot* own, const std::vector<WatchSlot*>& peers);
  // A sub-group of parent's ranks (Transport::split): its rank i is parent's rank members[i],
  // with that rank's slot (visible and local as there) and name. Throws dpb::Error naming a
  // member outside the parent. Not registered: the watchdog sees its waits on the root board.
  WatchBoard(const WatchBoard& parent, const std::vector<int>& members);
  ~WatchBoard();
  WatchBoard(const WatchBoard&) = delete;
  WatchBoard& operator=(const WatchBoard&) = delete;

  int size() const { return int(slots_.size()); }
  WatchSlot* slot(int rank) const { return slots_[size_t(rank)]; }
  bool is_local(int rank) const { return local_[size_t(rank)]; }
  // This process's slot of `rank`, or nullptr.
  WatchSlot* local_slot(int rank) const {
    return rank >= 0 && rank < size() && local_[size_t(rank)] ? slots_[size_t(rank)] : nullptr;
  }
  // `rank`'s number in the whole group (composed through nested splits); the rank itself on a
  // whole group's board.
  int name(int rank) const { return names_.empty() ? rank : names_[size_t(rank)]; }
  // Which sub-group of the whole group this is, as messages say it after "in": "node 1's group",
  // "the cross-node group of local rank 1" (set by whoever split it: CommGroup's levels; a
  // nested split's says its parent's too); "" on a whole group's board.
  void set_group(const std::string& text);
  const std::string& group() const { return group_; }

 private:
  void enroll();
  std::unique_ptr<WatchSlot[]> own_;
  std::vector<WatchSlot*> slots_;
  std::vector<bool> local_;
  std::vector<int> names_;    // by rank: its number in the whole group; empty: the rank itself
  std::string group_;         // set_group
  std::string parent_group_;  // the parent's group() (a nested split)
  bool enrolled_ = false;
};

// What one rank's slot said at a moment: the watchdog's and the tests' input.
struct SlotView {
  bool visible = false, local = false;
  bool waiting = false;
  double waited_s = 0;
  WaitKind kind = WaitKind::None;
  int peer = -1, epoch = -1, step = -1, pid = 0;
  int64_t ticket = -1;
  std::string label;
  std::string group;    // the sub-group the wait is in ("node 1's group"); "": the board's own
  char proc_state = 0;  // the culprit's process state from /proc ('T': stopped), 0: not read
};
SlotView view_slot(const WatchSlot& s, bool local, int64_t now_ns);

// Who stalls whom: the local rank that has waited longest (-1: none waits) and the ranks it waits
// for. Culprits: the visible ranks not waiting (in a barrier every rank arrives, so one that is
// not there never arrived; a rank waiting in another sub-group arrived there), or waiting in
// another generation of the same group's barrier (it was stopped before it saw its barrier end),
// or whose process is stopped or gone; else the waiter's peer if it names one.
struct StallVerdict {
  int waiter = -1;
  double waited_s = 0;
  std::vector<int> culprits;
};
StallVerdict judge_stall(const std::vector<SlotView>& ranks);

// "rank 1 never arrived: rank 0 has waited 3.1 s for it in all-reduce ring 246.1 KB (a barrier;
// epoch 1, step 0); rank 2 waits too (3.0 s); rank 1 is at epoch 1, step 0, in no collective
// (computing, or stopped); --timeout 3 s ends a wait this long (0: off)". A wait in a sub-group
// says it: "... in reducescatter ring 85.0 KB in node 1's group (a barrier; ...)".
std::string stall_message(const std::vector<SlotView>& ranks, const StallVerdict& v,
                          double timeout_s, const std::string& flag);
// "rank 0 has waited 31.0 s in all-reduce ring 4.2 MB (epoch 2, step 17) for rank 1 (--timeout
// 300 s ends the run)".
std::string stall_warning(const std::vector<SlotView>& ranks, const StallVerdict& v,
                          double timeout_s, const std::string& flag);

struct WatchdogOptions {
  double timeout_s = kDefaultTimeoutS;  // 0: no timeout (warnings still, at stall_warn_s(0))
  std::string flag = "--timeout";       // how messages name the option
  // The verdict, once: must not return (default: "dpbench: error: watchdog: MSG" on stderr and
  // std::_Exit(kExitStalled); under mpirun the front end calls MPI_Abort with the code).
  std::function<void(const std::string& msg)> on_timeout;
  // A wait past the warn threshold (default: "dpbench: warning: MSG" on stderr).
  std::function<void(const std::string& msg)> on_warn;
  double period_s = 0;  // how often it looks; 0: a quarter of the warn threshold, 10 ms to 1 s
};

// The process's watchdog thread: every period it looks at every registered board. Destroying it
// stops the thread. One at a time per process.
class Watchdog {
 public:
  explicit Watchdog(WatchdogOptions opts);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // One look at every board at time now_ns (the thread's loop; tests call it directly).
  void check(int64_t now_ns);

 private:
  void loop();
  WatchdogOptions opts_;
  double warn_s_;
  std::vector<std::pair<const WatchSlot*, int64_t>> warned_;  // (slot, since_ns) said once
  std::mutex mu_;
  bool stop_ = false;
  std::condition_variable cv_;
  std::thread thread_;
};

}  // namespace dpb
