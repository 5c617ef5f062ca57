#include "gil.hpp"

#include <Python.h>

namespace loom_torch {

void without_gil(const std::function<void()>& f) {
  if (!Py_IsInitialized() || !PyGILState_Check()) {
    f();
    return;
  }
  PyThreadState* state = PyEval_SaveThread();
  struct Restore {
    PyThreadState* state;
    ~Restore() { PyEval_RestoreThread(state); }
  } restore{state};
  f();
}

}  // namespace loom_torch
