// mpi_messages.cpp: the MPI transport's data movement over messages (mpi_transport_impl.h): a
// step's sends and receives through host staging (pinned, on the comm stream, on devices the host
// cannot read), and MPI's own all-reduce, reduce-scatter and all-gather (--allreduce mpi and the
// shard modes' mpi collectives). Built only when CMake finds MPI (else mpi_absent.cpp).
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/link.h"
#include "collectives/mpi/mpi_transport.h"
#include "collectives/mpi/mpi_transport_impl.h"
#include "collectives/shard.h"
#include "src/core/check.h"
#include "src/core/launcher.h"

namespace dpb {
namespace mpi_detail {

void MpiTransport::step(int rank, std::span<const SendOp> sends, std::span<const RecvOp> recvs,
                        bool fence) {
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

void MpiTransport::allreduce_sum(int rank, float* buf, size_t n) {
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

void MpiTransport::shard_collective(int rank, float* buf, size_t n, bool reduce) {
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

void MpiTransport::reserve_staging(size_t n) {
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

size_t MpiTransport::post_receives(std::span<const RecvOp> recvs, size_t& next) {
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

void MpiTransport::apply(std::span<const RecvOp> recvs, size_t total) {
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

}  // namespace mpi_detail

using mpi_detail::MpiTransport;

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
