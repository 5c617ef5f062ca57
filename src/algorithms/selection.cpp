// Which algorithm runs a call. Today every collective has one algorithm per kind over any
// transport; LOOM_ALGO names one explicitly and is checked against what exists.
#include <fmt/format.h>

#include "algorithms/algorithms.hpp"
#include "core/logging.hpp"

namespace loom::algorithms {

namespace {
struct Entry {
  Kind kind;
  const char* name;
  void (*run)(Engine&, const Collective&);
};
constexpr Entry kTable[] = {
    {Kind::all_reduce, "ring", ring_all_reduce},
    {Kind::reduce_scatter, "ring", ring_reduce_scatter},
    {Kind::all_gather, "ring", ring_all_gather},
    {Kind::broadcast, "chain", pipelined_broadcast},
    {Kind::reduce, "chain", pipelined_reduce},
    {Kind::barrier, "dissemination", dissemination_barrier},
    {Kind::send, "direct", point_to_point},
    {Kind::recv, "direct", point_to_point},
};
}  // namespace

void select_and_run(Engine& engine, const Collective& call) {
  const std::string& forced = engine.config().algorithm;
  for (const Entry& e : kTable) {
    if (e.kind != call.kind) continue;
    if (!forced.empty() && call.kind == Kind::all_reduce && forced != e.name)
      throw InvalidArgument(fmt::format("{}: LOOM_ALGO={} is not an all-reduce algorithm (have: ring)",
                                        call.describe(), forced));
    e.run(engine, call);
    return;
  }
  throw InvalidArgument(fmt::format("{}: no algorithm for this call", call.describe()));
}

}  // namespace loom::algorithms
