/* mpi_allreduce.c: the OpenMPI peer of dpbench-micro's all-reduce (impl openmpi): MPI_Allreduce
 * (float sum, MPI_IN_PLACE) between processes on one host, at the message sizes given in bytes.
 * Each rank's buffer holds rank + 1, so every element must end as k(k+1)/2 (`wrong` counts the
 * elements that do not). Time: median over repetitions of the slowest rank's time per call, after
 * a barrier and warm-up calls; busbw uses nccl-tests' formula algbw * 2(k-1)/k (GB = 1e9 B).
 *   mpicc -O2 -o mpi_allreduce peers/mpi_allreduce.c
 *   mpirun --oversubscribe -np 4 ./mpi_allreduce [--min-time 0.1] 4194304 16777216   (options before the sizes)
 * One line per size from rank 0:
 *   DPB_PEER_MICRO ranks=4 bytes=4194304 time_s=0.00123 algbw_GBps=3.41 busbw_GBps=5.12 wrong=0
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, k;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &k);
  double min_time = 0.1;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--min-time") == 0 && i + 1 < argc) {
      min_time = atof(argv[++i]);
      continue;
    }
    long long bytes = atoll(argv[i]);
    if (bytes < 4 || bytes % 4) {
      if (rank == 0) fprintf(stderr, "mpi_allreduce: bad size '%s' (bytes, a multiple of 4)\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t n = (size_t)(bytes / 4);
    float* buf = malloc(n * sizeof(float));
    if (!buf) MPI_Abort(MPI_COMM_WORLD, 3);
    for (int w = 0; w < 3; ++w) MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int reps = 0, cap = 1000;
    double* times = malloc(cap * sizeof(double));
    double spent = 0;
    long wrong = 0;
    while ((spent < min_time || reps < 5) && reps < cap) {
      for (size_t j = 0; j < n; ++j) buf[j] = (float)(rank + 1);
      MPI_Barrier(MPI_COMM_WORLD);
      double t = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      t = MPI_Wtime() - t;
      double slowest;
      MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  /* all ranks agree */
      times[reps++] = slowest;
      spent += slowest;
    }
    const float want = (float)k * (k + 1) / 2;
    for (size_t j = 0; j < n; ++j) wrong += buf[j] != want;
    long all_wrong;
    MPI_Reduce(&wrong, &all_wrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    qsort(times, reps, sizeof(double), cmp_double);
    double med = reps % 2 ? times[reps / 2] : 0.5 * (times[reps / 2 - 1] + times[reps / 2]);
    if (rank == 0) {
      double algbw = bytes / med / 1e9;
      printf("DPB_PEER_MICRO ranks=%d bytes=%lld time_s=%.9g algbw_GBps=%.6g busbw_GBps=%.6g "
             "wrong=%ld reps=%d\n", k, bytes, med, algbw, algbw * 2.0 * (k - 1) / k, all_wrong, reps);
      fflush(stdout);
    }
    free(times);
    free(buf);
  }
  MPI_Finalize();
  return 0;
}
