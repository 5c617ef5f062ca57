// The build without a CUDA toolkit: all memory is host memory.
#include "device/device.hpp"

namespace loom::device {

bool built() {
  return false;
}
int count() {
  return 0;
}
int of(const void*) {
  return -1;
}
std::string describe() {
  return "no CUDA support in this build";
}

}  // namespace loom::device
