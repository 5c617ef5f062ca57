// A rank SIGKILLed while 4 ranks run 1 MiB-block all-to-alls (or 4 MiB all-reduces) over shared
// memory (between its messages, or while its peers read its memory): every survivor must raise
// PeerError naming it within seconds, never hang or pass off a wrong result (every call that
// returns is checked element by element).
#pragma once

#include <string>

namespace loom::testing {

// `algorithm`: the LOOM_ALGO rule the communicator runs with ("alltoall:single_copy", ...);
// `shared`: the input comes from Communicator::alloc.
void all_to_all_kill_trial(const std::string& algorithm, bool shared);
// The same of 4 MiB all-reduces of plain buffers.
void all_reduce_kill_trial(const std::string& algorithm);

}  // namespace loom::testing
