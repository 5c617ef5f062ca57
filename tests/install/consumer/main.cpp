// Builds against the installed headers alone and runs a one-rank communicator.
#include <loom/loom.hpp>
#include <loom/store.hpp>

#include <cstdio>
#include <memory>

int main() {
  auto server = std::make_unique<loom::StoreServer>("127.0.0.1", 0);
  auto store = std::make_shared<loom::TcpStore>("127.0.0.1", server->port());
  loom::Communicator comm(store, 0, 1);
  int x = 21;
  comm.all_reduce(&x, 1, loom::DataType::i32, loom::ReduceOp::sum);
  std::printf("consumer: %d\n", x * 2);
  return x * 2 == 42 ? 0 : 1;
}
