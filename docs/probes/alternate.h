// alternate.h: the timing both probes share. Runs `ours` and MPI_Allreduce (`mpi`) in 20
// blocks of 30 iterations (which of the two goes first alternates between blocks), each
// iteration's time the slowest rank's, and prints the medians of the block medians on rank 0.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

inline void alternate_and_report(const char* what, const std::function<void()>& ours,
                                 const std::function<void()>& mpi) {
  std::vector<double> to, tm;
  for (int block = 0; block < 20; ++block)
    for (int which = 0; which < 2; ++which) {
      const bool run_mpi = which ^ (block & 1);
      std::vector<double> t;
      for (int it = 0; it < 30; ++it) {
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = std::chrono::steady_clock::now();
        run_mpi ? mpi() : ours();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), mx;
        MPI_Allreduce(&s, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        t.push_back(mx);
      }
      std::sort(t.begin(), t.end());
      (run_mpi ? tm : to).push_back(t[t.size() / 2]);
    }
  std::sort(to.begin(), to.end());
  std::sort(tm.begin(), tm.end());
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf("%s median %.1f us [%.1f, %.1f]  MPI_Allreduce median %.1f us [%.1f, %.1f]  "
                "ratio %.3f\n", what, to[10] * 1e6, to[0] * 1e6, to.back() * 1e6, tm[10] * 1e6,
                tm[0] * 1e6, tm.back() * 1e6, to[10] / tm[10]);
}
