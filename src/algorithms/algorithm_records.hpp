// What algorithms keep across the calls of one communicator (such as the peers a single-copy read
// failed with), without the engine knowing what any of it is: each algorithm names its record by
// a type of its own, made empty on first use. Used by whichever thread runs the engine's call.
#pragma once

#include <memory>
#include <typeindex>
#include <unordered_map>

namespace loom::algorithms {

class AlgorithmRecords {
 public:
  template <typename Record>
  Record& get() {
    std::shared_ptr<void>& slot = records_[std::type_index(typeid(Record))];
    if (!slot) slot = std::make_shared<Record>();
    return *static_cast<Record*>(slot.get());
  }

 private:
  std::unordered_map<std::type_index, std::shared_ptr<void>> records_;
};

}  // namespace loom::algorithms
