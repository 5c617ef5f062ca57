// Sends and receives of the loom backend, and monitoredBarrier, which is made of them.
#include <algorithm>

#include "process_group.hpp"
#include "work.hpp"

namespace loom_torch {

using c10d::OpType;

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::send(std::vector<at::Tensor>& tensors, int dst,
                                                      int) {
  const Where w = where("send");
  const at::Tensor& t = single(tensors, w, "tensor");
  check_peer(dst, w);
  if (!t.is_cuda()) return issue_point_to_point(w, OpType::SEND, "loom:send", t, true, dst);
  return enqueue(w, OpType::SEND, "loom:send", t, tensors, {},
                 [t, dst](loom::Communicator& comm, loom::CudaStream stream) {
                   const at::Tensor buf = dense(t);
                   const Buffer b = moved(buf);
                   comm.send(buf.data_ptr(), b.count, b.dtype, dst, stream);
                 });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recv(std::vector<at::Tensor>& tensors, int src,
                                                      int) {
  const Where w = where("recv");
  const at::Tensor& t = single(tensors, w, "tensor");
  check_peer(src, w);
  if (!t.is_cuda()) return issue_point_to_point(w, OpType::RECV, "loom:recv", t, false, src);
  return enqueue(w, OpType::RECV, "loom:recv", t, {}, tensors,
                 [t, src](loom::Communicator& comm, loom::CudaStream stream) {
                   at::Tensor buf = dense(t);
                   const Buffer b = moved(buf);
                   comm.recv(buf.data_ptr(), b.count, b.dtype, src, stream);
                   write_back(t, buf);
                 });
}

// A send or receive on a host tensor: issued to Loom as an asynchronous call in its turn, and
// complete when Loom's call is (then a receive's copy back, if the tensor was not dense).
c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::issue_point_to_point(
    const Where& where, OpType type, const char* title, const at::Tensor& t, bool send, int peer) {
  std::vector<at::Tensor> tensors{t};
  auto work = c10::make_intrusive<LoomWork>(getRank(), type, title, tensors,
                                            send ? std::vector<at::Tensor>{} : tensors,
                                            std::vector<c10::Device>{}, executor_, where);
  auto buf = std::make_shared<at::Tensor>();
  work->op()->issue = [comm = comm_, t, buf, send, peer] {
    *buf = dense(t);
    const Buffer b = moved(*buf);
    return send ? comm->send_async(buf->data_ptr(), b.count, b.dtype, peer)
                : comm->recv_async(buf->data_ptr(), b.count, b.dtype, peer);
  };
  if (!send)
    work->op()->body = [t, buf] { write_back(t, *buf); };
  else
    work->op()->body = [buf] { *buf = at::Tensor(); };  // the send's buffer lives until it is done
  submit(work->op());
  return work;
}

void ProcessGroupLoom::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  using std::chrono::milliseconds;
  const milliseconds timeout = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const auto start = std::chrono::steady_clock::now();
  const int rank = getRank(), size = getSize();
  auto token = [] { return std::vector<at::Tensor>{at::zeros({1}, at::kLong)}; };
  // A Work's wait of 0 waits without a limit: at least a millisecond.
  auto left = [&] {
    const auto spent =
        std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
    return std::max(milliseconds(1), timeout - spent);
  };
  auto fail = [&](const std::string& message) {
    comm_->abort();
    TORCH_CHECK(false, message);
  };
  if (rank != 0) {
    std::vector<at::Tensor> mine = token(), answer = token();
    try {
      auto sent = send(mine, 0, 0);
      auto answered = recv(answer, 0, 0);
      sent->wait(left());
      answered->wait(left());
    } catch (const std::exception& e) {
      fail("Rank " + std::to_string(rank) +
           " successfully reached monitoredBarrier, but received errors while waiting for "
           "send/recv from rank 0. Please check rank 0 logs for faulty rank. (" +
           e.what() + ")");
    }
    return;
  }
  const std::string in_time =
      " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) + " ms";
  std::vector<std::vector<at::Tensor>> tokens(static_cast<std::size_t>(size));
  std::vector<c10::intrusive_ptr<c10d::Work>> heard(static_cast<std::size_t>(size));
  for (int r = 1; r < size; ++r) {
    tokens[r] = token();
    heard[r] = recv(tokens[r], r, 0);
  }
  std::vector<int> failed;
  for (int r = 1; r < size; ++r) {
    // Every rank gets the whole timeout when all are waited for, else what is left of it.
    milliseconds wait = wait_all_ranks ? std::max(milliseconds(1), timeout) : left();
    if (!wait_all_ranks && std::chrono::steady_clock::now() - start >= timeout &&
        !heard[r]->isCompleted())
      fail("[Rank 0]: Rank 0 timed out in monitoredBarrier after " +
           std::to_string(timeout.count()) + " ms");
    try {
      heard[r]->wait(wait);
    } catch (const std::exception& e) {
      if (!wait_all_ranks) fail("[Rank 0]: Rank " + std::to_string(r) + in_time + "\n " + e.what());
      failed.push_back(r);
    }
  }
  if (!failed.empty()) {
    std::string ranks;
    for (int r : failed) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    fail("[Rank 0]: Ranks " + ranks + in_time);
  }
  for (int r = 1; r < size; ++r) {
    std::vector<at::Tensor> answer = token();
    try {
      send(answer, r, 0)->wait(left());
    } catch (const std::exception& e) {
      fail("[Rank 0]: Rank " + std::to_string(r) + in_time + "\n " + e.what());
    }
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupLoom::recvAnysource(std::vector<at::Tensor>&, int) {
  refuse(where("recv"),
         "receiving from any source is not supported: Loom matches messages by their peer "
         "(pass src)");
}
}  // namespace loom_torch
