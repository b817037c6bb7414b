// inject.h: faults injected on purpose (--inject), to prove that the per-rank breakdown and the
// straggler report (breakdown.h) name the rank and the phase that lose the time.
//
//   --inject delay:rank=2,phase=backward,ms=30[,every=N]   rank 2 sleeps 30 ms at the start of its
//                                                         backward, every N-th step (default 1)
//   --inject link:rank=1,gbps=0.5                         rank 1's send and receive links run at
//                                                         0.5 Gb/s on the emulated link
// The flag may be given more than once (or specs joined with ';').
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "collectives/link.h"

namespace dpb {

// The phases a delay can be injected into: the step's compute phases (breakdown.h's names).
// "data", "forward", "backward", "optimizer".
const std::vector<std::string>& injectable_phases();

struct DelayInjection {
  int rank = 0;
  std::string phase;  // one of injectable_phases()
  double ms = 0;      // > 0
  int every = 1;      // every N-th step of each epoch (steps 0, N, 2N, ...)
};

struct LinkInjection {
  int rank = 0;
  double gbps = 0;  // > 0: that rank's links' bandwidth on the emulated link
};

struct Injections {
  std::vector<DelayInjection> delays;
  std::vector<LinkInjection> links;
  bool empty() const { return delays.empty() && links.empty(); }
  // "delay:rank=2,phase=backward,ms=30;link:rank=1,gbps=0.5" (the CSV's inject column; "" none)
  std::string describe() const;
};

// Adds one or more specs (joined with ';') to `into`. Throws dpb::Error naming --inject and the
// bad part (unknown kind, key, phase, a missing or non-positive value).
void parse_injections(const std::string& spec, Injections& into);
// Throws naming --inject when a rank is >= devices.
void validate_injections(const Injections& inj, int devices);

// Rank `rank` at the start of phase `phase` of step `step`: sleeps for the delays injected there.
void inject_delay(const Injections& inj, int rank, std::string_view phase, int step);

// `base` with inj's link injections as per-rank bandwidth overrides (LinkSpec::rank_gbps): the
// link the group's transport is paced by (enabled when there is an override).
LinkSpec injected_link(const LinkSpec& base, const Injections& inj);

}  // namespace dpb
