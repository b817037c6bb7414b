// Probe (not built by CMake; docs/decisions.md has how to run it and what it measured).
// Probe: 2-process ring all-reduce by CMA pulls (process_vm_readv into a cache-sized bounce
// buffer, summed into place) vs MPI_Allreduce, same program, alternating blocks, medians.
#include <mpi.h>
#include "alternate.h"
#include <sys/uio.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>
static void pull(pid_t pid, const float* remote, float* dst, size_t n, bool add, float* bounce, size_t piece) {
  for (size_t at = 0; at < n; at += piece) {
    size_t len = std::min(piece, n - at);
    float* into = add ? bounce : dst + at;
    iovec l{into, len * 4}, r{(void*)(remote + at), len * 4};
    if (process_vm_readv(pid, &l, 1, &r, 1, 0) != ssize_t(len * 4)) { perror("readv"); MPI_Abort(MPI_COMM_WORLD, 1); }
    if (add) for (size_t i = 0; i < len; ++i) dst[at + i] += bounce[i];
  }
}
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, k; MPI_Comm_rank(MPI_COMM_WORLD, &rank); MPI_Comm_size(MPI_COMM_WORLD, &k);
  size_t n = argc > 1 ? strtoul(argv[1], 0, 10) : (1 << 20);
  size_t piece = argc > 2 ? strtoul(argv[2], 0, 10) : 8192;
  std::vector<float> buf(n), bounce(piece);
  struct Info { pid_t pid; const float* p; } me{getpid(), buf.data()}, peer;
  MPI_Sendrecv(&me, sizeof me, MPI_BYTE, 1 - rank, 0, &peer, sizeof peer, MPI_BYTE, 1 - rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  auto fill = [&] { for (size_t i = 0; i < n; ++i) buf[i] = float((rank + 1) * int(i % 5 + 1)); };
  size_t half = n / 2, lo = rank == 0 ? 0 : half, len = rank == 0 ? half : n - half;
  size_t olo = rank == 0 ? half : 0, olen = n - len;
  auto cma = [&] {
    MPI_Barrier(MPI_COMM_WORLD);  // peers' data ready
    pull(peer.pid, peer.p + lo, buf.data() + lo, len, true, bounce.data(), piece);  // my half summed
    MPI_Barrier(MPI_COMM_WORLD);  // both halves summed
    pull(peer.pid, peer.p + olo, buf.data() + olo, olen, false, bounce.data(), piece);
    MPI_Barrier(MPI_COMM_WORLD);  // nobody reads my buffer any more
  };
  auto mpi = [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
  fill(); cma(); long bad = 0;
  for (size_t i = 0; i < n; ++i) bad += buf[i] != float(3 * int(i % 5 + 1));
  if (rank == 0) printf("n=%zu piece=%zu wrong=%ld  ", n, piece, bad);
  alternate_and_report("cma ring", cma, mpi);
  MPI_Finalize();
}
