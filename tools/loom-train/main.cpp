// loom-train: trains an MLP data-parallel on Loom (DistributedDataParallel), or alone with
// --no-ddp, and reports throughput, where the step time goes and the scaling efficiency.
//   loomrun --nproc-per-node 2 loom-train --layers 784,1024,1024,1024,10 --epochs 2
#include <cstdio>
#include <exception>

#include "args.hpp"
#include "loom/loom.hpp"
#include "trainer.hpp"

int main(int argc, char** argv) {
  const loom_train::Args args = loom_train::parse(argc, argv);
  try {
    if (!args.ddp) return loom_train::Trainer(args, nullptr).run();
    loom::Communicator comm = loom::init();
    return loom_train::Trainer(args, &comm).run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom-train: %s\n", e.what());
    return 1;
  }
}
