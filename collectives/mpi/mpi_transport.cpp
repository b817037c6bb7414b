// mpi_transport.cpp: MpiSession, the MPI transport, MPI_Allreduce, MPI_Reduce_scatter(_block) and
// MPI_Allgather(v) (see mpi_transport.h). Built only when
// CMake finds MPI (else mpi_absent.cpp). Tested by tests/mpi_test.sh (mpirun -np 2 and 3).
#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/mpi/mpi_transport.h"
#include "collectives/shm.h"
#include "src/core/check.h"
#include "src/core/launcher.h"

namespace dpb {
namespace {

std::string mpi_error(int code) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, msg, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(msg, size_t(len));
}

}  // namespace

// MPI_CHECK(call, "context"): throws dpb::Error naming the call, the context and MPI's message.
#define MPI_CHECK(call, ctx)                                                              \
  do {                                                                                    \
    const int dpb_rc_ = (call);                                                           \
    DPB_CHECK(dpb_rc_ == MPI_SUCCESS, #call << " failed (" << ctx << "): " << mpi_error(dpb_rc_)); \
  } while (0)

bool mpi_built() { return true; }

namespace {

// This process's rank among, and the number of, the processes of `comm` on its node; leader:
// the node's first rank in comm (the node's name in node_layout).
void node_rank_size(MPI_Comm comm, int rank, int& node_rank, int& node_size,
                    int* leader = nullptr) {
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
            "processes of this node");
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  if (leader) {
    *leader = rank;
    MPI_CHECK(MPI_Allreduce(&rank, leader, 1, MPI_INT, MPI_MIN, node), "the node's first rank");
  }
  MPI_Comm_free(&node);
}

// What a transport and the sub-groups split from it share (one per whole group, by its ranks):
// each rank's node (emulated --nodes / DPB_NODES, else the real one) and, when CPU processes
// share memory, this process's arena and its node peers' arenas mapped here.
struct ProcShared {
  std::vector<int> node;                          // by rank: its node's id
  std::unique_ptr<ShmArena> arena;                // null: no shared memory
  std::vector<std::unique_ptr<ShmMapping>> maps;  // the node peers' arenas
  std::vector<char*> bases;                       // by rank: its arena here (nullptr: not mapped)
  std::vector<pid_t> pids;                        // by rank
  bool required = false;                          // DPB_SHM=1
};

}  // namespace

MpiSession::MpiSession() {
  int inited = 0;
  MPI_Initialized(&inited);
  DPB_CHECK(!inited, "MpiSession: MPI is already initialized (one MpiSession per process)");
  int provided = 0;
  MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "start-up");
  // Errors come back as codes (MPI_CHECK turns them into messages) instead of aborting silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "world");
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_), "world");
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
    library_.assign(lib, size_t(len));
    if (auto nl = library_.find('\n'); nl != std::string::npos) library_.resize(nl);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    const std::string why =
        "the MPI library (" + library_ + ") provides thread level " + std::to_string(provided) +
        " but dpbench needs MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) +
        "): a rank's thread and its gradient communication thread both call MPI. Use an MPI "
        "built with thread support (Debian's OpenMPI is)";
    MPI_Finalize();
    throw Error(why);
  }
  node_rank_size(MPI_COMM_WORLD, rank_, local_rank_, local_size_);
}

MpiSession::~MpiSession() { MPI_Finalize(); }

void mpi_abort_job(int rank, const std::string& msg, int code) {
  std::fprintf(stderr, "dpbench: %s\n", rank_error_message(rank, msg).c_str());  // no "rank R: " twice
  std::fflush(stderr);
  std::fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // not reached: MPI_Abort does not return
}

namespace {

class MpiTransport final : public Transport {
 public:
  // The whole group: rank `rank` of `size` over a duplicate of MPI_COMM_WORLD, on `nodes`
  // emulated nodes (1: the real ones).
  MpiTransport(Device& dev, int rank, int size, int nodes)
      : dev_(dev), rank_(rank), size_(size) {
    int world = 0, me = 0;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world), "world");
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me), "world");
    DPB_CHECK(world == size && me == rank, "MPI transport: rank " << rank << " of " << size
                                               << " but MPI_COMM_WORLD has rank " << me << " of "
                                               << world);
    DPB_CHECK(dev.rank() == rank, "MPI transport: the device is rank " << dev.rank()
                                                                       << "'s, not rank " << rank);
    DPB_CHECK(nodes >= 1 && size % nodes == 0,
              "--nodes (DPB_NODES) " << nodes << ": the " << size << " processes must split into "
                                     << "emulated nodes of equal size (a divisor of " << size << ")");
    for (int r = 0; r < size; ++r) whole_.push_back(r);
    {
      // The set-up's collective calls wait for every process too: watched on a board of this
      // rank alone (a peer stopped before its group exists still ends the job with exit 5).
      WatchBoard setup_board(size, rank, nullptr, {});
      WatchLabel label(setup_board.local_slot(rank), "the MPI group's set-up");
      WaitScope watched(setup_board.local_slot(rank), WaitKind::Library);
      MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "a communicator for the group");
      MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
      host_ = dev.kind() == BackendKind::Cpu;  // CPU: device memory is host memory, synchronous
      spin_ns_ = default_barrier_spin_ns(size);
      setup_shm(nodes);
    }
    make_board();
  }
  // A sub-group of `parent` (split): MPI_Comm_split of its communicator by color (the part this
  // rank is in) and key (its place there); members: the sub-group's ranks in the parent's
  // numbering, whole: in the whole group's. Collective over the parent's ranks. It shares the
  // parent's arenas: its direct path runs on buffers from the parent's alloc() too (hier's are).
  MpiTransport(MpiTransport& parent, int color, int key, const std::vector<int>& members,
               std::vector<int> whole)
      : dev_(parent.dev_), rank_(key), size_(int(whole.size())), whole_(std::move(whole)),
        sh_(parent.sh_) {
    {
      // As the whole group's set-up, on a board in the whole group's numbers (its messages').
      const int whole_rank = whole_[size_t(rank_)];
      WatchBoard setup_board(int(sh_->node.size()), whole_rank, nullptr, {});
      WatchLabel label(setup_board.local_slot(whole_rank), "the MPI sub-group's set-up");
      WaitScope watched(setup_board.local_slot(whole_rank), WaitKind::Library);
      MPI_CHECK(MPI_Comm_split(parent.comm_, color, key, &comm_),
                parent.who() << ", sub-group " << color);
      MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
      int me = -1, n = 0;
      MPI_CHECK(MPI_Comm_rank(comm_, &me), "sub-group");
      MPI_CHECK(MPI_Comm_size(comm_, &n), "sub-group");
      DPB_CHECK(me == rank_ && n == size_, "MPI sub-group " << color << ": rank " << me << " of "
                                               << n << ", expected " << rank_ << " of " << size_
                                               << " (did every process split alike?)");
      host_ = parent.host_;
      spin_ns_ = parent.spin_ns_;
      setup_sub_shm();
    }
    make_board(parent.board_.get(), &members);
  }
  ~MpiTransport() override { MPI_Comm_free(&comm_); }

  // Every process calls it with the same parts (CommGroup::levels): one MPI_Comm_split.
  std::vector<std::unique_ptr<Transport>> split(
      const std::vector<std::vector<int>>& parts) override {
    int color = -1, key = -1, total = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      total += int(parts[i].size());
      for (size_t m = 0; m < parts[i].size(); ++m)
        if (parts[i][m] == rank_) {
          DPB_CHECK(color < 0, "sub-groups: " << who() << " is in two parts");
          color = int(i);
          key = int(m);
        }
    }
    DPB_CHECK(color >= 0 && total == size_, "sub-groups: the parts hold " << total << " of "
                                                << size_ << " ranks"
                                                << (color < 0 ? ", not " + who() : ""));
    std::vector<int> whole;
    for (int m : parts[size_t(color)]) whole.push_back(whole_[size_t(m)]);
    std::vector<std::unique_ptr<Transport>> out(parts.size());
    out[size_t(color)] =
        std::make_unique<MpiTransport>(*this, color, key, parts[size_t(color)], std::move(whole));
    return out;
  }
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
  Buffer alloc(int rank, size_t n, MemCategory cat, const char* what) override {
    check(rank);
    if (!arena()) {
      reserve_staging(n);
      return Buffer(dev_, n, cat, what);
    }
    // Over messages from the arena: a group across nodes, whose node groups go direct on it.
    if (!direct_ok_) reserve_staging(n);
    dev_.memory().reserve(n * sizeof(float), cat, what);
    float* p = nullptr;
    try {
      p = arena()->alloc(n, what);
    } catch (...) {
      dev_.memory().unreserve(n * sizeof(float), cat);
      throw;
    }
    dev_.memory().track(p, n * sizeof(float), cat);
    return Buffer(arena_owner_, p, n);
  }

  // Shared memory: every rank publishes where buf lies in its arena (-1: not in it); after a
  // barrier all ranks see the same offsets, so all agree whether this call moves data in place.
  // Two slots, by the parity of the call: a rank can be one call ahead, not two (this barrier).
  void begin(int rank, float* buf) override {
    check(rank);
    buf_ = buf;
    direct_ = false;
    if (!direct_ok_) return;
    const int slot = int(begins_++ & 1);
    header(rank_)->published[slot].store(arena()->offset_of(buf));
    shm_barrier();
    for (int p = 0; p < size_; ++p) {
      const int64_t off = header(p)->published[slot].load();
      DPB_CHECK(off >= 0 || !sh_->required, "DPB_SHM=1 but " << words(p) << "'s buffer of this "
                                        "collective is not from CommGroup::alloc (shared memory)");
      if (off < 0) return;
      ptrs_[p] = reinterpret_cast<float*>(base(p) + off);
    }
    direct_ = true;
  }

  // fence: the direct path's, as the threads transport's; over messages a matched send and
  // receive already orders the two ranks.
  void step(int rank, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
            bool fence) override {
    check(rank);
    if (direct_) {
      direct_moves(dev_, ptrs_, rank_, sends, recvs);
      if (fence) shm_barrier();
      return;
    }
    // Host staging: this step's sends as one span of the published buffer, and each receive
    // that is summed (or that lands in device memory) at its own place, in list order.
    size_t lo = SIZE_MAX, hi = 0, rmax = 0;
    if (!host_)
      for (const SendOp& s : sends)
        if (s.len > 0) lo = std::min(lo, s.off), hi = std::max(hi, s.off + s.len);
    for (const RecvOp& r : recvs) rmax = std::max(rmax, staged(r) ? r.len : 0);
    const size_t span = hi > lo ? hi - lo : 0;
    reserve_staging(std::max(span, rmax));  // no-op unless a buffer outgrows alloc()'s
    // Device data to the host on the comm stream (after the comm work that produced it: the last
    // step's sums, GradSync's wait for this unit's gradients), while compute goes on. One host
    // wait, for the copy the sends need and for rstage_ to be free (the last step's uploads).
    if (span > 0) dev_.comm_download(sstage_.get(), buf_ + lo, span);
    if (span > 0 || upload_pending_) {
      dev_.comm_synchronize();
      upload_pending_ = false;
    }
    size_t next = 0, first = 0;
    size_t staged_n = post_receives(recvs, next);
    sreqs_.clear();
    for (const SendOp& s : sends) {
      if (s.len == 0) continue;
      const float* src = host_ ? buf_ + s.off : sstage_.get() + (s.off - lo);
      sreqs_.emplace_back();
      MPI_CHECK(MPI_Isend(src, count(s.len), MPI_FLOAT, s.to, kTag, comm_, &sreqs_.back()),
                who() << " sending " << s.len << " floats to " << words(s.to));
    }
    // Receives in batches that fit rstage_ (one batch unless a step receives more than the
    // largest buffer, e.g. naive's rank 0 from every peer); every send is posted already.
    for (;;) {
      WaitScope watched(slot(), WaitKind::Receive, next > first ? name(recvs[first].from) : -1);
      MPI_CHECK(MPI_Waitall(int(rreqs_.size()), rreqs_.data(), MPI_STATUSES_IGNORE),
                who() << ", receives " << first << ".." << next << " of a step of "
                      << sends.size() << " sends and " << recvs.size() << " receives");
      apply(recvs.subspan(first, next - first), staged_n);
      if (next >= recvs.size()) break;
      if (upload_pending_) {  // rstage_ is read by the uploads just queued
        dev_.comm_synchronize();
        upload_pending_ = false;
      }
      first = next;
      staged_n = post_receives(recvs, next);
    }
    WaitScope watched(slot(), WaitKind::Send, sends.empty() ? -1 : name(sends[0].to));
    MPI_CHECK(MPI_Waitall(int(sreqs_.size()), sreqs_.data(), MPI_STATUSES_IGNORE),
              who() << ", sends of a step of " << sends.size() << " sends and "
                    << recvs.size() << " receives");
  }
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

  void allreduce_sum(int rank, float* buf, size_t n) {
    check(rank);
    WaitScope watched(slot(), WaitKind::Library);
    if (host_) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, count(n), MPI_FLOAT, MPI_SUM, comm_),
                who() << ", " << n << " floats");
      return;
    }
    // On the comm stream, as step(): the host waits for the download only; the upload of the
    // sum is stream-ordered before the next comm work (the next download into sstage_ included).
    reserve_staging(n);
    dev_.comm_download(sstage_.get(), buf, n);
    dev_.comm_synchronize();
    upload_pending_ = false;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sstage_.get(), count(n), MPI_FLOAT, MPI_SUM, comm_),
              who() << ", " << n << " floats");
    dev_.comm_upload(buf, sstage_.get(), n);
  }

  // MPI_Reduce_scatter_block / MPI_Reduce_scatter (reduce) or MPI_Allgather / MPI_Allgatherv in
  // place on the whole buffer, rank r's shard being chunk r (collectives/shard.h); the _block and
  // plain forms when k divides n, the forms with counts otherwise. Staging as allreduce_sum's.
  void shard_collective(int rank, float* buf, size_t n, bool reduce) {
    check(rank);
    const int k = size_;
    std::vector<int> counts(static_cast<size_t>(k)), displs(static_cast<size_t>(k));
    for (int r = 0; r < k; ++r) {
      counts[size_t(r)] = count(chunk_size(n, k, r));
      displs[size_t(r)] = count(chunk_begin(n, k, r));
    }
    const bool even = n % size_t(k) == 0;
    const size_t off = chunk_begin(n, k, rank_), len = chunk_size(n, k, rank_);
    float* host = buf;
    if (!host_) {  // the host waits for the download only, as in allreduce_sum
      reserve_staging(n);
      if (reduce) dev_.comm_download(sstage_.get(), buf, n);
      else if (len > 0) dev_.comm_download(sstage_.get() + off, buf + off, len);
      dev_.comm_synchronize();
      upload_pending_ = false;
      host = sstage_.get();
    }
    const std::string what = std::string(reduce ? "reduce-scatter" : "all-gather") + " of " +
                             std::to_string(n) + " floats";
    WaitScope watched(slot(), WaitKind::Library);
    if (reduce) {
      if (even)
        MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, host, counts[0], MPI_FLOAT, MPI_SUM, comm_),
                  who() << ", " << what);
      else
        MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, host, counts.data(), MPI_FLOAT, MPI_SUM, comm_),
                  who() << ", " << what);
      // In place, MPI leaves this rank's block at the start of the buffer: move it to the shard.
      if (host_) {
        if (off > 0 && len > 0) std::memmove(buf + off, buf, len * sizeof(float));
      } else if (len > 0) {
        dev_.comm_upload(buf + off, host, len);
      }
    } else {
      if (even)
        MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host, counts[0], MPI_FLOAT,
                                comm_),
                  who() << ", " << what);
      else
        MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host, counts.data(),
                                 displs.data(), MPI_FLOAT, comm_),
                  who() << ", " << what);
      if (!host_) dev_.comm_upload(buf, host, n);
    }
  }

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
  void make_board(const WatchBoard* parent = nullptr, const std::vector<int>* members = nullptr) {
    std::vector<WatchSlot*> peers(size_t(size_), nullptr);
    if (arena()) {
      pids_.clear();
      for (int p = 0; p < size_; ++p) {
        pids_.push_back(sh_->pids[size_t(whole_[size_t(p)])]);
        if (base(p)) peers[size_t(p)] = &header(p)->watch;
      }
    }
    ptrs_.assign(size_t(size_), nullptr);
    if (parent && members) {
      board_ = std::make_unique<WatchBoard>(*parent, *members);
      return;
    }
    board_ = std::make_unique<WatchBoard>(size_, rank_, arena() ? &header(rank_)->watch : nullptr,
                                          peers);
  }
  // A rank of this group as the watchdog's messages name it: its number in the whole group.
  int name(int rank) const { return board_ ? board_->name(rank) : whole_[size_t(rank)]; }
  // Rank r of this group, and this rank, as error messages name them: by the number in the whole
  // group (the one the user launched), a sub-group's own number in parentheses where it differs.
  std::string words(int r) const { return group_rank_words(r, whole_); }
  std::string who() const { return words(rank_); }
  // A sub-group's control block: in this process's arena, its offset told to every member.
  void setup_sub_shm() {
    ctl_off_.assign(size_t(size_), 0);
    if (!arena()) return;
    float* c = arena()->alloc((sizeof(Header) + sizeof(float) - 1) / sizeof(float),
                              "MPI sub-group control block");
    new (c) Header();
    const int64_t off = arena()->offset_of(c);
    MPI_CHECK(MPI_Allgather(&off, 1, MPI_INT64_T, ctl_off_.data(), 1, MPI_INT64_T, comm_),
              who() << ", exchanging the sub-group's control blocks");
    direct_ok_ = members_direct();
  }

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
  void setup_shm(int nodes) {
    const char* env = std::getenv("DPB_SHM");
    if (env && !*env) env = nullptr;  // set but empty: the default
    DPB_CHECK(!env || !std::strcmp(env, "0") || !std::strcmp(env, "1"),
              "environment variable DPB_SHM='" << env << "' must be 0 (MPI messages between the "
                                                 "processes of a node) or 1 (shared memory)");
    const bool off = env && !std::strcmp(env, "0"), required = env && !std::strcmp(env, "1");
    int node_rank = 0, local = 0, leader = rank_;
    node_rank_size(comm_, rank_, node_rank, local, &leader);
    DPB_CHECK(!required || size_ < 2 || (host_ && local == size_),
              "DPB_SHM=1 but the direct path needs every rank on this node's CPU backend ("
                  << size_ << " ranks, " << local << " on this node, backend " << dev_.name()
                  << ")");
    // One answer for every rank: a rank that cannot or may not take the direct path (DPB_SHM=0,
    // another backend) sends all to messages, so their collectives stay the same (ranks whose
    // DPB_SHM or backend differ are then named by check_ranks_agree, src/train/agree.h).
    int want = !(off || !host_ || size_ < 2), all_want = want;
    if (size_ >= 2)
      MPI_CHECK(MPI_Allreduce(&want, &all_want, 1, MPI_INT, MPI_MIN, comm_),
                who() << ", agreeing on the direct path");
    size_t mb = 65536;  // virtual: pages cost memory once written
    if (const char* e = std::getenv("DPB_SHM_ARENA_MB")) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(e, &end, 10);
      DPB_CHECK(end != e && *end == '\0' && v >= 1 && v <= (1ull << 24),
                "environment variable DPB_SHM_ARENA_MB='" << e << "' is not a size in MiB in "
                                                             "[1, 16777216]");
      mb = size_t(v);
    }
    struct Info {
      int64_t pid, fd, bytes, leader, nodes;
    } mine{int64_t(getpid()), -1, 0, leader, nodes};
    auto sh = std::make_shared<ProcShared>();
    sh->required = required;
    std::string why;
    if (all_want) try {
      sh->arena = std::make_unique<ShmArena>(mb << 20);
      new (sh->arena->header()) Header();  // the whole group's control block
      mine.fd = sh->arena->fd();
      mine.bytes = int64_t(sh->arena->bytes());
    } catch (const Error& e) {
      why = e.what();
    }
    std::vector<Info> all(static_cast<size_t>(size_));
    MPI_CHECK(MPI_Allgather(&mine, sizeof(Info), MPI_BYTE, all.data(), sizeof(Info), MPI_BYTE,
                            comm_),
              who() << ", exchanging nodes and shared-memory handles");
    // The nodes: emulated, or the real ones when they hold equal ranks numbered node by node.
    std::vector<int> real(static_cast<size_t>(size_));
    for (int p = 0; p < size_; ++p) {
      DPB_CHECK(all[size_t(p)].nodes == nodes,
                "--nodes (DPB_NODES): rank " << p << " splits the processes into "
                                             << all[size_t(p)].nodes << " nodes, rank " << rank_
                                             << " into " << nodes << ": give every process the same");
      real[size_t(p)] = int(all[size_t(p)].leader);
    }
    int real_nodes = 1;
    nodes_refusal_ = node_layout(real, real_nodes);
    if (nodes > 1) {
      nodes_ = nodes;
      nodes_refusal_.clear();
      for (int p = 0; p < size_; ++p) sh->node.push_back(p / (size_ / nodes));
    } else {
      nodes_ = real_nodes;
      sh->node = real;
    }
    sh->bases.assign(size_t(size_), nullptr);
    for (int p = 0; p < size_; ++p) sh->pids.push_back(pid_t(all[size_t(p)].pid));
    ctl_off_.assign(size_t(size_), 0);  // every arena's start
    sh_ = sh;
    if (!all_want) return;
    for (int p = 0; p < size_ && why.empty(); ++p) {
      if (all[size_t(p)].fd < 0) why = "rank " + std::to_string(p) + " has no shared arena";
      else if (p == rank_) sh->bases[size_t(p)] = sh->arena->base();
      else if (all[size_t(p)].leader == leader) try {  // a peer of this node
        sh->maps.push_back(std::make_unique<ShmMapping>(pid_t(all[size_t(p)].pid),
                                                        int(all[size_t(p)].fd),
                                                        size_t(all[size_t(p)].bytes)));
        sh->bases[size_t(p)] = sh->maps.back()->base();
      } catch (const Error& e) {
        why = e.what();
      }
    }
    int ok = why.empty(), all_ok = 0;
    MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm_),
              who() << ", agreeing on shared memory");
    if (all_ok) {
      direct_ok_ = members_direct();
      return;
    }
    DPB_CHECK(!required, "DPB_SHM=1 but " << (why.empty() ? "another rank could not share "
                                                             "memory" : why));
    if (!why.empty())
      std::fprintf(stderr, "dpbench: rank %d: note: no shared memory between the ranks of this "
                   "node (%s): MPI messages instead\n", rank_, why.c_str());
    sh->maps.clear();
    sh->arena.reset();
    sh->bases.assign(size_t(size_), nullptr);
  }

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
  // and the device copies of received sums), allocated once: at setup from alloc(), or here when
  // a collective runs on a larger buffer (tests count Device::alloc_host calls).
  void reserve_staging(size_t n) {
    if (n <= staged_cap_) return;
    if (!host_) {
      dev_.comm_synchronize();  // queued staging copies may still use the old buffers
      upload_pending_ = false;
    }
    rstage_ = HostBuffer(dev_, n, "MPI receive staging (host)");
    if (!host_) {
      sstage_ = HostBuffer(dev_, n, "MPI send staging (host)");
      dstage_.reset();
      dstage_ = Buffer(dev_, n, MemCategory::Comm, "MPI receive staging (device)");
    }
    staged_cap_ = n;
  }

  // Posts MPI_Irecv for recvs[next..] while their staged floats fit rstage_ (at least one
  // receive: reserve_staging made room for the largest); advances next, returns the staged floats.
  size_t post_receives(std::span<const RecvOp> recvs, size_t& next) {
    rreqs_.clear();
    size_t o = 0;
    for (; next < recvs.size(); ++next) {
      const RecvOp& r = recvs[next];
      if (r.len == 0) continue;
      if (staged(r) && o > 0 && o + r.len > staged_cap_) break;
      // A copy into host memory lands in place; a sum, or device memory, goes through staging.
      float* into = staged(r) ? rstage_.get() + o : r.dst;
      if (staged(r)) o += r.len;
      rreqs_.emplace_back();
      MPI_CHECK(MPI_Irecv(into, count(r.len), MPI_FLOAT, r.from, kTag, comm_, &rreqs_.back()),
                who() << " receiving " << r.len << " floats from " << words(r.from));
    }
    return o;
  }

  // The staged receives (in rstage_, in the order of recvs) into place, on the comm stream: a
  // copy is uploaded to its destination, a sum to dstage_ and added there. Nothing waits: the
  // host waits (upload_pending_) before it writes rstage_ again.
  void apply(std::span<const RecvOp> recvs, size_t total) {
    if (total == 0) return;
    size_t o = 0;
    for (const RecvOp& r : recvs) {
      if (r.len == 0 || !staged(r)) continue;
      const float* from = rstage_.get() + o;
      if (!host_) {
        if (r.op != RecvOp::Reduce) {
          dev_.comm_upload(r.dst, from, r.len);
          o += r.len;
          continue;
        }
        dev_.comm_upload(dstage_.get() + o, from, r.len);
        from = dstage_.get() + o;
      }
      if (r.op == RecvOp::Reduce) dev_.comm_reduce(r.dst, from, r.len);
      else dev_.comm_copy(r.dst, from, r.len);
      o += r.len;
    }
    upload_pending_ = !host_;
  }

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

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(Device& dev, int rank, int size,
                                              const LinkSpec& link) {
  const LinkSpec l = with_env_nodes(link);  // --nodes, else DPB_NODES
  auto t = std::make_unique<MpiTransport>(dev, rank, size, l.nodes);
  if (!l.enabled()) return t;
  // Paced at the seam the threads transport is paced at (link.h), on this process's own fabric;
  // between emulated nodes with the inter-node spec (a sub-group books in the whole group's ranks).
  return with_link(std::move(t), std::make_shared<LinkFabric>(size, l));
}

bool mpi_direct_path(Transport& t) {
  auto* m = dynamic_cast<MpiTransport*>(&unpaced(t));
  return m && m->direct_ok();
}

void mpi_allreduce_sum(Transport& t, int rank, float* buf, size_t n) {
  auto* m = dynamic_cast<MpiTransport*>(&unpaced(t));
  DPB_CHECK(m, "--allreduce mpi needs one process per rank (this group's ranks are "
                   << launcher_name(t.launcher()) << ")");
  m->allreduce_sum(rank, buf, n);
}

void mpi_reduce_scatter_sum(Transport& t, int rank, float* buf, size_t n) {
  auto* m = dynamic_cast<MpiTransport*>(&unpaced(t));
  DPB_CHECK(m, "reduce-scatter mpi needs one process per rank (this group's ranks are "
                   << launcher_name(t.launcher()) << ")");
  m->shard_collective(rank, buf, n, /*reduce=*/true);
}

void mpi_allgather(Transport& t, int rank, float* buf, size_t n) {
  auto* m = dynamic_cast<MpiTransport*>(&unpaced(t));
  DPB_CHECK(m, "all-gather mpi needs one process per rank (this group's ranks are "
                   << launcher_name(t.launcher()) << ")");
  m->shard_collective(rank, buf, n, /*reduce=*/false);
}

}  // namespace dpb
