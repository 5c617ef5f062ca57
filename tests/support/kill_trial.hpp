// A rank SIGKILLed while 4 ranks run 1 MiB-block all-to-alls (or 4 MiB all-reduces) over shared
// memory (between its messages, or while its peers read its memory): every survivor must raise
// PeerError naming it within seconds, never hang or pass off a wrong result (every call that
// returns is checked element by element).
#pragma once

#include <string>

#include "ranks.hpp"

namespace loom::testing {

// `algorithm`: the LOOM_ALGO rule the communicator runs with ("alltoall:single_copy", ...);
// `shared`: the input comes from Communicator::alloc.
void all_to_all_kill_trial(const std::string& algorithm, bool shared);
// The same of 4 MiB all-reduces of plain buffers.
void all_reduce_kill_trial(const std::string& algorithm);
// 4 ranks run exact 4 MiB i32 all-reduces with `opts` (which must place them on two pretend
// hosts and let the size's first calls be a trial: the model's choice, then its rival, then a
// round of times around the ring); rank 2 is SIGKILLed as its call number `dying_call` (from 0)
// starts. Every survivor must raise PeerError naming it within seconds, in about that call, with
// every call before it one of the trial's and no verdict reached.
void all_reduce_across_hosts_kill_trial(RunOptions opts, int dying_call);

}  // namespace loom::testing
