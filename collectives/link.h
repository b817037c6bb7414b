// link.h: an emulated interconnect between ranks, and the alpha-beta cost of each all-reduce
// algorithm on it.
//
// LinkSpec: G (gigabits per second per direction) and L (microseconds per transfer); 0 and 0 is
// "no emulation". with_link() wraps a rank's Device in a decorator that paces every comm transfer
// between two ranks (comm_copy / comm_reduce whose source or destination is another rank's
// memory) so that it completes no sooner than L + bytes / G after it starts. Each rank has one
// send and one receive link (full duplex); a transfer from rank a to rank b starts when a's send
// link and b's receive link are free, and occupies both for bytes / G (the latency is
// propagation, not occupancy). The decorator does the real copy or sum first and then SLEEPS
// until the emulated completion, so waiting ranks and communication threads leave the cores to
// compute, as GPU copy engines and NICs do. Algorithms do not know: naive, ring and every other
// algorithm that moves data through comm_copy / comm_reduce on peer pointers is paced.
//
// Whose memory: each decorated device registers its allocations with the shared LinkFabric; a
// pointer no decorated device allocated counts as the caller's own (host staging, tests).
//
// Two clocks. Until a rank's host says when its comm work was issued, a transfer starts when its
// caller books it (wall time): the microbenchmarks. Once it does (GradSync calls comm_wait_mark
// with the compute mark of the moment backward made the unit ready, or comm_wait_compute after
// backward), that rank's transfers run on an emulated comm STREAM, as a GPU's copy engine does:
// a transfer starts at the latest of the last rank's issue time, the end of the booking rank's
// previous transfer and the two links being free, not when the host thread that books it happens
// to wake up. On a CPU shared by 2k threads a sleeping thread is woken milliseconds late while
// compute runs; with wall-time booking every barrier of a ring step added that delay to the
// link, so overlap hid almost nothing at k = 4 on 2 cores (docs/decisions.md). The host still
// does the real work in order (the data is real): the run takes the longer of the host's path
// and the link's.
//
// Processes: LinkFabric::reserve is the whole pacing policy. Threads share one fabric; the MPI
// transport (collectives/mpi/mpi_transport.cpp) paces its sends and receives with the same call
// on a per-process fabric (wall-time booking) and sleeps the same way; the moves the threads
// transport makes on one rank's thread (its receives and its puts) are booked one after another,
// as that thread would do them. A process sees only its
// own traffic: its send and receive links are exact, a peer's are booked only with what this
// process sent to or received from it.
//
// Cost model (allreduce_link_cost): the emulated time of one all-reduce of n bytes over k ranks,
// one function per algorithm, named by its registry entry, e.g. ring: 2(k-1) (L + n/(k G)). CPU work (sums,
// copies) is assumed to hide inside the emulated time, which holds when the link is slow.
// Tested by tests/test_link.cpp.
#pragma once
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "src/core/device.h"

namespace dpb {

struct LinkSpec {
  double gbps = 0;        // gigabits per second per direction; 0: unlimited bandwidth
  double latency_us = 0;  // per transfer; 0: none
  bool enabled() const { return gbps > 0 || latency_us > 0; }
  // Seconds one transfer of `bytes` takes on an idle link: L + bytes / G.
  double transfer_s(double bytes) const {
    return latency_us * 1e-6 + (gbps > 0 ? bytes * 8.0 / (gbps * 1e9) : 0.0);
  }
  std::string label() const;  // "0.2 Gb/s, 50 us" or "none"
};

// Throws dpb::Error naming the option when G or L is negative or not finite.
void validate_link(const LinkSpec& link, const std::string& gbps_opt,
                   const std::string& latency_opt);

// Shared pacing state of k ranks: the time each rank's send and receive link become free, and
// which rank owns which allocation. Thread-safe.
class LinkFabric {
 public:
  using Clock = std::chrono::steady_clock;
  LinkFabric(int k, LinkSpec spec);
  const LinkSpec& spec() const { return spec_; }
  int size() const { return int(send_free_.size()); }
  // Books a transfer of `bytes` from rank src to rank dst by rank `by` (whose thread does it);
  // returns when it completes. It starts now (wall time) unless every rank issued its comm work
  // with issue(); then no earlier than the last issue and the end of by's previous transfer.
  // Never before not_before (the MPI transport chains the moves one rank makes in a step).
  Clock::time_point reserve(int src, int dst, double bytes, int by,
                            Clock::time_point not_before = {});
  // Rank r's comm work from here on was issued (by its host) at t: its transfers run on r's
  // emulated stream, no earlier than t.
  void issue(int r, Clock::time_point t);
  void add_memory(const void* p, size_t bytes, int rank);
  void remove_memory(const void* p);
  int owner(const void* p, int fallback) const;  // rank whose allocation holds p, else fallback
  // Totals since construction (for tests and reports).
  long transfers() const;
  double bytes() const;

 private:
  LinkSpec spec_;
  mutable std::mutex mu_;
  std::vector<Clock::time_point> send_free_, recv_free_;
  std::vector<Clock::time_point> issued_, stream_;  // per rank: issue time, its last transfer's end
  std::vector<char> streamed_;                      // per rank: issue() was called
  std::map<const char*, std::pair<size_t, int>> mem_;  // start -> (bytes, rank)
  long transfers_ = 0;
  double bytes_ = 0;
};

// Sleeps (never spins, 1 ns timer slack) until t: how a paced transfer waits for its completion.
void link_sleep_until(LinkFabric::Clock::time_point t);

// Decorates `inner` (rank inner->rank(), CPU backend only: a CUDA stream is not paced by a host
// sleep) so its comm transfers to and from other ranks are paced by `fabric`.
std::unique_ptr<Device> with_link(std::unique_ptr<Device> inner, std::shared_ptr<LinkFabric> fabric);

// Wraps every device of a rank set in one shared fabric (no-op when the spec is not enabled).
void attach_link(std::vector<std::unique_ptr<Device>>& devs, const LinkSpec& spec);

// ---- alpha-beta cost models, one per algorithm (each algorithm's registry entry points to its
// own; collectives/registry.cpp). Seconds for one all-reduce of `bytes` per rank over k ranks.
double naive_link_cost(double bytes, int k, const LinkSpec& link);   // 2(k-1) (L + n/G)
double ring_link_cost(double bytes, int k, const LinkSpec& link);    // 2(k-1) (L + n/(kG))
double direct_link_cost(double bytes, int k, const LinkSpec& link);  // 2(k-1) (L + n/(kG))
double rhd_link_cost(double bytes, int k, const LinkSpec& link);     // 2 log2(k) L + 2(k-1)/k n/G
// The registry entry's cost; auto: the cost of what its tuning table (tune_file, "": the built-in
// one) picks for this size, k and backend. Throws dpb::Error naming the algorithm when it is
// unknown or has no cost model.
double allreduce_link_cost(const std::string& algorithm, double bytes, int k, const LinkSpec& link,
                           BackendKind kind = BackendKind::Cpu, const std::string& tune_file = "");

}  // namespace dpb
