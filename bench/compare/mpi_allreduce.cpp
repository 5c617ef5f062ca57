// Baseline: MPI_Allreduce (float, sum) at one size, timed as loom-perf times (slowest rank's
// mean). Prints one CSV row on rank 0: mpi,size,time_us,busbw_gbps.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::size_t bytes = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 8;
  int iters = argc > 2 ? std::atoi(argv[2]) : 20;
  int warmup = argc > 3 ? std::atoi(argv[3]) : 5;
  const std::size_t count = bytes / sizeof(float) ? bytes / sizeof(float) : 1;
  std::vector<float> in(count, 1.0f), out(count);
  for (int i = 0; i < warmup; ++i)
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i)
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  double us = (MPI_Wtime() - t0) * 1e6 / iters, slowest = 0;
  MPI_Reduce(&us, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    double algbw = static_cast<double>(count * sizeof(float)) / (slowest * 1e-6) / 1e9;
    std::printf("mpi,%zu,%.3f,%.4f\n", count * sizeof(float), slowest,
                algbw * 2.0 * (size - 1) / size);
  }
  MPI_Finalize();
  return 0;
}
