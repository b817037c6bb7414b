// Probe (not built by CMake; docs/decisions.md has how to run it and what it measured).
// Probe: 2-process ring all-reduce over MPI-3 shared memory (each rank's buffer in a window both
// map; the ring reads the peer's half directly, as the threads transport does) vs MPI_Allreduce.
#include <mpi.h>
#include <algorithm>
#include <chrono>
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
  std::vector<double> tc, tm;
  for (int block = 0; block < 20; ++block)
    for (int which = 0; which < 2; ++which) {
      std::vector<double> t;
      for (int it = 0; it < 30; ++it) {
        MPI_Barrier(MPI_COMM_WORLD);
        auto t0 = std::chrono::steady_clock::now();
        (which ^ (block & 1)) ? mpi() : shm();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), mx;
        MPI_Allreduce(&s, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t.push_back(mx);
      }
      std::sort(t.begin(), t.end());
      ((which ^ (block & 1)) ? tm : tc).push_back(t[t.size() / 2]);
    }
  std::sort(tc.begin(), tc.end()); std::sort(tm.begin(), tm.end());
  if (rank == 0) printf("n=%zu wrong=%ld  shm ring median %.1f us [%.1f, %.1f]  MPI_Allreduce median %.1f us [%.1f, %.1f]  ratio %.3f\n", n, bad,
                        tc[10] * 1e6, tc[0] * 1e6, tc.back() * 1e6, tm[10] * 1e6, tm[0] * 1e6, tm.back() * 1e6, tc[10] / tm[10]);
  MPI_Win_unlock_all(win); MPI_Win_free(&win);
  MPI_Finalize();
}
