// conv_algo_cache.h: which cuDNN convolution algorithm a shape uses (conv_cudnn.cu), as a policy
// with no CUDA in it, so that the CPU build tests it (tests/test_conv_algo_cache.cpp).
//
// Locks: one cache per process, one lock per GPU, and no lock is ever held while an algorithm
// search (cudnnFind*) runs. A search waits for its GPU: it times kernels, and with CUDA's lazy
// module loading (the default from CUDA 12.2) the first launch of a kernel may wait for the
// device to drain, which includes an NCCL kernel that waits for a peer rank. Had that peer to
// take a lock this search holds (e.g. one lock per process, held across the search), neither
// would move: the first step of threads + NCCL + overlap on 2+ GPUs could hang. So a rank looks
// the shape up under its GPU's lock, searches with no lock held, and inserts under the lock
// again; when two ranks of one GPU search the same shape at once, the first insert wins and both
// use it (same algorithm on every rank of a GPU; their timings may disturb each other, once).
// Ranks that share one GPU and NCCL (NCCL >= 2.30, NCCL_MULTI_RANK_GPU_ENABLE=1) can still
// deadlock on lazy loading without any lock of ours (a kernel load waits for the other rank's
// NCCL kernel on the same device, which waits for this rank): only CUDA_MODULE_LOADING=EAGER,
// set before CUDA starts, rules that out; nccl_allreduce.cu warns when it is not set then.
//
// Batch size: the last, partial batch of an epoch reuses the algorithm found for another batch
// size of the same shape (no search inside a timed epoch), checked by its workspace query
// (use()). The choice is marked not exact: if cuDNN then refuses to run it (FFT and Winograd
// variants can reject a shape the workspace query accepted), the caller searches for the exact
// shape (exact_only) and runs again.
#pragma once
#include <array>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "src/core/check.h"

namespace dpb {

struct ConvAlgoKey {
  int gpu = 0;
  bool tf32 = false;
  int dir = 0;                  // 0 forward, 1 backward data, 2 backward filter
  std::array<int, 9> shape{};   // n, c, h, w, k, r, s, pad, stride: n (the batch) first
};

struct ConvAlgo {
  int algo = -1;  // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  int math = 0;   // cudnnMathType_t it was timed with
};

class ConvAlgoCache {
 public:
  enum class Match { None, Exact, OtherBatch };
  struct Hit {
    Match match = Match::None;
    ConvAlgo algo;
  };

  // The entry for exactly this key; else one that differs only in the batch size (the largest
  // such batch); else Match::None.
  Hit lookup(const ConvAlgoKey& key) const {
    Gpu& g = gpu(key.gpu);
    Held held(g.mu);
    const Inner k = inner(key);
    if (auto it = g.found.find(k); it != g.found.end()) return {Match::Exact, it->second};
    Inner hi = k;
    std::get<3>(hi) = std::numeric_limits<int>::max();
    auto it = g.found.upper_bound(hi);  // just past this shape's largest batch
    if (it != g.found.begin()) {
      --it;
      if (same_but_batch(it->first, k)) return {Match::OtherBatch, it->second};
    }
    return {};
  }

  // Stores a for key unless an entry is there already (another rank's search ended first);
  // returns the entry kept, which every rank then uses.
  ConvAlgo insert(const ConvAlgoKey& key, const ConvAlgo& a) {
    Gpu& g = gpu(key.gpu);
    Held held(g.mu);
    return g.found.emplace(inner(key), a).first->second;
  }

  // Test hook: cache locks the calling thread holds now (0 whenever a search runs).
  static int locks_held_here() { return held_count(); }

 private:
  using Inner = std::tuple<bool, int, std::array<int, 8>, int>;  // tf32, dir, shape but n, n
  struct Gpu {
    std::mutex mu;
    std::map<Inner, ConvAlgo> found;
  };
  struct Held {  // a lock_guard that the test hook can see
    std::lock_guard<std::mutex> lk;
    explicit Held(std::mutex& m) : lk(m) { ++held_count(); }
    ~Held() { --held_count(); }
  };
  static int& held_count() {
    thread_local int n = 0;
    return n;
  }
  static Inner inner(const ConvAlgoKey& k) {
    std::array<int, 8> rest{};
    for (int i = 1; i < 9; ++i) rest[size_t(i - 1)] = k.shape[size_t(i)];
    return {k.tf32, k.dir, rest, k.shape[0]};
  }
  static bool same_but_batch(const Inner& a, const Inner& b) {
    return std::get<0>(a) == std::get<0>(b) && std::get<1>(a) == std::get<1>(b) &&
           std::get<2>(a) == std::get<2>(b);
  }
  // This GPU's part; the map of parts is locked only to find or add one.
  Gpu& gpu(int id) const {
    std::lock_guard<std::mutex> lk(gpus_mu_);
    std::unique_ptr<Gpu>& g = gpus_[id];
    if (!g) g = std::make_unique<Gpu>();
    return *g;
  }

  mutable std::mutex gpus_mu_;
  mutable std::map<int, std::unique_ptr<Gpu>> gpus_;
};

struct ConvAlgoChoice {
  ConvAlgo algo;
  bool exact = false;  // found for this very shape (false: reused from another batch size)
};

// The policy above. use(a) applies a to the caller's plan and returns false when cuDNN reports
// it unusable for this shape (its workspace query fails); find() runs the search and returns the
// best usable algorithm. exact_only: skip the reuse of another batch size's algorithm (its
// execution was refused). Throws dpb::Error naming the direction when the found algorithm is not
// usable either.
template <class Find, class Use>
ConvAlgoChoice choose_conv_algo(ConvAlgoCache& cache, const ConvAlgoKey& key, bool exact_only,
                                Find&& find, Use&& use) {
  const ConvAlgoCache::Hit hit = cache.lookup(key);
  if (hit.match == ConvAlgoCache::Match::Exact && use(hit.algo)) return {hit.algo, true};
  if (hit.match == ConvAlgoCache::Match::OtherBatch && !exact_only && use(hit.algo))
    return {hit.algo, false};
  const ConvAlgo found = find();  // no cache lock held: see the header comment
  const ConvAlgo kept = cache.insert(key, found);
  DPB_CHECK(use(kept), "cuDNN: convolution direction " << key.dir << " algorithm " << kept.algo
                           << " was found for this shape but reports no workspace size for it");
  return {kept, true};
}

}  // namespace dpb
