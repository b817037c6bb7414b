// mpi.h: one rank per process over MPI (no MPI types in this header: the rest of dpbench includes
// it whether or not MPI was found at build time; without MPI every function here throws).
//
//   LaunchEnv env = detect_launch_env();          // src/core/launcher.h
//   if (env.processes) {
//     MpiSession mpi;                               // MPI_Init_thread(MPI_THREAD_MULTIPLE)
//     auto dev = make_device("cpu", mpi.rank(), {threads, false, mpi.local_rank()});
//     CommGroup group(make_mpi_transport(*dev, mpi.rank(), mpi.size()));
//   }
//
// The MPI transport (transport.h) has two paths. Direct (CPU ranks of a group all on one node,
// buffers from CommGroup::alloc): each process's collective buffers live in a shared arena
// (collectives/shm.h) that its node peers map, and a step is the threads transport's: receives
// read the peer's buffer in place, puts write into it, a fenced step ends with a futex barrier in
// shared memory that names a peer whose process died. DPB_SHM=0 turns it off, DPB_SHM=1 makes it
// required (an error says why it cannot serve); DPB_SHM_ARENA_MB sizes the arena (default 65536:
// virtual, sparse).
// Two levels (issue 26): the ranks' nodes are the real ones (MPI_Comm_split_type; Transport::nodes
// when they hold equal ranks numbered node by node), or N emulated nodes of P/N consecutive ranks
// (--nodes / DPB_NODES = N, a divisor of P, else an error naming it). Transport::split makes a
// sub-group an MPI transport of its own over MPI_Comm_split (CommGroup's node and cross-node
// groups), sharing the arenas: a group whose members are on one node (a node group) takes the
// direct path, one across nodes (the whole group, a cross-node group) messages, emulated nodes
// alike. With a LinkSpec a sub-group is paced on the whole group's fabric in its ranks (link.h).
// Messages (otherwise): a step posts MPI_Irecv into host staging for every receive and
// MPI_Isend for every send, waits for all, then applies the receives with the device's comm_copy /
// comm_reduce. Devices whose memory the host cannot read (CUDA) go through host staging (pinned on
// CUDA: Device::alloc_host) on the comm stream, so backward goes on while a bucket is staged and
// sent: the sends are downloaded (comm_download) behind the comm work that produced them and the
// host waits for that copy only (comm_synchronize), then sends; the receives are uploaded
// (comm_upload) and summed on the comm stream without a host wait. The staging is allocated once,
// at setup, for the largest buffer from CommGroup::alloc (the gradients). Failure: abort() prints
// "rank R: why" and calls MPI_Abort, which ends every process of the job (a rank blocked in MPI
// cannot be woken otherwise); a process killed from outside is detected by the launcher (OpenMPI's
// mpirun, srun), which ends the others.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "collectives/link.h"
#include "src/core/transport.h"

namespace dpb {

bool mpi_built();  // this dpbench was built with MPI

// MPI for this process: MPI_Init_thread asking for MPI_THREAD_MULTIPLE (a rank's thread and its
// GradSync communication thread both call MPI), MPI_Finalize at the end. Throws dpb::Error when
// MPI was not built in or the library provides less than MPI_THREAD_MULTIPLE. One per process.
class MpiSession {
 public:
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }  // rank among the processes of this node
  int local_size() const { return local_size_; }
  std::string library() const { return library_; }  // "Open MPI v4.1.4, ..."

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  std::string library_;
};

// The transport of rank `rank` (this process) in a group of `size` processes; dev is its device.
// Collective: every process makes its transports in the same order (each gets its own
// communicator, MPI_Comm_dup of MPI_COMM_WORLD). link.nodes (else DPB_NODES): emulated nodes. link enabled: the transport is paced at its
// steps by an emulated link (collectives/link.h, with_link: the threads transport's seam) on a
// per-process fabric: a step returns no sooner than its transfers would complete (L + bytes / G
// each, on this rank's send and receive links), sleeping.
std::unique_ptr<Transport> make_mpi_transport(Device& dev, int rank, int size,
                                              const LinkSpec& link = {});

// MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM) on the MPI transport's communicator
// (host staging for devices the host cannot read). Throws when t is not an MPI transport.
void mpi_allreduce_sum(Transport& t, int rank, float* buf, size_t n);
// In place on the whole buffer of n floats, rank r's shard as in collectives/shard.h:
// MPI_Reduce_scatter_block (MPI_Reduce_scatter when k does not divide n) leaves the sum of rank
// r's shard at its place; MPI_Allgather (MPI_Allgatherv) fills every rank's buffer from each
// rank's shard. Host staging as mpi_allreduce_sum's. Throws when t is not an MPI transport.
void mpi_reduce_scatter_sum(Transport& t, int rank, float* buf, size_t n);
void mpi_allgather(Transport& t, int rank, float* buf, size_t n);

// Whether t (an MPI transport, paced or not, or a sub-group of one) runs its collectives on the
// shared-memory direct path (its members on one node, buffers from its alloc); false for any
// other transport. For tests and reports.
bool mpi_direct_path(Transport& t);

// Prints "dpbench: rank R: error: msg" on stderr and ends the job (MPI_Abort with `code`, which
// mpirun returns: 2 bad input, 5 a stalled rank, src/core/watchdog.h). For errors outside any
// group (configuration, data) on one process.
[[noreturn]] void mpi_abort_job(int rank, const std::string& msg, int code = 2);

}  // namespace dpb
