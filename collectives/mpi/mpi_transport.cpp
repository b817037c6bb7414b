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

// This process's rank among, and the number of, the processes of `comm` on its node.
void node_rank_size(MPI_Comm comm, int rank, int& node_rank, int& node_size) {
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
            "processes of this node");
  MPI_Comm_rank(node, &node_rank);
  MPI_Comm_size(node, &node_size);
  MPI_Comm_free(&node);
}

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
  MpiTransport(Device& dev, int rank, int size)
      : dev_(dev), rank_(rank), size_(size) {
    int world = 0, me = 0;
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world), "world");
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &me), "world");
    DPB_CHECK(world == size && me == rank, "MPI transport: rank " << rank << " of " << size
                                               << " but MPI_COMM_WORLD has rank " << me << " of "
                                               << world);
    DPB_CHECK(dev.rank() == rank, "MPI transport: the device is rank " << dev.rank()
                                                                       << "'s, not rank " << rank);
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
      setup_shm();
    }
    // The watchdog's view (src/core/watchdog.h): with shared memory every rank's slot, in its
    // arena's header; over messages this rank's only (a wait then names the peer it waits on).
    std::vector<WatchSlot*> peers;
    if (arena_)
      for (int p = 0; p < size_; ++p) peers.push_back(&header(p)->watch);
    board_ = std::make_unique<WatchBoard>(size_, rank_, arena_ ? &header(rank_)->watch : nullptr,
                                          peers);
  }
  ~MpiTransport() override { MPI_Comm_free(&comm_); }

  Launcher launcher() const override { return Launcher::Mpi; }
  int size() const override { return size_; }
  int processes() const override { return size_; }
  bool is_local(int rank) const override { return rank == rank_; }
  Device& device(int rank) const override {
    DPB_CHECK(rank == rank_, "rank " << rank << " lives in another process (this one is rank "
                                     << rank_ << ")");
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
    if (!arena_) {
      reserve_staging(n);
      return Buffer(dev_, n, cat, what);
    }
    dev_.memory().reserve(n * sizeof(float), cat, what);
    float* p = nullptr;
    try {
      p = arena_->alloc(n, what);
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
    if (!arena_) return;
    const int slot = int(begins_++ & 1);
    header(rank_)->published[slot].store(arena_->offset_of(buf));
    shm_barrier();
    for (int p = 0; p < size_; ++p) {
      const int64_t off = header(p)->published[slot].load();
      DPB_CHECK(off >= 0 || !required_, "DPB_SHM=1 but rank " << p << "'s buffer of this "
                                        "collective is not from CommGroup::alloc (shared memory)");
      if (off < 0) return;
      ptrs_[p] = reinterpret_cast<float*>(bases_[p] + off);
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
                "rank " << rank_ << " sending " << s.len << " floats to rank " << s.to);
    }
    // Receives in batches that fit rstage_ (one batch unless a step receives more than the
    // largest buffer, e.g. naive's rank 0 from every peer); every send is posted already.
    for (;;) {
      WaitScope watched(slot(), WaitKind::Receive, next > first ? recvs[first].from : -1);
      MPI_CHECK(MPI_Waitall(int(rreqs_.size()), rreqs_.data(), MPI_STATUSES_IGNORE),
                "rank " << rank_ << ", receives " << first << ".." << next << " of a step of "
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
    WaitScope watched(slot(), WaitKind::Send, sends.empty() ? -1 : sends[0].to);
    MPI_CHECK(MPI_Waitall(int(sreqs_.size()), sreqs_.data(), MPI_STATUSES_IGNORE),
              "rank " << rank_ << ", sends of a step of " << sends.size() << " sends and "
                      << recvs.size() << " receives");
  }
  void fence(int rank) override {
    check(rank);
    if (direct_) shm_barrier();
  }

  void barrier(int rank) override {
    check(rank);
    if (arena_) return shm_barrier();  // CPU only: nothing queued to order
    if (!host_) {
      dev_.comm_synchronize();
      upload_pending_ = false;
    }
    WaitScope watched(slot(), WaitKind::Library);
    MPI_CHECK(MPI_Barrier(comm_), "rank " << rank_ << ", barrier");
  }

  void broadcast_host(int rank, void* data, size_t bytes, int root) override {
    check(rank);
    WaitScope watched(slot(), WaitKind::Library);
    MPI_CHECK(MPI_Bcast(data, count(bytes), MPI_BYTE, root, comm_),
              "rank " << rank_ << ", broadcast of " << bytes << " bytes from rank " << root);
  }

  void allgather_host(int rank, const void* mine, void* all, size_t bytes) override {
    check(rank);
    WaitScope watched(slot(), WaitKind::Library);
    MPI_CHECK(MPI_Allgather(mine, count(bytes), MPI_BYTE, all, count(bytes), MPI_BYTE, comm_),
              "rank " << rank_ << ", all-gather of " << bytes << " bytes");
  }

  void allreduce_sum(int rank, float* buf, size_t n) {
    check(rank);
    WaitScope watched(slot(), WaitKind::Library);
    if (host_) {
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, count(n), MPI_FLOAT, MPI_SUM, comm_),
                "rank " << rank_ << ", " << n << " floats");
      return;
    }
    // On the comm stream, as step(): the host waits for the download only; the upload of the
    // sum is stream-ordered before the next comm work (the next download into sstage_ included).
    reserve_staging(n);
    dev_.comm_download(sstage_.get(), buf, n);
    dev_.comm_synchronize();
    upload_pending_ = false;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sstage_.get(), count(n), MPI_FLOAT, MPI_SUM, comm_),
              "rank " << rank_ << ", " << n << " floats");
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
                  "rank " << rank_ << ", " << what);
      else
        MPI_CHECK(MPI_Reduce_scatter(MPI_IN_PLACE, host, counts.data(), MPI_FLOAT, MPI_SUM, comm_),
                  "rank " << rank_ << ", " << what);
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
                  "rank " << rank_ << ", " << what);
      else
        MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, host, counts.data(),
                                 displs.data(), MPI_FLOAT, comm_),
                  "rank " << rank_ << ", " << what);
      if (!host_) dev_.comm_upload(buf, host, n);
    }
  }

  [[noreturn]] void abort(int rank, const std::string& why) override {
    aborted_ = true;
    if (arena_) header(0)->barrier.abort();
    mpi_abort_job(rank, why);
  }
  bool aborted() const override { return aborted_; }
  WatchBoard* watch_board() override { return board_.get(); }

 private:
  static constexpr int kTag = 15;

  // At the start of every rank's arena: what it publishes; rank 0's also holds the barrier.
  struct Header {
    ShmBarrier barrier;
    std::atomic<int64_t> published[2];
    WatchSlot watch;  // this rank's wait slot, read by every process's watchdog
  };
  static_assert(sizeof(Header) <= ShmArena::kHeader);
  Header* header(int r) const { return reinterpret_cast<Header*>(bases_[r]); }

  void shm_barrier() { header(0)->barrier.arrive_and_wait(size_, spin_ns_, pids_, rank_, slot()); }
  WatchSlot* slot() const { return board_ ? board_->local_slot(rank_) : nullptr; }

  // Collective: the direct path when every rank is a CPU process of this node; each makes a
  // sparse arena and maps every peer's through /proc/<pid>/fd. Any rank that fails sends the
  // whole group back to messages, with a note from the rank that failed. DPB_SHM=0: messages
  // always; DPB_SHM=1: the direct path for every collective, or an error saying why not.
  void setup_shm() {
    const char* env = std::getenv("DPB_SHM");
    if (env && !*env) env = nullptr;  // set but empty: the default
    DPB_CHECK(!env || !std::strcmp(env, "0") || !std::strcmp(env, "1"),
              "environment variable DPB_SHM='" << env << "' must be 0 (MPI messages between the "
                                                 "processes of a node) or 1 (shared memory)");
    const bool off = env && !std::strcmp(env, "0"), required = env && !std::strcmp(env, "1");
    required_ = required;
    int node_rank = 0, local = 0;
    node_rank_size(comm_, rank_, node_rank, local);
    DPB_CHECK(!required || size_ < 2 || (host_ && local == size_),
              "DPB_SHM=1 but the direct path needs every rank on this node's CPU backend ("
                  << size_ << " ranks, " << local << " on this node, backend " << dev_.name()
                  << ")");
    // One answer for every rank: a rank that cannot or may not take the direct path (DPB_SHM=0,
    // another backend) sends all to messages, so their collectives stay the same (ranks whose
    // DPB_SHM or backend differ are then named by check_ranks_agree, src/train/agree.h).
    int want = !(off || !host_ || size_ < 2 || local != size_), all_want = want;
    if (size_ >= 2)
      MPI_CHECK(MPI_Allreduce(&want, &all_want, 1, MPI_INT, MPI_MIN, comm_),
                "rank " << rank_ << ", agreeing on the direct path");
    if (!all_want) return;
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
      int64_t pid, fd, bytes;
    } mine{int64_t(getpid()), -1, 0};
    std::string why;
    try {
      arena_ = std::make_unique<ShmArena>(mb << 20);
      new (arena_->header()) Header();
      mine.fd = arena_->fd();
      mine.bytes = int64_t(arena_->bytes());
    } catch (const Error& e) {
      why = e.what();
    }
    std::vector<Info> all(static_cast<size_t>(size_));
    MPI_CHECK(MPI_Allgather(&mine, sizeof(Info), MPI_BYTE, all.data(), sizeof(Info), MPI_BYTE,
                            comm_),
              "rank " << rank_ << ", exchanging shared-memory handles");
    bases_.assign(size_t(size_), nullptr);
    for (int p = 0; p < size_ && why.empty(); ++p) {
      pids_.push_back(pid_t(all[p].pid));
      if (all[p].fd < 0) why = "rank " + std::to_string(p) + " has no shared arena";
      else if (p == rank_) bases_[p] = arena_->base();
      else try {
        maps_.push_back(std::make_unique<ShmMapping>(pid_t(all[p].pid), int(all[p].fd),
                                                     size_t(all[p].bytes)));
        bases_[p] = maps_.back()->base();
      } catch (const Error& e) {
        why = e.what();
      }
    }
    int ok = why.empty(), all_ok = 0;
    MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm_),
              "rank " << rank_ << ", agreeing on shared memory");
    if (all_ok) {
      ptrs_.assign(size_t(size_), nullptr);
      return;
    }
    DPB_CHECK(!required, "DPB_SHM=1 but " << (why.empty() ? "another rank could not share "
                                                             "memory" : why));
    if (!why.empty())
      std::fprintf(stderr, "dpbench: rank %d: note: no shared memory between the ranks of this "
                   "node (%s): MPI messages instead\n", rank_, why.c_str());
    maps_.clear();
    arena_.reset();
    pids_.clear();
  }

  bool staged(const RecvOp& r) const { return !host_ || r.op == RecvOp::Reduce; }

  void check(int rank) const {
    DPB_CHECK(rank == rank_, "MPI transport of rank " << rank_ << " called as rank " << rank);
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
                "rank " << rank_ << " receiving " << r.len << " floats from rank " << r.from);
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
  // Direct path (setup_shm; arena_ null: off): this process's arena, the peers' mapped here,
  // every rank's arena base and pid, and this call's published buffers.
  std::unique_ptr<ShmArena> arena_;
  // Gives arena buffers back to the arena and their bytes to the device's ledger.
  struct ArenaOwner final : MemoryOwner {
    MpiTransport* t;
    explicit ArenaOwner(MpiTransport* tr) : t(tr) {}
    void release(float* p) override {
      t->dev_.memory().release(p);
      t->arena_->release(p);
    }
  } arena_owner_{this};
  std::vector<std::unique_ptr<ShmMapping>> maps_;
  std::vector<char*> bases_;
  std::vector<pid_t> pids_;
  std::vector<float*> ptrs_;
  uint64_t begins_ = 0;
  bool direct_ = false;    // this call moves data in place
  bool required_ = false;  // DPB_SHM=1: every call must
  // Last: gone before the arena and the mappings its slots live in.
  std::unique_ptr<WatchBoard> board_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(Device& dev, int rank, int size,
                                              const LinkSpec& link) {
  auto t = std::make_unique<MpiTransport>(dev, rank, size);
  if (!link.enabled()) return t;
  // Paced at the seam the threads transport is paced at (link.h), on this process's own fabric.
  return with_link(std::move(t), std::make_shared<LinkFabric>(size, link));
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
