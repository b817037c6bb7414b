// mpi_transport_impl.h: the MPI transport's class, private to collectives/mpi (see
// mpi_transport.h for what it does): mpi_transport.cpp sets groups up (nodes, sub-groups, shared
// memory) and holds the direct path, mpi_messages.cpp moves data by MPI messages and runs MPI's
// own collectives. Built only when CMake finds MPI.
#pragma once
#include <mpi.h>

#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collectives/mpi/mpi_transport.h"
#include "collectives/shm.h"
#include "src/core/check.h"
#include "src/core/transport.h"

namespace dpb {
namespace mpi_detail {

std::string mpi_error(int code);  // MPI's message for an error code

}  // namespace mpi_detail

// MPI_CHECK(call, "context"): throws dpb::Error naming the call, the context and MPI's message.
#define MPI_CHECK(call, ctx)                                                              \
  do {                                                                                    \
    const int dpb_rc_ = (call);                                                           \
    DPB_CHECK(dpb_rc_ == MPI_SUCCESS,                                                     \
              #call << " failed (" << ctx << "): " << ::dpb::mpi_detail::mpi_error(dpb_rc_)); \
  } while (0)

namespace mpi_detail {

// This process's rank among, and the number of, the processes of `comm` on its node; leader:
// the node's first rank in comm (the node's name in node_layout).
void node_rank_size(MPI_Comm comm, int rank, int& node_rank, int& node_size,
                    int* leader = nullptr);

// What a transport and the sub-groups split from it share (one per whole group, by its ranks):
// each rank's node (emulated --nodes / DPB_NODES, else the real one) and, when CPU processes
// share memory, this process's arena and its node peers' arenas mapped here.
class MpiTransport;
struct ProcShared {
  std::vector<int> node;                          // by rank: its node's id
  std::unique_ptr<ShmArena> arena;                // null: no shared memory
  std::vector<std::unique_ptr<ShmMapping>> maps;  // the node peers' arenas
  std::vector<char*> bases;                       // by rank: its arena here (nullptr: not mapped)
  std::vector<pid_t> pids;                        // by rank
  bool required = false;                          // DPB_SHM=1
  // The groups of this process that move data by messages (the whole group across nodes, its
  // cross-node sub-groups; none on the direct path) and the largest collective buffer allocated
  // so far: each stages for it from set-up, also a group split after the buffers were allocated
  // (hier's, at its first call), so that no step allocates staging (MpiTransport::stage_for).
  std::vector<MpiTransport*> staged;
  size_t largest = 0;
};

class MpiTransport final : public Transport {
 public:
  // The whole group: rank `rank` of `size` over a duplicate of MPI_COMM_WORLD, on `nodes`
  // emulated nodes (1: the real ones).
  MpiTransport(Device& dev, int rank, int size, int nodes);
  // A sub-group of `parent` (split): MPI_Comm_split of its communicator by color (the part this
  // rank is in) and key (its place there); members: the sub-group's ranks in the parent's
  // numbering, whole: in the whole group's. Collective over the parent's ranks. It shares the
  // parent's arenas: its direct path runs on buffers from the parent's alloc() too (hier's are).
  MpiTransport(MpiTransport& parent, int color, int key, const std::vector<int>& members,
               std::vector<int> whole);
  ~MpiTransport() override {
    if (sh_) std::erase(sh_->staged, this);
    MPI_Comm_free(&comm_);
  }

  // Every process calls it with the same parts (CommGroup::levels): one MPI_Comm_split.
  std::vector<std::unique_ptr<Transport>> split(
      const std::vector<std::vector<int>>& parts) override;
  int nodes() const override { return nodes_; }
  std::string nodes_refusal() const override { return nodes_refusal_; }

  Launcher launcher() const override { return Launcher::Mpi; }
  int size() const override { return size_; }
  int processes() const override { return size_; }
  bool is_local(int rank) const override { return rank == rank_; }
  Device& device(int rank) const override {
    DPB_CHECK(rank == rank_, words(rank) << " lives in another process (this one is " << who()
                                         << ")");
    return dev_;
  }
  BackendKind kind() const override { return dev_.kind(); }

  long barrier_spin_ns() const override { return spin_ns_; }
  void set_barrier_spin_ns(long ns) override { spin_ns_ = ns; }

  // Over messages, collectives run on (parts of) these buffers: the staging is sized for the
  // largest here, at setup, so that no timed step allocates (a device synchronization on CUDA).
  // Arena memory is this rank's device memory too: charged to the device's ledger (so a capacity
  // applies), given back by arena_owner_.
  Buffer alloc(int rank, size_t n, MemCategory cat, const char* what) override;

  // Shared memory: every rank publishes where buf lies in its arena (-1: not in it); after a
  // barrier all ranks see the same offsets, so all agree whether this call moves data in place.
  // Two slots, by the parity of the call: a rank can be one call ahead, not two (this barrier).
  void begin(int rank, float* buf) override;

  // fence: the direct path's, as the threads transport's; over messages a matched send and
  // receive already orders the two ranks.
  void step(int rank, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
            bool fence) override;
  void fence(int rank) override {
    check(rank);
    if (direct_) shm_barrier();
  }

  void barrier(int rank) override {
    check(rank);
    if (direct_ok_) return shm_barrier();  // CPU only: nothing queued to order
    if (!host_) {
      dev_.comm_synchronize();
      upload_pending_ = false;
    }
    WaitScope watched(slot(), WaitKind::Library);
    MPI_CHECK(MPI_Barrier(comm_), who() << ", barrier");
  }

  void broadcast_host(int rank, void* data, size_t bytes, int root) override {
    check(rank);
    WaitScope watched(slot(), WaitKind::Library);
    MPI_CHECK(MPI_Bcast(data, count(bytes), MPI_BYTE, root, comm_),
              who() << ", broadcast of " << bytes << " bytes from " << words(root));
  }

  void allgather_host(int rank, const void* mine, void* all, size_t bytes) override {
    check(rank);
    WaitScope watched(slot(), WaitKind::Library);
    MPI_CHECK(MPI_Allgather(mine, count(bytes), MPI_BYTE, all, count(bytes), MPI_BYTE, comm_),
              who() << ", all-gather of " << bytes << " bytes");
  }

  void allreduce_sum(int rank, float* buf, size_t n);

  // MPI_Reduce_scatter_block / MPI_Reduce_scatter (reduce) or MPI_Allgather / MPI_Allgatherv in
  // place on the whole buffer, rank r's shard being chunk r (collectives/shard.h); the _block and
  // plain forms when k divides n, the forms with counts otherwise. Staging as allreduce_sum's.
  void shard_collective(int rank, float* buf, size_t n, bool reduce);

  [[noreturn]] void abort(int rank, const std::string& why) override {
    aborted_ = true;
    if (direct_ok_) header(0)->barrier.abort();
    mpi_abort_job(whole_[size_t(rank_)], why);  // a sub-group's rank by its number in the job
  }
  bool aborted() const override { return aborted_; }
  bool direct_ok() const { return direct_ok_; }
  WatchBoard* watch_board() override { return board_.get(); }

 private:
  static constexpr int kTag = 15;

  // A transport's control block in every rank's arena (the whole group's: at the arena's start;
  // a sub-group's: allocated in it): what it publishes; rank 0's also holds the barrier.
  struct Header {
    ShmBarrier barrier;
    std::atomic<int64_t> published[2];
    WatchSlot watch;  // this rank's wait slot, read by every process's watchdog (the whole
                      // group's: a sub-group's board views those, make_board)
  };
  static_assert(sizeof(Header) <= ShmArena::kHeader);
  ShmArena* arena() const { return sh_ ? sh_->arena.get() : nullptr; }
  char* base(int r) const { return sh_->bases[size_t(whole_[size_t(r)])]; }  // rank r's arena
  Header* header(int r) const { return reinterpret_cast<Header*>(base(r) + ctl_off_[size_t(r)]); }
  // The direct path may serve this group: shared memory, every member's arena mapped here, every
  // member on one node (emulated nodes too: across them, messages as between machines).
  bool members_direct() const {
    if (!arena() || size_ < 2) return false;
    for (int p = 0; p < size_; ++p)
      if (!base(p) || sh_->node[size_t(whole_[size_t(p)])] != sh_->node[size_t(whole_[0])])
        return false;
    return true;
  }
  // The watchdog's view (src/core/watchdog.h): with shared memory the slots of every member on
  // this node, in the control blocks; over messages this rank's only (a wait then names the peer
  // it waits on). A sub-group's board is a view of its parent's (parent, members: its ranks in
  // the parent's numbers): the whole group's slots, so that every process judges the whole group
  // (a rank waiting in its node's group is not one that never arrived) in its ranks' numbers.
  void make_board(const WatchBoard* parent = nullptr, const std::vector<int>* members = nullptr);
  // A rank of this group as the watchdog's messages name it: its number in the whole group.
  int name(int rank) const { return board_ ? board_->name(rank) : whole_[size_t(rank)]; }
  // Rank r of this group, and this rank, as error messages name them: by the number in the whole
  // group (the one the user launched), a sub-group's own number in parentheses where it differs.
  std::string words(int r) const { return group_rank_words(r, whole_); }
  std::string who() const { return words(rank_); }
  // A sub-group's control block: in this process's arena, its offset told to every member.
  void setup_sub_shm();

  void shm_barrier() {
    header(0)->barrier.arrive_and_wait(size_, spin_ns_, pids_, rank_, slot(), whole_);
  }
  WatchSlot* slot() const { return board_ ? board_->local_slot(rank_) : nullptr; }

  // Collective, the whole group's set-up. Nodes: each rank's real node (MPI_Comm_split_type),
  // the emulated ones when `nodes` > 1 (ranks r / (size / nodes)), every process's `nodes` the
  // same. Shared memory when every rank is a CPU process: each makes a sparse arena and maps its
  // node peers' through /proc/<pid>/fd. Any rank that fails sends the whole group back to
  // messages, with a note from the rank that failed. The direct path then serves every group
  // (this one, its sub-groups) whose members are on one node (members_direct). DPB_SHM=0:
  // messages always; DPB_SHM=1: the direct path for every collective of a group on one node, or
  // an error saying why not.
  void setup_shm(int nodes);

  bool staged(const RecvOp& r) const { return !host_ || r.op == RecvOp::Reduce; }

  void check(int rank) const {
    DPB_CHECK(rank == rank_, "MPI transport of " << who() << " called as " << words(rank));
  }
  static int count(size_t n) {
    DPB_CHECK(n <= size_t(INT_MAX), "MPI transport: a message of " << n << " elements exceeds "
                                                                    "MPI's int count");
    return int(n);
  }

  // Staging for messages of up to n floats (host: received sums; other devices: also the sends
  // and the device copies of received sums), allocated once: at setup (stage_for), or here when
  // a collective runs on a buffer larger than any from alloc() (tests count alloc_host calls).
  void reserve_staging(size_t n);
  // A collective buffer of n floats: every group of this process that moves data by messages
  // stages for it (a cross-node group of hier moves 1/g of it; sized for all of it, as naive's
  // root may receive more).
  void stage_for(size_t n);
  // At the end of construction: a group that moves data by messages joins ProcShared::staged
  // and stages for the largest buffer allocated before it.
  void join_staged();

  // Posts MPI_Irecv for recvs[next..] while their staged floats fit rstage_ (at least one
  // receive: reserve_staging made room for the largest); advances next, returns the staged floats.
  size_t post_receives(std::span<const RecvOp> recvs, size_t& next);

  // The staged receives (in rstage_, in the order of recvs) into place, on the comm stream: a
  // copy is uploaded to its destination, a sum to dstage_ and added there. Nothing waits: the
  // host waits (upload_pending_) before it writes rstage_ again.
  void apply(std::span<const RecvOp> recvs, size_t total);

  Device& dev_;
  const int rank_, size_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool host_ = true;
  bool aborted_ = false;
  float* buf_ = nullptr;
  // Staging (reserve_staging): host memory from the device (pinned on CUDA) for received data
  // and, on non-host devices, sent data; device memory for received sums. staged_cap_ floats each.
  HostBuffer rstage_, sstage_;
  Buffer dstage_;
  size_t staged_cap_ = 0;
  bool upload_pending_ = false;  // comm-stream uploads may still read rstage_
  std::vector<MPI_Request> rreqs_, sreqs_;
  long spin_ns_ = 0;                 // process barrier polling (see HostBarrier)
  // The ranks' nodes and shared memory (setup_shm), shared with the sub-groups split from this
  // transport (whole_: this group's ranks in the whole group's numbering, ProcShared's).
  std::vector<int> whole_;
  std::shared_ptr<ProcShared> sh_;
  std::vector<int64_t> ctl_off_;  // by rank: its control block's offset in its arena (header())
  int nodes_ = 1;                 // Transport::nodes (the whole group's; sub-groups: 1)
  std::string nodes_refusal_;
  bool direct_ok_ = false;        // members_direct(): the direct path serves this group
  // Gives arena buffers back to the arena and their bytes to the device's ledger.
  struct ArenaOwner final : MemoryOwner {
    MpiTransport* t;
    explicit ArenaOwner(MpiTransport* tr) : t(tr) {}
    void release(float* p) override {
      t->dev_.memory().release(p);
      t->arena()->release(p);
    }
  } arena_owner_{this};
  std::vector<pid_t> pids_;  // by rank (the process barrier's view of dead peers)
  std::vector<float*> ptrs_;
  uint64_t begins_ = 0;
  bool direct_ = false;    // this call moves data in place
  // Last: gone before the arena and the mappings its slots live in.
  std::unique_ptr<WatchBoard> board_;
};

}  // namespace mpi_detail
}  // namespace dpb
