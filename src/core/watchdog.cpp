// watchdog.cpp: the ranks' wait slots, the boards of a process, the verdict and its messages,
// and the watchdog thread (see watchdog.h).
#include "src/core/watchdog.h"

#include "src/core/check.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <tuple>
#include <utility>

namespace dpb {
namespace {

// The boards of this process: the one process-wide list, as a process has one set of signal
// handlers; boards enroll while they live, the watchdog thread reads them under the lock.
struct Registry {
  std::mutex mu;
  std::vector<const WatchBoard*> boards;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the thread may look during exit()
  return *r;
}

std::string secs(double s) {
  char b[32];
  std::snprintf(b, sizeof b, s < 10 ? "%.1f s" : "%.0f s", s);
  return b;
}

std::string num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", x);
  return b;
}

std::string rank_list(const std::vector<int>& rs) {
  std::string s = rs.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < rs.size(); ++i) s += (i ? ", " : "") + std::to_string(rs[i]);
  return s;
}

std::string at_step(const SlotView& v) {
  if (v.epoch < 0) return "";
  return "epoch " + std::to_string(v.epoch) + (v.step >= 0 ? ", step " + std::to_string(v.step) : "");
}

// "all-reduce ring 4.2 MB (a barrier; epoch 1, step 3)", "... in node 1's group (a barrier)"
std::string where(const SlotView& v) {
  std::string s = v.label.empty() ? wait_kind_name(v.kind) : v.label;
  if (!v.group.empty()) s += " in " + v.group;
  std::string more = v.label.empty() ? "" : wait_kind_name(v.kind);
  if (v.kind == WaitKind::Receive && v.peer >= 0) more += " from rank " + std::to_string(v.peer);
  if (v.kind == WaitKind::Send && v.peer >= 0) more += " to rank " + std::to_string(v.peer);
  const std::string e = at_step(v);
  if (!e.empty()) more += (more.empty() ? "" : "; ") + e;
  return more.empty() ? s : s + " (" + more + ")";
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'T' stopped, 'Z'), 0 when unreadable.
char process_state(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!f || !std::getline(f, line)) return 0;
  const size_t paren = line.rfind(')');  // the name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : 0;
}

// How long after the job's abort a stopped peer process is killed (kill_later): time for mpirun to
// take the abort's exit status first (well under 1 s here).
constexpr double kStoppedKillDelayS = 2.0;

// SIGKILL to `pid` `delay_s` from now, by a detached grandchild (its own session, no open files),
// so that it still happens after this process is gone. The job's abort goes first: mpirun reports
// the exit status of the first process to end, and a peer killed before the abort reached it made
// the job's status 137 instead of the watchdog's 5 (a race: 2 of 3 tries here, kill then
// MPI_Abort). Only async-signal-safe calls after fork (the process has threads).
bool kill_later(int pid, double delay_s) {
  const long max_fd = sysconf(_SC_OPEN_MAX);
  const struct timespec delay = {time_t(delay_s), long((delay_s - double(time_t(delay_s))) * 1e9)};
  const pid_t child = fork();
  if (child < 0) return false;
  if (child == 0) {
    if (fork() == 0) {
      setsid();
      for (long fd = 0; fd < (max_fd > 0 ? max_fd : 1024); ++fd) close(int(fd));
      nanosleep(&delay, nullptr);
      kill(pid, SIGKILL);
    }
    _exit(0);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return true;
}

std::string culprit_state(const SlotView& c, int rank) {
  std::string s = "rank " + std::to_string(rank);
  if (!c.visible)
    return s + " is not visible from this process (another node, or MPI messages: the rank it "
               "waits on)";
  const std::string e = at_step(c);
  s += " is " + (e.empty() ? std::string() : "at " + e + ", ") +
       (c.waiting ? "in " + where(c) : "in no collective (computing, or stopped)");
  if (c.proc_state == 'T' || c.proc_state == 't')
    s += "; its process " + std::to_string(c.pid) + " is stopped (SIGSTOP, or a debugger)";
  else if (c.proc_state == 'Z' || c.proc_state == 'X' || (c.pid > 0 && c.proc_state == 0 && !c.local))
    s += "; its process " + std::to_string(c.pid) + " is gone";
  return s;
}

}  // namespace

double stall_warn_s(double timeout_s) { return timeout_s > 0 ? std::min(timeout_s / 4, 30.0) : 30.0; }

const char* wait_kind_name(WaitKind k) {
  switch (k) {
    case WaitKind::Barrier: return "a barrier";
    case WaitKind::Receive: return "a receive";
    case WaitKind::Send: return "a send";
    case WaitKind::Library: return "an MPI call";
    case WaitKind::None: break;
  }
  return "a wait";
}

int64_t watch_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------- WatchSlot

namespace {

// n words of text (cut to 8 n - 1 characters, zero-padded), and back.
template <int N>
void store_text(std::atomic<uint64_t> (&words)[N], std::string_view text) {
  char buf[N * 8] = {};
  std::memcpy(buf, text.data(), std::min(text.size(), sizeof buf - 1));
  for (int i = 0; i < N; ++i) {
    uint64_t w;
    std::memcpy(&w, buf + 8 * i, 8);
    words[i].store(w, std::memory_order_relaxed);
  }
}
template <int N>
std::string load_text(const std::atomic<uint64_t> (&words)[N]) {
  char buf[N * 8];
  for (int i = 0; i < N; ++i) {
    const uint64_t w = words[i].load(std::memory_order_relaxed);
    std::memcpy(buf + 8 * i, &w, 8);
  }
  return std::string(buf, strnlen(buf, sizeof buf));
}

// A consistent read of a slot's label and group, written together by set_label.
std::pair<std::string, std::string> read_label(const WatchSlot& s) {
  for (int tries = 0; tries < 1000; ++tries) {
    const uint32_t s0 = s.label_seq.load(std::memory_order_acquire);
    if (s0 & 1) continue;
    std::pair<std::string, std::string> t{load_text(s.label), load_text(s.group)};
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.label_seq.load(std::memory_order_relaxed) == s0) return t;
  }
  return {};  // written all the time: say nothing rather than a torn text
}

}  // namespace

// A sequence lock: the writer (the rank, once per collective call) makes the count odd, writes
// the words, makes it even; a reader retries until it read the words between two equal even
// counts. Plain atomics throughout, so that readers in other processes need nothing else.
void WatchSlot::set_label(std::string_view text, std::string_view group_name) {
  const uint32_t s = label_seq.load(std::memory_order_relaxed);
  label_seq.store(s + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  store_text(label, text);
  store_text(group, group_name);
  label_seq.store(s + 2, std::memory_order_release);
}

std::string WatchSlot::label_text() const { return read_label(*this).first; }
std::string WatchSlot::group_text() const { return read_label(*this).second; }

// ---------------------------------------------------------------- WaitScope

WaitScope::WaitScope(WatchSlot* slot, WaitKind kind, int peer, int64_t ticket) {
  if (!slot) return;
  const int64_t now = std::max<int64_t>(1, watch_now_ns());
  int64_t idle = 0;
  // Only from idle: a nested wait, or the rank's other thread waiting already, keeps the first.
  if (!slot->since_ns.compare_exchange_strong(idle, now)) return;
  slot->kind.store(int32_t(kind), std::memory_order_relaxed);
  slot->peer.store(peer, std::memory_order_relaxed);
  slot->ticket.store(ticket, std::memory_order_relaxed);
  slot_ = slot;
  since_ = now;
}

WaitScope::~WaitScope() {
  if (!slot_) return;
  const int64_t d = watch_now_ns() - since_;
  int64_t cur = slot_->longest_ns.load(std::memory_order_relaxed);
  while (d > cur && !slot_->longest_ns.compare_exchange_weak(cur, d)) {
  }
  slot_->since_ns.store(0, std::memory_order_release);
}

// ---------------------------------------------------------------- WatchBoard

WatchBoard::WatchBoard(int k)
    : own_(std::make_unique<WatchSlot[]>(size_t(std::max(k, 0)))),
      slots_(size_t(std::max(k, 0))), local_(size_t(std::max(k, 0)), true) {
  for (int r = 0; r < k; ++r) {
    slots_[size_t(r)] = &own_[size_t(r)];
    own_[size_t(r)].pid.store(int32_t(getpid()));
  }
  enroll();
}

WatchBoard::WatchBoard(int k, int mine, WatchSlot* own, const std::vector<WatchSlot*>& peers)
    : slots_(size_t(std::max(k, 0)), nullptr), local_(size_t(std::max(k, 0)), false) {
  if (!own) {
    own_ = std::make_unique<WatchSlot[]>(1);
    own = &own_[0];
  }
  own->pid.store(int32_t(getpid()));
  for (int r = 0; r < k; ++r) slots_[size_t(r)] = size_t(r) < peers.size() ? peers[size_t(r)] : nullptr;
  if (mine >= 0 && mine < k) {
    slots_[size_t(mine)] = own;
    local_[size_t(mine)] = true;
  }
  enroll();
}

WatchBoard::WatchBoard(const WatchBoard& parent, const std::vector<int>& members)
    : slots_(members.size(), nullptr), local_(members.size(), false), names_(members.size(), -1),
      parent_group_(parent.group_) {
  for (size_t i = 0; i < members.size(); ++i) {
    const int m = members[i];
    DPB_CHECK(m >= 0 && m < parent.size(), "watch board of a sub-group: member " << i << " is rank "
                                               << m << ", not in a group of " << parent.size());
    slots_[i] = parent.slots_[size_t(m)];
    local_[i] = parent.local_[size_t(m)];
    names_[i] = parent.name(m);
  }
  // Not enrolled: these slots are the parent's, so the root board (enrolled) sees these waits,
  // among every rank of the whole group, which is what tells who never arrived.
}

void WatchBoard::set_group(const std::string& text) {
  group_ = parent_group_.empty() ? text : text + " within " + parent_group_;
}

void WatchBoard::enroll() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lk(reg.mu);
  reg.boards.push_back(this);
  enrolled_ = true;
}

WatchBoard::~WatchBoard() {
  if (!enrolled_) return;
  Registry& reg = registry();
  std::lock_guard<std::mutex> lk(reg.mu);
  reg.boards.erase(std::remove(reg.boards.begin(), reg.boards.end(), this), reg.boards.end());
}

// ---------------------------------------------------------------- verdict

SlotView view_slot(const WatchSlot& s, bool local, int64_t now_ns) {
  SlotView v;
  v.visible = true;
  v.local = local;
  const int64_t since = s.since_ns.load(std::memory_order_acquire);
  v.waiting = since != 0;
  v.waited_s = v.waiting ? double(std::max<int64_t>(0, now_ns - since)) * 1e-9 : 0;
  v.kind = WaitKind(s.kind.load(std::memory_order_relaxed));
  v.peer = s.peer.load(std::memory_order_relaxed);
  v.epoch = s.epoch.load(std::memory_order_relaxed);
  v.step = s.step.load(std::memory_order_relaxed);
  v.pid = s.pid.load(std::memory_order_relaxed);
  v.ticket = s.ticket.load(std::memory_order_relaxed);
  std::tie(v.label, v.group) = read_label(s);
  return v;
}

StallVerdict judge_stall(const std::vector<SlotView>& ranks) {
  StallVerdict v;
  const int k = int(ranks.size());
  for (int r = 0; r < k; ++r)
    if (ranks[size_t(r)].local && ranks[size_t(r)].waiting && ranks[size_t(r)].waited_s >= v.waited_s &&
        (v.waiter < 0 || ranks[size_t(r)].waited_s > v.waited_s))
      v.waiter = r, v.waited_s = ranks[size_t(r)].waited_s;
  if (v.waiter < 0) return v;
  const SlotView& w = ranks[size_t(v.waiter)];
  for (int r = 0; r < k; ++r) {
    const SlotView& x = ranks[size_t(r)];
    if (r == v.waiter || !x.visible) continue;
    // Generations of one barrier only: a rank waiting in another sub-group waits elsewhere.
    const bool other_barrier = x.waiting && w.ticket >= 0 && x.ticket >= 0 && x.group == w.group &&
                               x.ticket != w.ticket;
    const bool halted = x.proc_state == 'T' || x.proc_state == 't' || x.proc_state == 'Z' ||
                        x.proc_state == 'X';
    if (!x.waiting || other_barrier || halted) v.culprits.push_back(r);
  }
  const int peer = ranks[size_t(v.waiter)].peer;
  if (v.culprits.empty() && peer >= 0 && peer < k && peer != v.waiter) v.culprits.push_back(peer);
  return v;
}

std::string stall_message(const std::vector<SlotView>& ranks, const StallVerdict& v,
                          double timeout_s, const std::string& flag) {
  if (v.waiter < 0) return "no rank waits";
  const SlotView& w = ranks[size_t(v.waiter)];
  const size_t n = v.culprits.size();
  std::ostringstream o;
  o << (n ? rank_list(v.culprits) + " never arrived" : std::string("a rank never arrived"))
    << ": rank " << v.waiter << " has waited " << secs(v.waited_s) << (n ? (n == 1 ? " for it" : " for them") : "")
    << " in " << where(w);
  for (int r = 0; r < int(ranks.size()); ++r) {
    const SlotView& x = ranks[size_t(r)];
    if (r == v.waiter || !x.visible || !x.waiting) continue;
    o << "; rank " << r << " waits too (" << secs(x.waited_s);
    if (x.label != w.label || x.kind != w.kind || x.group != w.group) o << ", in " << where(x);
    o << ")";
  }
  for (int c : v.culprits) o << "; " << culprit_state(ranks[size_t(c)], c);
  if (!n) o << " (no other rank is visible from this process)";
  o << "; " << flag << " " << num(timeout_s) << " s ends a wait this long (0: off)";
  return o.str();
}

std::string stall_warning(const std::vector<SlotView>& ranks, const StallVerdict& v,
                          double timeout_s, const std::string& flag) {
  if (v.waiter < 0) return "no rank waits";
  std::ostringstream o;
  o << "rank " << v.waiter << " has waited " << secs(v.waited_s) << " in "
    << where(ranks[size_t(v.waiter)]);
  if (!v.culprits.empty()) o << " for " << rank_list(v.culprits);
  if (timeout_s > 0)
    o << " (" << flag << " " << num(timeout_s) << " s ends the run; its epoch is flagged stalled)";
  else
    o << " (" << flag << " 0: no timeout; its epoch is flagged stalled)";
  return o.str();
}

// ---------------------------------------------------------------- Watchdog

Watchdog::Watchdog(WatchdogOptions opts) : opts_(std::move(opts)), warn_s_(stall_warn_s(opts_.timeout_s)) {
  if (!opts_.on_timeout)
    opts_.on_timeout = [](const std::string& msg) {
      std::fflush(stdout);
      std::fprintf(stderr, "dpbench: error: watchdog: %s\n", msg.c_str());
      std::fflush(stderr);
      std::_Exit(kExitStalled);  // a stalled thread cannot be joined: end the process
    };
  if (!opts_.on_warn)
    opts_.on_warn = [](const std::string& msg) {
      std::fprintf(stderr, "dpbench: warning: %s\n", msg.c_str());
      std::fflush(stderr);
    };
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::loop() {
  const double period = opts_.period_s > 0 ? opts_.period_s : std::clamp(warn_s_ / 4, 0.01, 1.0);
  std::unique_lock<std::mutex> lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::duration<double>(period));
    if (stop_) break;
    lk.unlock();
    check(watch_now_ns());
    lk.lock();
  }
}

void Watchdog::check(int64_t now_ns) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lk(reg.mu);
  std::vector<std::pair<const WatchSlot*, int64_t>> still;  // warned waits that go on
  for (const WatchBoard* b : reg.boards) {
    std::vector<SlotView> views(size_t(b->size()));
    for (int r = 0; r < b->size(); ++r)
      if (const WatchSlot* s = b->slot(r)) views[size_t(r)] = view_slot(*s, b->is_local(r), now_ns);
    StallVerdict v = judge_stall(views);
    if (v.waiter < 0) continue;
    const WatchSlot* ws = b->slot(v.waiter);
    const int64_t since = ws->since_ns.load(std::memory_order_relaxed);
    const bool said = std::count(warned_.begin(), warned_.end(), std::make_pair(ws, since)) > 0;
    if (said) still.emplace_back(ws, since);
    const bool timed_out = opts_.timeout_s > 0 && v.waited_s >= opts_.timeout_s;
    if (!timed_out && (said || v.waited_s < warn_s_)) continue;
    for (SlotView& x : views)  // another process's rank: is it stopped, or gone?
      if (x.visible && !x.local && x.pid > 0) x.proc_state = process_state(x.pid);
    v = judge_stall(views);
    if (timed_out) {
      std::string msg = stall_message(views, v, opts_.timeout_s, opts_.flag);
      // A stopped peer process can outlive the job's abort (a signal to it stays pending, and
      // mpirun waited for it): it is ended shortly after the abort, so that no rank is left behind.
      for (const SlotView& x : views)
        if (x.visible && !x.local && x.pid > 0 && x.proc_state == 'T' &&
            kill_later(x.pid, kStoppedKillDelayS))
          msg += "; the stopped process " + std::to_string(x.pid) + " is ended (SIGKILL) " +
                 std::to_string(int(kStoppedKillDelayS)) + " s after the job's abort";
      opts_.on_timeout(msg);  // ends the process
      opts_.timeout_s = 0;  // a test's handler returns: say it once
      continue;
    }
    opts_.on_warn(stall_warning(views, v, opts_.timeout_s, opts_.flag));
    still.emplace_back(ws, since);
  }
  warned_ = std::move(still);
}

}  // namespace dpb
