// allreduce.h: sum all-reduce across the k ranks of a CommGroup, written once over the transport's
// steps (src/core/transport.h) and Device's comm primitives, so the CPU and CUDA backends, and
// ranks as threads or as processes, run the same schedule.
//
// Every rank calls run() concurrently (one thread or one process per rank) with its own buffer of n floats on its
// own device. run() is stream-ordered: when it returns, every rank's comm stream is ordered after
// all ranks' comm work of the call (CPU: the sums are already in every buffer; CUDA: call
// dev.compute_wait_comm() or dev.comm_synchronize() before using the buffer). Calls are
// collective: all ranks must make the same sequence of calls with the same n.
//
// The algorithms are listed, with where they run and their constraints, in one table:
// collectives/registry.h (naive, ring, nccl, ...; `dpbench train --help` prints it).
//
// Failure: when one rank's call throws, make_allreduce's wrapper aborts the group, so the other
// ranks' calls throw too (instead of waiting forever in a barrier). A trainer whose rank fails
// outside a collective should call group.abort(rank, why) for the same reason. An aborted group
// stays aborted.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "collectives/link.h"
#include "src/core/transport.h"
#include "src/core/device.h"

namespace dpb {

// k-thread barrier: a waiter polls for up to spin_ns, then blocks on std::atomic::wait (a futex).
// Unlike std::barrier it can be aborted: abort() wakes every waiter; arrive_and_wait() then
// returns false.
class HostBarrier {
 public:
  // spin_ns: how long a waiter polls before it sleeps (0: sleep at once, after libstdc++'s
  // brief spin). Polling saves the wake-up of a sleeping thread (tens of microseconds: see
  // docs/decisions.md, "barrier polling"), but burns a core that another thread may need: use it
  // only when every waiter has a core.
  explicit HostBarrier(int k, long spin_ns = 0) : k_(k), spin_ns_(spin_ns) {}
  // slot: the waiting rank's (src/core/watchdog.h), marked while it sleeps (not while it polls).
  bool arrive_and_wait(WatchSlot* slot = nullptr);
  void abort();
  long spin_ns() const { return spin_ns_.load(std::memory_order_relaxed); }
  void set_spin_ns(long ns) { spin_ns_.store(ns, std::memory_order_relaxed); }

 private:
  const int k_;
  std::atomic<long> spin_ns_;
  alignas(64) std::atomic<int> count_{0};
  alignas(64) std::atomic<uint32_t> gen_{0};
  std::atomic<bool> aborted_{false};
};

// The k ranks of a collective and how they move data: a thin handle on a Transport
// (src/core/transport.h). CommGroup(k, devices, link) is k threads of this process (the threads
// transport: published pointers and a device-ordered barrier), its steps paced by `link` when it
// is enabled (collectives/link.h; CPU devices only); CommGroup(transport) is any other, e.g. one
// rank per process over MPI (collectives/mpi/mpi_transport.h, which takes the link itself).
//
// Bytes sent: the group counts, per rank, the bytes each rank sends through step() (every
// SendOp's len floats, pulls and puts alike: what the schedule lists as leaving the rank), so the
// trainer and the benchmarks report measured traffic per rank (sent_bytes); collectives that
// bypass the steps (a library's own: nccl, mpi) add theirs with count_sent.
// broadcast_host and allgather_host are not counted: host control traffic (stats, ids), not
// training data. Only ranks of this process count here (process mode: each process its own).
//
// Two levels (issue 26): the group's ranks are nodes() nodes of ranks_per_node() ranks, numbered
// node by node (threads: link.nodes emulated nodes, or DPB_NODES when link.nodes is 1,
// collectives/link.h; processes: the MPI transport's nodes, Transport::nodes: emulated ones from
// --nodes / DPB_NODES, else the real nodes when they hold equal numbers of ranks numbered node by
// node). node_group(r) is the ranks of r's node (member i: local rank i), cross_group(r) the ranks
// with r's local rank, one per node (member j: node j): sub-groups split from the same transport
// (Transport::split: views of the threads transport, group_view.cpp; MPI_Comm_split for
// processes), made on first use (collective: every process's first call makes them all), so any
// algorithm of the tables runs inside either (collectives/hier.cpp runs on both). A process holds
// only the sub-groups of its own ranks: node_group(r) and cross_group(r) take a local rank r.
// Their sends count in this group's sent_bytes too.
class CommGroup {
 public:
  CommGroup(int k, std::vector<Device*> devices, const LinkSpec& link = {});
  explicit CommGroup(std::unique_ptr<Transport> transport);
  int nodes() const { return nodes_; }
  int ranks_per_node() const { return size() / nodes_; }
  int node_of(int rank) const { return rank / ranks_per_node(); }
  int local_rank(int rank) const { return rank % ranks_per_node(); }
  CommGroup& node_group(int rank) { return level(levels().node, node_of(rank), rank); }
  CommGroup& cross_group(int rank) { return level(levels().cross, local_rank(rank), rank); }
  int size() const { return t_->size(); }
  Launcher launcher() const { return t_->launcher(); }
  int processes() const { return t_->processes(); }
  bool is_local(int rank) const { return t_->is_local(rank); }
  // Rank `rank`'s device; only for ranks of this process (is_local).
  Device& device(int rank) const { return t_->device(rank); }
  BackendKind kind() const { return t_->kind(); }
  Transport& transport() const { return *t_; }
  // This process's wait slot of `rank` (src/core/watchdog.h), or nullptr when not watched.
  WatchSlot* watch_slot(int rank) const {
    WatchBoard* b = t_->watch_board();
    return b ? b->local_slot(rank) : nullptr;
  }
  // Which sub-group this is for the watchdog's messages ("node 1's group"; "" the whole group):
  // the collective wrapper labels its waits with it (WatchBoard::group).
  std::string watch_group() const {
    WatchBoard* b = t_->watch_board();
    return b ? b->group() : std::string();
  }
  // The transport's steps are paced by an emulated link (link.h).
  bool paced() const { return t_->paced(); }
  // Rank `rank`'s host issued the comm work that follows at t (link.h, "Two clocks"; GradSync
  // tells it); a transport that is not paced ignores it.
  void issue(int rank, std::chrono::steady_clock::time_point t) { t_->issue(rank, t); }
  // Seconds rank's send (receive) link was occupied on the emulated link since the group was made
  // (Transport::link_send_seconds; 0 when not paced): the straggler report's comm attribution.
  double link_send_seconds(int rank) const { return t_->link_send_seconds(rank); }
  double link_recv_seconds(int rank) const { return t_->link_recv_seconds(rank); }
  // How long a rank waiting in barrier() polls before sleeping (see HostBarrier). Default:
  // default_barrier_spin_ns(k). Whoever adds threads that compete for the cores while ranks wait
  // should lower it before any rank runs (GradSync's communication threads: adapt_barrier_spin
  // in grad_sync.h).
  long barrier_spin_ns() const { return t_->barrier_spin_ns(); }
  void set_barrier_spin_ns(long ns) { t_->set_barrier_spin_ns(ns); }
  // The steps of a collective (see transport.h): publish this rank's buffer, then steps.
  void begin(int rank, float* buf) { t_->begin(rank, buf); }
  // n floats for a buffer collectives will run on (see Transport::alloc): the gradients.
  Buffer alloc(int rank, size_t n, MemCategory cat, const char* what) {
    return t_->alloc(rank, n, cat, what);
  }
  void step(int rank, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
            bool fence = true) {
    size_t floats = 0;
    for (const SendOp& s : sends) floats += s.len;
    count_sent(rank, uint64_t(floats) * sizeof(float));
    t_->step(rank, sends, recvs, fence);
  }
  // Bytes rank `rank` sent since the group was made: its steps' sends plus count_sent. Its
  // compute thread and its communication thread may both add (never at once); other ranks'
  // threads add to their own counters beside it (one cache line each).
  uint64_t sent_bytes(int rank) const {
    return sent_[size_t(rank)].bytes.load(std::memory_order_relaxed);
  }
  // For collectives that do not go through step() (a library's: nccl, mpi): the bytes rank sends.
  void count_sent(int rank, uint64_t bytes) {
    sent_[size_t(rank)].bytes.fetch_add(bytes, std::memory_order_relaxed);
    if (parent_) parent_->count_sent(members_[size_t(rank)], bytes);  // a sub-group's
  }
  // Device-ordered barrier: when it returns on every rank, comm work issued by every rank before
  // the barrier is ordered before comm work issued after it on any rank. CPU threads: one host
  // barrier. CUDA threads: comm_record; host barrier; comm_wait_peer(every peer); host barrier.
  // Throws once the group is aborted.
  void barrier(int rank) { t_->barrier(rank); }
  void broadcast_host(int rank, void* data, size_t bytes, int root) {
    t_->broadcast_host(rank, data, bytes, root);
  }
  void allgather_host(int rank, const void* mine, void* all, size_t bytes) {
    t_->allgather_host(rank, mine, all, bytes);
  }
  // Wakes every rank blocked in barrier(); they and all later calls throw dpb::Error with `why`.
  // Process mode: prints "rank R: why" and ends the job (MPI_Abort).
  void abort(int rank, const std::string& why) { t_->abort(rank, why); }
  bool aborted() const { return t_->aborted(); }

 private:
  CommGroup(int k, std::vector<Device*> devices, const LinkSpec& link, int);  // link.nodes final
  struct alignas(64) SentCounter { std::atomic<uint64_t> bytes{0}; };
  struct Levels {
    std::vector<std::unique_ptr<CommGroup>> node, cross;
  };
  const Levels& levels();
  CommGroup& level(const std::vector<std::unique_ptr<CommGroup>>& v, int i, int rank);
  // Declared before t_: the sub-groups' views hold t_ and outlive it only in their destructors.
  Levels levels_;
  std::once_flag levels_once_;
  std::unique_ptr<Transport> t_;
  std::unique_ptr<SentCounter[]> sent_;  // one per rank
  int nodes_ = 1;
  std::string nodes_refusal_;  // why the ranks do not split into nodes (Transport::nodes_refusal)
  CommGroup* parent_ = nullptr;  // a sub-group: its ranks' numbers in parent_ (members_)
  std::vector<int> members_;
};

// A sub-group of parent's ranks as a transport (group_view.cpp): view rank i is parent rank
// members[i]; every member a rank of this process. CommGroup's node and cross-node groups.
std::unique_ptr<Transport> make_group_view(Transport& parent, std::vector<int> members);
// Transport::split by views of t (threads: every rank of every part is t's): one per part.
std::vector<std::unique_ptr<Transport>> split_into_views(Transport& t,
                                                         const std::vector<std::vector<int>>& parts);
// Ranks on nodes: node_of[r] is rank r's node (any ids). Sets nodes to their count and returns ""
// when they hold equal numbers of ranks numbered node by node (node j: ranks j g .. j g + g - 1);
// else nodes = 1 and why not (naming the counts), for two-level groups (Transport::nodes).
std::string node_layout(const std::vector<int>& node_of, int& nodes);
// `link` with its node count from the environment variable DPB_NODES when link.nodes is 1
// (--nodes wins); throws dpb::Error naming a bad value.
LinkSpec with_env_nodes(LinkSpec link);

// The threads transport over k devices of this process (transport_threads.cpp); when `link` is
// enabled, paced by it on one fabric all k ranks share (with_link, link.h; CPU devices only).
std::unique_ptr<Transport> make_thread_transport(int k, std::vector<Device*> devices,
                                                 const LinkSpec& link = {});

class AllReduce {
 public:
  virtual ~AllReduce() = default;
  virtual std::string name() const = 0;
  // The algorithm run() uses for n floats (differs from name() only for choices such as auto).
  virtual std::string choice(size_t n) const { (void)n; return name(); }
  // What this object runs, for results files: the name, or e.g. "auto: naive<=32KB, ring".
  virtual std::string describe() const { return name(); }
  virtual void run(int rank, float* buf, size_t n) = 0;
  // Optional, per rank: later run() calls use at most n floats; algorithms with scratch space
  // allocate it here, so that no allocation (a device synchronization on CUDA) happens inside a
  // timed step. GradSync calls it with its largest unit.
  virtual void reserve(int rank, size_t n) { (void)rank; (void)n; }
  // Makes every rank's current and later run() throw instead of waiting for `rank` (used on
  // failure; see the header comment). make_allreduce's objects abort their CommGroup.
  virtual void abort(int rank, const std::string& why) { (void)rank; (void)why; }
  // Rank `rank`'s host issued the comm work of its next calls at t (CommGroup::issue): GradSync
  // says when backward made a unit ready. make_allreduce's objects tell their group.
  virtual void issue(int rank, std::chrono::steady_clock::time_point t) { (void)rank; (void)t; }
};

struct AllReduceOptions {
  std::string tune_file;  // auto: the tuning table (JSON); "": the built-in default
  // hier (hier.cpp): the flat algorithms it runs inside the nodes (reduce-scatter, all-gather)
  // and across them (all-reduce, reduce-scatter, all-gather of the 1/g shard).
  std::string hier_intra = "ring", hier_cross = "ring";
};

// algorithm: a name in the table of collectives/registry.h. Throws dpb::Error naming the algorithm
// when it is unknown, not available on this group's backend or refuses this rank count. The
// result traces every run() as an NVTX range ("allreduce ring 516.0 KB") and aborts the group
// when a rank's run() throws.
std::unique_ptr<AllReduce> make_allreduce(const std::string& algorithm, CommGroup& group,
                                          const AllReduceOptions& opts = {});

// The bare algorithms (no tracing, no abort on failure); use make_allreduce.
std::unique_ptr<AllReduce> make_naive_allreduce(CommGroup& group);
// piece_floats: pipeline the ring in pieces of about this many floats per chunk (0: 256 KB
// pieces on the CPU backend, no pipelining on others); see ring.cpp.
std::unique_ptr<AllReduce> make_ring_allreduce(CommGroup& group, size_t piece_floats = 0);
// NCCL's functions here are defined in collectives/cuda/nccl_allreduce.cu when the CUDA backend
// is built with NCCL; otherwise in collectives/cuda/nccl_absent.cpp (CMake picks one), where the
// algorithm says this dpbench was built without NCCL.
std::unique_ptr<AllReduce> make_nccl_allreduce(CommGroup& group);
// "" when NCCL can run k ranks, node_ranks of them on this node's GPUs (rank r on GPU r mod
// count), else why not (ranks sharing a GPU need NCCL >= 2.30 and NCCL_MULTI_RANK_GPU_ENABLE=1,
// at most 2 per GPU). node_ranks 0: not known here (NCCL checks at start-up).
std::string nccl_refuse_ranks(int k, int node_ranks);
// nccl_version() is declared in src/core/optional_deps.h (the CUDA backend's facts name it).
// The most ranks NCCL lets share one GPU here: 1, or 2 from NCCL 2.30 with
// NCCL_MULTI_RANK_GPU_ENABLE=1. Without NCCL in the build: 1, NCCL's default.
int nccl_max_ranks_per_gpu();

// Barrier polling for `threads` threads that may be runnable at once (k ranks, plus k
// communication threads with overlap): 100 us when they fit the hardware threads, else 0 (a
// poller would take a core from a thread that has work). The environment variable DPB_SPIN_US
// (microseconds in [0, 1e6]) overrides it; a bad value throws dpb::Error naming it.
long default_barrier_spin_ns(int threads);

// "516.0 KB": n floats as decimal bytes (B, KB, MB, GB; 1 KB = 1000 B), for labels and tables.
std::string format_bytes(double bytes);

// Chunk c of n floats split into k chunks whose sizes differ by at most one.
inline size_t chunk_begin(size_t n, int k, int c) {
  size_t base = n / k, rem = n % k;
  return c * base + (size_t(c) < rem ? c : rem);
}
inline size_t chunk_size(size_t n, int k, int c) { return n / k + (size_t(c) < n % k ? 1 : 0); }

}  // namespace dpb
