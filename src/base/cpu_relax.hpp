// One round of a spin loop: tells the core this thread is spinning (x86 pause, Arm yield), so a
// sibling hyperthread gets the pipeline and the loop leaves the memory bus alone.
#pragma once

namespace loom::base {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace loom::base
