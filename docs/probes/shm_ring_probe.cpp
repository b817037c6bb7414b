// Probe (not built by CMake; docs/decisions.md has how to run it and what it measured).
// Probe: 2-process ring all-reduce over MPI-3 shared memory (each rank's buffer in a window both
// map; the ring reads the peer's half directly, as the threads transport does) vs MPI_Allreduce.
#include <mpi.h>
#include "alternate.h"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  size_t n = argc > 1 ? strtoul(argv[1], 0, 10) : (1 << 20);
  float* buf; MPI_Win win;
  MPI_Win_allocate_shared(MPI_Aint(n * 4), 4, MPI_INFO_NULL, MPI_COMM_WORLD, &buf, &win);
  MPI_Aint sz; int du; float* peer;
  MPI_Win_shared_query(win, 1 - rank, &sz, &du, &peer);
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
  auto fill = [&] { for (size_t i = 0; i < n; ++i) buf[i] = float((rank + 1) * int(i % 5 + 1)); };
  size_t half = n / 2, lo = rank == 0 ? 0 : half, len = rank == 0 ? half : n - half;
  size_t olo = rank == 0 ? half : 0, olen = n - len;
  auto sync = [&] { MPI_Win_sync(win); MPI_Barrier(MPI_COMM_WORLD); MPI_Win_sync(win); };
  auto shm = [&] {
    sync();
    for (size_t i = lo; i < lo + len; ++i) buf[i] += peer[i];
    sync();
    std::memcpy(buf + olo, peer + olo, olen * 4);
    sync();
  };
  std::vector<float> plain(n);  // MPI_Allreduce on ordinary memory, as a user's gradients are
  auto mpi = [&] { MPI_Allreduce(MPI_IN_PLACE, plain.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); };
  fill(); shm(); long bad = 0;
  for (size_t i = 0; i < n; ++i) bad += buf[i] != float(3 * int(i % 5 + 1));
  if (rank == 0) printf("n=%zu wrong=%ld  ", n, bad);
  alternate_and_report("shm ring", shm, mpi);
  MPI_Win_unlock_all(win); MPI_Win_free(&win);
  MPI_Finalize();
}
