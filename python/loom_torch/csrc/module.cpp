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

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "Loom as a torch.distributed backend";
  py::module_::import("torch.distributed");  // c10d's Store and ProcessGroup types first
  register_errors(m);

  m.def(
      "_create_process_group",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
         std::chrono::milliseconds timeout) -> c10::intrusive_ptr<BackendBase> {
        return c10::make_intrusive<ProcessGroupLoom>(store, rank, size, timeout);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
      py::call_guard<py::gil_scoped_release>(),
      "The loom backend for a group: joins through `store` with `timeout` as Loom's timeout.");
  m.def(
      "_describe",
      [](const c10::intrusive_ptr<BackendBase>& group) { return loom_group(group).describe(); },
      py::arg("group"), "Host, transport and settings of a loom group's communicator.");

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
