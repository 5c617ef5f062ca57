// The extension module loom_torch._C: the backend's constructor, Loom's errors as Python
// exceptions, and LoomStore (a torch.distributed Store on Loom's store protocol).
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/utils/pybind.h>

#include <loom/store.hpp>

#include "cuda_stream.hpp"
#include "process_group.hpp"
#include "stores.hpp"

namespace py = pybind11;
using namespace loom_torch;

namespace {

// One Python class per loom::ErrorKind, all subclasses of LoomError (a RuntimeError).
struct PythonErrors {
  py::object base, invalid_argument, timeout, peer, mismatch, aborted, store;

  PyObject* of(loom::ErrorKind kind) const {
    switch (kind) {
      case loom::ErrorKind::invalid_argument:
        return invalid_argument.ptr();
      case loom::ErrorKind::timeout:
        return timeout.ptr();
      case loom::ErrorKind::peer:
        return peer.ptr();
      case loom::ErrorKind::mismatch:
        return mismatch.ptr();
      case loom::ErrorKind::aborted:
        return aborted.ptr();
      case loom::ErrorKind::store:
        return store.ptr();
      default:
        return base.ptr();
    }
  }
};

PythonErrors* errors = nullptr;  // lives as long as the interpreter (the module is never freed)

py::object new_error(py::module_& m, const char* name, const py::object& base, const char* doc) {
  py::object type = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      (std::string("loom_torch.") + name).c_str(), doc, base.ptr(), nullptr));
  if (!type) throw py::error_already_set();
  m.attr(name) = type;
  return type;
}

void register_errors(py::module_& m) {
  errors = new PythonErrors();
  py::object runtime = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  errors->base = new_error(m, "LoomError", runtime, "An error raised by Loom.");
  errors->invalid_argument =
      new_error(m, "InvalidArgument", errors->base, "Refused before any communication.");
  errors->timeout = new_error(m, "LoomTimeoutError", errors->base, "A wait passed its timeout.");
  errors->peer = new_error(m, "PeerError", errors->base, "A peer failed or broke the protocol.");
  errors->mismatch = new_error(m, "CollectiveMismatch", errors->base,
                               "Ranks issued different collectives at the same point.");
  errors->aborted = new_error(m, "Aborted", errors->base, "The communicator was aborted.");
  errors->store = new_error(m, "StoreError", errors->base, "The rendezvous store failed.");
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const loom::Error& e) {
      PyErr_SetString(errors->of(e.kind()), e.what());
    }
  });
}

ProcessGroupLoom& loom_group(const c10::intrusive_ptr<BackendBase>& group) {
  auto* loom = dynamic_cast<ProcessGroupLoom*>(group.get());
  if (!loom) throw py::type_error("not a process group of the loom backend");
  return *loom;
}

// The backend's own Python class (a torch Backend), and its options (PyTorch 2.15).
void bind_group(py::module_& m) {
  py::class_<ProcessGroupLoom, BackendBase, c10::intrusive_ptr<ProcessGroupLoom>>(
      m, "ProcessGroupLoom", "The loom backend of a torch.distributed process group.")
#if LOOM_TORCH_BACKEND_API
      .def(
          "_split",
          [](ProcessGroupLoom& self, const std::vector<int>& ranks, const py::object& options) {
            c10::intrusive_ptr<c10d::Backend::Options> opts;
            if (!options.is_none()) opts = options.cast<c10::intrusive_ptr<LoomOptions>>();
            py::gil_scoped_release release;
            return self.split({}, ranks, opts);
          },
          py::arg("ranks"), py::arg("options") = py::none(),
          "Collective: the ranks listed (of this group) form a child group, in that order.")
      .def(
          "perform_nocolor_split", [](ProcessGroupLoom&, const py::object&) {},
          py::arg("device") = py::none(),
          "Nothing: a rank outside a new group takes no part in making it (create_group).")
#endif
      .def(
          "_pool",
          [](ProcessGroupLoom& self) -> py::object {
            const auto pool = self.pool_if_made();
            if (!pool) return py::none();
            return py::make_tuple(pool->capacity(), pool->in_use());
          },
          "(capacity, bytes in use) of the shared window allocate_tensor takes from, or None "
          "before its first use.")
      .def(
          "_in_window",
          [](ProcessGroupLoom& self, const at::Tensor& t) {
            return self.pool()->holds(t.data_ptr());
          },
          py::arg("tensor"), "Whether the tensor's memory lies in the group's shared window.");
#if LOOM_TORCH_BACKEND_API
  py::class_<LoomOptions, c10d::Backend::Options, c10::intrusive_ptr<LoomOptions>>(
      m, "Options",
      "Options of a loom group (pg_options): unset fields take the LOOM_* environment.")
      .def(py::init([](std::chrono::milliseconds timeout, std::optional<std::string> algorithm,
                       std::optional<std::size_t> buffer_bytes, std::optional<int> slots,
                       std::optional<int> sockets_per_peer, std::optional<std::string> transport) {
             auto o = c10::make_intrusive<LoomOptions>(timeout);
             o->algorithm = std::move(algorithm);
             o->buffer_bytes = buffer_bytes;
             o->slots = slots;
             o->sockets_per_peer = sockets_per_peer;
             o->transport = std::move(transport);
             return o;
           }),
           py::arg("timeout") = kBackendDefaultTimeout, py::arg("algorithm") = py::none(),
           py::arg("buffer_bytes") = py::none(), py::arg("slots") = py::none(),
           py::arg("sockets_per_peer") = py::none(), py::arg("transport") = py::none())
      .def_readwrite("algorithm", &LoomOptions::algorithm)
      .def_readwrite("buffer_bytes", &LoomOptions::buffer_bytes)
      .def_readwrite("slots", &LoomOptions::slots)
      .def_readwrite("sockets_per_peer", &LoomOptions::sockets_per_peer)
      .def_readwrite("transport", &LoomOptions::transport);
  // What Backend.mem_allocator returns: a c10::Allocator over the group's window.
  py::class_<WindowAllocator, std::shared_ptr<WindowAllocator>>(
      m, "WindowAllocator", "An allocator of host memory in a loom group's shared window.")
      .def(
          "bytes",
          [](WindowAllocator& self, std::size_t n) {
            c10::Storage storage(c10::Storage::use_byte_size_t(), n, self.allocate(n), nullptr,
                                 false);
            return at::empty({0}, at::kByte)
                .set_(std::move(storage), 0, {static_cast<long>(n)}, {1});
          },
          py::arg("n"), "A uint8 tensor of n bytes from this allocator.");
#endif
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Loom as a torch.distributed backend";
  py::module_::import("torch.distributed");  // c10d's Store and ProcessGroup types first
  register_errors(m);

  m.def(
      "_create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout, const py::object& options) {
        loom::Options settings;
#if LOOM_TORCH_BACKEND_API
        c10::intrusive_ptr<LoomOptions> given;
        if (!options.is_none()) {
          given = c10::make_intrusive<LoomOptions>(options.cast<const LoomOptions&>());
          given->timeout = timeout;
          settings = given->loom();
        }
#else
        if (!options.is_none()) throw py::type_error("loom: options need PyTorch 2.15 or later");
#endif
        py::gil_scoped_release release;
        auto group = c10::make_intrusive<ProcessGroupLoom>(store, rank, size, timeout, settings);
#if LOOM_TORCH_BACKEND_API
        if (given) group->set_options(given);
#endif
        return group;
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::arg("options") = py::none(),
      "The loom backend for a group: joins through `store` with `timeout` as Loom's timeout, "
      "and the settings `options` (a loom_torch.Options) sets.");
  m.def(
      "_describe",
      [](const c10::intrusive_ptr<BackendBase>& group) { return loom_group(group).describe(); },
      py::arg("group"), "Host, transport and settings of a loom group's communicator.");
  bind_group(m);
  m.def("_cuda_supported", &cuda::supported);

  py::class_<LoomBackedStore, c10d::Store, c10::intrusive_ptr<LoomBackedStore>>(
      m, "LoomStore",
      "A torch.distributed Store that is a client of Loom's store server (loomrun's).")
      .def(py::init(
               [](const std::string& host, std::uint16_t port, std::chrono::milliseconds timeout) {
                 return c10::make_intrusive<LoomBackedStore>(
                     std::make_shared<loom::TcpStore>(host, port, timeout), timeout);
               }),
           py::arg("host"), py::arg("port"), py::arg("timeout"),
           py::call_guard<py::gil_scoped_release>());
}
