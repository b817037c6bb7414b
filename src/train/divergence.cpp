// divergence.cpp: a non-finite loss or parameter found at the end of the epoch (see divergence.h).
#include "src/train/divergence.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

namespace dpb {

DivergenceWatch::DivergenceWatch(Device& dev, int steps)
    : dev_(&dev), steps_(steps),
      sums_(dev, size_t(std::max(steps, 1)), MemCategory::Temporaries, "loss per step (divergence)") {}

void DivergenceWatch::after_step(const Replica& rep, int s) {
  if (s >= 0 && s < steps_) dev_->copy(sums_.get() + s, rep.stats.get(), 1);  // stats[0]: loss sum
}

void DivergenceWatch::check(const Replica& rep, CommGroup& group, EpochStats& st) {
  const int r = rep.dev->rank(), k = group.size();
  // {first step whose running loss sum is not finite (-1: none), parameters not finite (0/1)}.
  int mine[2] = {-1, 0};
  if (!std::isfinite(rep.host_stats[0])) {  // the slots are read only then: no cost otherwise
    std::vector<float> sums(static_cast<size_t>(steps_));
    dev_->download(sums.data(), sums_.get(), sums.size());
    for (int s = 0; s < steps_ && mine[0] < 0; ++s)
      if (!std::isfinite(sums[size_t(s)])) mine[0] = s;
  }
  for (float w : rep.host_w)
    if (!std::isfinite(w)) {
      mine[1] = 1;
      break;
    }
  std::vector<int> all(size_t(2) * size_t(k));
  group.allgather_host(r, mine, all.data(), sizeof mine);
  st.diverged = !std::isfinite(st.train_loss);  // the ranks' sums together (the same everywhere)
  st.diverged_step = st.diverged_rank = -1;
  for (int p = 0; p < k; ++p) {
    const int step = all[size_t(2 * p)];
    if (step >= 0 && (st.diverged_step < 0 || step < st.diverged_step))
      st.diverged_step = step, st.diverged_rank = p;
    st.diverged = st.diverged || step >= 0 || all[size_t(2 * p + 1)] != 0;
  }
}

std::string divergence_message(const EpochStats& st, int steps) {
  std::ostringstream os;
  os << "training diverged in epoch " << st.epoch;
  if (st.diverged_step >= 0)
    os << " at step " << st.diverged_step + 1 << "/" << steps << " (rank " << st.diverged_rank
       << "'s loss first not finite; the epoch's loss " << st.train_loss << ")";
  else if (!std::isfinite(st.train_loss))
    os << " (the epoch's loss " << st.train_loss << ")";
  else
    os << " (the parameters are not finite after it: a non-finite gradient; the loss stayed "
          "finite, "
       << st.train_loss << ")";
  return os.str();
}

}  // namespace dpb
