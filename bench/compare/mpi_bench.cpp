// OpenMPI's side of the comparison: MPI_Allreduce (f32 sum) or MPI_Alltoall at one size, timed by
// the method of per_op.hpp; the transport is mpirun's choice (--mca btl self,vader or self,tcp).
// Prints one CSV row on rank 0: mpi,<op>,<ranks>,<bytes>,<time_us>,<busbw_gbps>
//   mpi_bench allreduce|alltoall BYTES [ITERS] [WARMUP] [fresh]
// fresh: the input's cache lines are rewritten before every call, untimed (per_op.hpp).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "per_op.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string op = argc > 1 ? argv[1] : "";
  if (op != "allreduce" && op != "alltoall") {
    if (rank == 0)
      std::fprintf(stderr, "usage: mpi_bench allreduce|alltoall BYTES [ITERS] [WARMUP] [fresh]\n");
    MPI_Finalize();
    return 2;
  }
  const std::size_t bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 8;
  const int iters = argc > 3 ? std::max(1, std::atoi(argv[3])) : 20;
  const int warmup = argc > 4 ? std::max(0, std::atoi(argv[4])) : 5;
  const bool fresh = argc > 5 && std::string(argv[5]) == "fresh";
  // The buffer's elements: alltoall's are whole blocks, one per rank.
  const std::size_t unit = op == "alltoall" ? static_cast<std::size_t>(size) : 1;
  const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float) / unit) * unit;
  std::vector<float> in(count, 1.0f), out(count);
  const int n = static_cast<int>(count), block = static_cast<int>(count / unit);
  std::vector<double> mine = bench::time_each_call_us(
      warmup, iters,
      [&] {
        if (op == "allreduce")
          MPI_Allreduce(in.data(), out.data(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        else
          MPI_Alltoall(in.data(), block, MPI_FLOAT, out.data(), block, MPI_FLOAT, MPI_COMM_WORLD);
      },
      [&] {
        if (fresh) bench::rewrite_lines(in.data(), in.size() * sizeof(float));
      });
  std::vector<double> all(mine.size() * static_cast<std::size_t>(size));
  MPI_Gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
             static_cast<int>(mine.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    const double us = bench::median_of_slowest(all, size);
    const double b = static_cast<double>(count * sizeof(float));
    const double factor =
        op == "allreduce" ? 2.0 * (size - 1) / size : static_cast<double>(size - 1) / size;
    std::printf("mpi,%s,%d,%.0f,%.3f,%.4f\n", op.c_str(), size, b, us,
                bench::busbw_gbps(b, us, factor));
  }
  MPI_Finalize();
  return 0;
}
