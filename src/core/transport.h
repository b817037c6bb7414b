// transport.h: the seam between the collective schedules and how ranks move data. The
// all-reduce algorithms (naive.cpp, ring.cpp, direct.cpp, rhd.cpp) and the trainer's cross-rank
// work are written once over it; two transports implement it:
//   threads (transport_threads.cpp): the ranks are threads of this process; a receive reads the
//     peer's published buffer directly (Device::comm_copy / comm_reduce on the peer pointer), a
//     put is written by the sender into the receiver's published buffer, and a step ends with
//     the device-ordered barrier (unless it is unfenced).
//   mpi (collectives/mpi): one rank per process. Between processes of one node whose buffers
//     come from alloc(), the threads transport's moves on memory every process maps (shm.h);
//     otherwise MPI_Irecv into staging buffers and MPI_Isend, MPI_Waitall, then the receives are
//     applied with the device's comm_copy / comm_reduce (so the CUDA backend's host staging hooks
//     in at one place). Puts are plain receives there. Its sub-groups (split) are MPI transports
//     over MPI_Comm_split, on the direct path when their members are on one node.
//
// A call of a collective: every rank publishes its buffer (begin), then runs steps. A step is
// this rank's sends {to, offset, length} (from its published buffer) and receives {from, offset
// in the sender's published buffer, destination, length, copy, reduce or put}; step() returns
// when the receives are applied and the peers may overwrite what they sent. Within one step, the
// sends from a to b and the receives at b from a are matched in the order they are listed.
// What a step sends must be final when the previous step (or begin) returns: the threads
// transport's receivers read it as soon as they enter the step. So a rank may not change data
// it sends in step s between steps s-1 and s (do the work as receives of step s-1 instead).
// A put is the exception: the sender moves it, so it may send what it computed just before.
//
// Unfenced steps (fence = false) save the threads transport a barrier: a rank leaves the step
// when its own moves are done. Legal only when nothing of the next step races this one: no rank
// writes in the next step what a peer reads in this one, or reads what a peer writes in this
// one, except the sender of a put writing into the receiver's published buffer. (naive.cpp:
// rank 0 sums the peers' buffers, then puts the sum into them: two barriers per call.)
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "src/core/check.h"
#include "src/core/device.h"
#include "src/core/watchdog.h"

namespace dpb {

struct SendOp {
  static constexpr size_t kPull = size_t(-1);
  int to;
  size_t off;  // floats into this rank's published buffer
  size_t len;  // floats
  // A put: the data lands at put_off floats into the receiver's published buffer, and the
  // receiver lists it as a Put receive with dst = that place. kPull: the receiver takes it.
  size_t put_off = kPull;
};

struct RecvOp {
  enum Kind { Copy, Reduce, Put };  // dst = src | dst += src | dst = src, written by the sender
  int from;
  size_t src_off;  // floats into the sender's published buffer
  float* dst;      // this rank's memory (on its device)
  size_t len;      // floats
  Kind op;
};

// Where a group's ranks live: threads of this process, or one process each, started by
// mpirun/srun (the MPI transport). launcher_name: "threads" | "mpi", as the CSV writes it.
enum class Launcher { Threads, Mpi };
inline const char* launcher_name(Launcher l) { return l == Launcher::Threads ? "threads" : "mpi"; }

class Transport {
 public:
  virtual ~Transport() = default;
  virtual Launcher launcher() const = 0;
  virtual int size() const = 0;              // ranks in the group
  virtual int processes() const = 0;         // processes the ranks live in
  virtual bool is_local(int rank) const = 0; // rank lives in this process
  virtual Device& device(int rank) const = 0;  // local ranks only (throws otherwise)
  virtual BackendKind kind() const = 0;      // the backend of every rank's device

  // Memory for a buffer that collectives will run on (begin): n zero-filled floats for rank's
  // device, freed by the Buffer. The MPI transport gives the ranks of one node memory they all
  // map, so that its steps move data in place (mpi.h); any other buffer works too, over messages.
  virtual Buffer alloc(int rank, size_t n, MemCategory cat, const char* what) {
    return Buffer(device(rank), n, cat, what);
  }
  // Publishes buf (n floats are sent from it later) and, for the threads transport, waits for
  // every rank to have published.
  virtual void begin(int rank, float* buf) = 0;
  virtual void step(int rank, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
                    bool fence) = 0;  // CommGroup::step defaults fence to true
  // What a fenced step does after its moves: step(r, s, v, true) is step(r, s, v, false) then
  // fence(r). Threads: the device-ordered barrier; mpi: the shared-memory barrier on the direct
  // path, nothing over messages. (The emulated link sleeps between the two: collectives/link.h.)
  virtual void fence(int rank) = 0;
  // Device-ordered barrier: comm work issued by every rank before it is ordered before comm work
  // issued after it on any rank. Throws once the group is aborted.
  virtual void barrier(int rank) = 0;
  // Host memory: root's `bytes` at data are copied to every rank's data.
  virtual void broadcast_host(int rank, void* data, size_t bytes, int root) = 0;
  // Host memory: every rank's `bytes` at mine end up at all + r * bytes on every rank.
  virtual void allgather_host(int rank, const void* mine, void* all, size_t bytes) = 0;

  // A rank failed: threads: every rank blocked in the group wakes up and throws; mpi: the
  // message is printed as "rank R: why" and the job is ended with MPI_Abort.
  virtual void abort(int rank, const std::string& why) = 0;
  virtual bool aborted() const = 0;
  // Why the group was aborted ("rank R: why" of the first abort), once aborted() is true; "" when
  // not known here. Sub-group views read it from their parent, so every rank names the cause.
  virtual std::string abort_reason() const { return ""; }
  // The ranks' wait slots that this process sees (src/core/watchdog.h): the watchdog's view of
  // the group. nullptr: none (the waits are not watched).
  virtual WatchBoard* watch_board() { return nullptr; }
  // Barrier polling (threads transport; see HostBarrier). Others: 0 and ignored.
  virtual long barrier_spin_ns() const { return 0; }
  virtual void set_barrier_spin_ns(long ns) { (void)ns; }

  // The emulated link (collectives/link.h): a paced transport's steps take the link's time.
  // issue(r, t): rank r's host issued the comm work that follows at t (the moment backward made
  // the unit ready; link.h, "Two clocks"), so the link starts its transfers no earlier. Others:
  // false and ignored.
  // Sub-groups (CommGroup's node and cross-node groups, collectives/allreduce.h): `parts`
  // partitions this group's ranks (each rank in one part; part i's member m is the sub-group's
  // rank m). Returns one transport per part: over the part's ranks when it holds a rank of this
  // process, else nullptr. Collective: every process calls it with the same parts, in the same
  // order. Threads: views of this transport (make_group_view); mpi: a transport of its own over
  // MPI_Comm_split of this one's communicator. The default throws (no sub-groups).
  virtual std::vector<std::unique_ptr<Transport>> split(const std::vector<std::vector<int>>& parts) {
    (void)parts;
    throw Error(std::string("sub-groups (node and cross-node groups): this transport (") +
                launcher_name(launcher()) + " ranks) has none");
  }
  // The nodes the ranks live on, numbered node by node with nodes() equal parts (CommGroup::
  // nodes for a group over this transport); nodes_refusal(): "" when they are, else why the
  // ranks do not split so (then nodes() is 1). Threads: CommGroup takes them from its LinkSpec.
  virtual int nodes() const { return 1; }
  virtual std::string nodes_refusal() const { return ""; }
  // Views (make_group_view): publish makes buf rank's published buffer without waiting for the
  // others (the view's begin then waits at the view's own barrier); a view's steps are this
  // transport's unfenced steps. watch_abort(wake): abort() calls wake(why) so that ranks blocked
  // at a view's barrier wake up too. Transports without views throw from publish (the default).
  virtual void publish(int rank, float* buf) {
    (void)rank;
    (void)buf;
    throw Error(std::string("sub-group views need the threads transport; this group's ranks are ") +
                launcher_name(launcher()) + " ranks");
  }
  virtual void watch_abort(std::function<void(const std::string& why)> wake) { (void)wake; }

  virtual bool paced() const { return false; }
  virtual void issue(int rank, std::chrono::steady_clock::time_point t) { (void)rank; (void)t; }
  // Seconds rank's send (receive) link has been occupied by its transfers on the emulated link
  // since the transport was made (LinkFabric::send_busy_seconds; exact for this process's ranks).
  // Others: 0.
  virtual double link_send_seconds(int rank) const { (void)rank; return 0; }
  virtual double link_recv_seconds(int rank) const { (void)rank; return 0; }
};

// A step's moves when every rank's published buffer is addressable here (bufs[r]): the receives
// read the senders' buffers with dev's comm_copy / comm_reduce, the puts write into the
// receivers'. The threads transport, and the MPI transport between processes of one node.
void direct_moves(Device& dev, std::span<float* const> bufs, int rank,
                  std::span<const SendOp> sends, std::span<const RecvOp> recvs);

}  // namespace dpb
