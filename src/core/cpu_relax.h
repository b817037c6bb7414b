// cpu_relax.h: the spin-wait hint (x86 pause, Arm yield) for loops that poll shared memory.
#pragma once
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace dpb {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace dpb
