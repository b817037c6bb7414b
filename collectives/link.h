// link.h: an emulated interconnect between ranks, paced at one seam (a transport's step) for
// ranks that are threads and ranks that are processes alike, and the query of the all-reduce
// algorithms' alpha-beta cost models on it.
//
// LinkSpec: G (gigabits per second per direction) and L (microseconds per transfer); 0 and 0 is
// "no emulation". Each rank has one send and one receive link (full duplex); a transfer from rank
// a to rank b starts when a's send link and b's receive link are free, occupies both for
// bytes / G (the latency is propagation, not occupancy) and completes L + bytes / G after it
// starts. A rank's links may be slower than G (LinkSpec::rank_gbps, --inject link): a transfer
// then runs at the slower end's G, and each rank's link occupancy is summed (send_busy_seconds).
// LinkFabric::reserve is the whole booking policy; book_step applies it to one step of
// src/core/transport.h (its sends and receives), and with_link(Transport) paces every step of a
// transport with it: book, do the moves for real, then SLEEP until the emulated completion before
// the step's fence, so waiting ranks and communication threads leave the cores to compute, as GPU
// copy engines and NICs do. Algorithms do not know: every schedule written over the transport's
// steps is paced, the same way whichever launcher runs it.
//
// The link lives in the transport alone; devices do not know of it. Threads: the threads
// transport given a LinkSpec (CommGroup(k, devices, link), make_thread_transport) paces its steps
// on one fabric the k ranks share, each rank booking and making its moves one at a time (the
// shared links go first come, first served). Processes: make_mpi_transport given a LinkSpec paces
// with a fabric per process, which sees only its own traffic: its send and receive links are
// exact, a peer's are booked only with what this process sent to or received from it.
// CommGroup::paced() says whether a group's steps are paced.
//
// Two clocks. Until every rank's host says when its comm work was issued, a transfer starts when
// its step books it (wall time): the microbenchmarks, and runs over processes (a per-process
// fabric hears only its own rank). Once they do (GradSync tells its all-reduce, which tells the
// group's transport, Transport::issue: after dev.comm_wait_mark, the time it took that compute
// mark, the moment backward made the unit ready; after dev.comm_wait_compute, the time then), the
// rank's transfers run on an emulated comm STREAM, as a GPU's copy engine does: a transfer starts
// at the latest of the last rank's issue time, the end of the booking rank's previous transfer
// and the two links being free, not when the host thread that books it wakes up (a thread woken
// late on a shared CPU would add its delay to every step: docs/decisions.md). The host still does
// the real work in order (the data is real): the run takes the longer of the host's path and the
// link's.
//
// Cost model (allreduce_link_cost): the emulated time of one all-reduce of n bytes over k ranks;
// each algorithm's formula lives in its own file (e.g. ring.cpp: 2(k-1) (L + n/(k G))) and its
// registry entry carries it. CPU work (sums, copies) is assumed to hide inside the emulated time,
// which holds when the link is slow.
// Tested by tests/test_link.cpp and tests/test_link_seam.cpp (book_step, the paced step).
#pragma once
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "src/core/device.h"
#include "src/core/transport.h"

namespace dpb {

struct LinkSpec {
  double gbps = 0;        // gigabits per second per direction; 0: unlimited bandwidth
  double latency_us = 0;  // per transfer; 0: none
  // Emulated nodes (DPB_NODES, --nodes; issue 26): the k ranks are `nodes` nodes of k / nodes
  // ranks each, numbered node by node (rank r on node r / (k / nodes)). A transfer between ranks
  // of two nodes runs on the inter-node link: node_gbps and node_latency_us (0 and 0: the same as
  // inside a node); inside a node on gbps and latency_us. Each rank keeps one send and one
  // receive link for both (a NIC per GPU, as NCCL's rail-optimized clusters have). CommGroup takes
  // its node count from here (allreduce.h, node_group / cross_group).
  int nodes = 1;
  double node_gbps = 0;
  double node_latency_us = 0;
  // Per-rank overrides of gbps (--inject link:rank=R,gbps=G, src/train/inject.h): rank R's send
  // and receive links run at G (> 0). A transfer src -> dst runs at the slower of gbps_of(src)
  // and gbps_of(dst) (0, unlimited, on both sides: no bandwidth pacing).
  std::vector<std::pair<int, double>> rank_gbps;
  bool enabled() const {
    return gbps > 0 || latency_us > 0 || !rank_gbps.empty() || node_gbps > 0 ||
           node_latency_us > 0;
  }
  // Ranks src and dst are on different emulated nodes of a group of k ranks.
  bool crosses(int src, int dst, int k) const {
    if (nodes <= 1 || k < nodes) return false;
    const int g = k / nodes;
    return src / g != dst / g;
  }
  // The inter-node link as a spec of its own (node_gbps, node_latency_us, or gbps, latency_us when
  // both are 0): what cost models charge the cross-node steps with.
  LinkSpec inter() const {
    LinkSpec l;
    const bool own = node_gbps > 0 || node_latency_us > 0;
    l.gbps = own ? node_gbps : gbps;
    l.latency_us = own ? node_latency_us : latency_us;
    return l;
  }
  // Rank `rank`'s links' bandwidth: its smallest override, else gbps.
  double gbps_of(int rank) const;
  // Seconds a transfer src -> dst of `bytes` occupies the links: bytes / min(gbps_of(src),
  // gbps_of(dst)), the 0s (unlimited) left out; 0 when both are unlimited.
  // With k > 0, a transfer between two emulated nodes runs at the inter-node G instead (the
  // per-rank overrides still slow it).
  double busy_s(int src, int dst, double bytes, int k = 0) const;
  // Seconds of latency of a transfer src -> dst in a group of k ranks: latency_us, or the
  // inter-node one between nodes.
  double latency_s(int src, int dst, int k) const {
    return (crosses(src, dst, k) ? inter().latency_us : latency_us) * 1e-6;
  }
  // Seconds one transfer of `bytes` takes on an idle link: L + bytes / G (the base G: the cost
  // models know no overrides).
  double transfer_s(double bytes) const {
    return latency_us * 1e-6 + (gbps > 0 ? bytes * 8.0 / (gbps * 1e9) : 0.0);
  }
  // transfer_s between ranks src and dst of a group of k: on the inter-node link when they are
  // on two nodes. The cost models of schedules that move data between fixed pairs (naive, rhd).
  double transfer_s(double bytes, int src, int dst, int k) const {
    return crosses(src, dst, k) ? inter().transfer_s(bytes) : transfer_s(bytes);
  }
  // Seconds of one step of a flat schedule over k ranks in which every rank moves `bytes` to its
  // peer at the same distance d (ring: d = 1; direct's turns: d = 1..k-1), all at once: the step
  // waits for its slowest transfer. Across nodes, every such step has a transfer that crosses
  // (rank g-1 to g, or rank 0 to the last node), so the slower of the two links bounds it; one
  // node: transfer_s.
  double step_s(double bytes, int k) const;
  // "0.2 Gb/s, 50 us", "1 Gb/s, 50 us; rank 1 0.1 Gb/s", "...; 2 nodes, 0.1 Gb/s, 50 us
  // between" or "none"
  std::string label() const;
};

// Throws dpb::Error naming the option when G or L is negative or not finite, or an override's
// rank is negative or its G is not a finite number >= 1e-6.
// The node fields: node_gbps and node_latency_us as G and L (named --node-link-gbps,
// --node-link-latency-us), nodes >= 1.
void validate_link(const LinkSpec& link, const std::string& gbps_opt,
                   const std::string& latency_opt);

// Shared pacing state of k ranks: the time each rank's send and receive link become free, and
// each rank's emulated comm stream. Thread-safe.
class LinkFabric {
 public:
  using Clock = std::chrono::steady_clock;
  LinkFabric(int k, LinkSpec spec);
  const LinkSpec& spec() const { return spec_; }
  int size() const { return int(send_free_.size()); }
  // Books a transfer of `bytes` from rank src to rank dst by rank `by` (whose thread does it);
  // returns when it completes. It starts now (wall time) unless every rank issued its comm work
  // with issue(); then no earlier than the last issue and the end of by's previous transfer.
  // Never before not_before (book_step chains the moves one rank makes in a step).
  Clock::time_point reserve(int src, int dst, double bytes, int by,
                            Clock::time_point not_before = {});
  // Rank r's comm work from here on was issued (by its host) at t: its transfers run on r's
  // emulated stream, no earlier than t.
  void issue(int r, Clock::time_point t);
  // Totals since construction (for tests and reports).
  long transfers() const;
  double bytes() const;
  // Seconds rank r's send (receive) link was occupied by the transfers booked here from (to) r:
  // the sum of their bytes / G (LinkSpec::busy_s), the latency not counted. The straggler
  // report's comm attribution. Processes: exact for this process's own rank (every transfer from
  // or to it is booked on its fabric), partial for its peers.
  double send_busy_seconds(int r) const;
  double recv_busy_seconds(int r) const;

 private:
  LinkSpec spec_;
  mutable std::mutex mu_;
  std::vector<Clock::time_point> send_free_, recv_free_;
  std::vector<Clock::time_point> issued_, stream_;  // per rank: issue time, its last transfer's end
  std::vector<char> streamed_;                      // per rank: issue() was called
  std::vector<double> send_busy_, recv_busy_;       // per rank: seconds booked on its links
  long transfers_ = 0;
  double bytes_ = 0;
};

// Sleeps (never spins, 1 ns timer slack) until t: how a paced step waits for its completion.
void link_sleep_until(LinkFabric::Clock::time_point t);

// ---- the seam: a transport's step, for threads and processes alike.
// Books the transfers of rank `rank`'s step on fab and returns when the last would complete (now
// when there are none). A move is booked by the rank whose thread makes it: this rank's receives
// that are not puts, and its puts, one after another (as its thread, or its emulated stream, does
// them). A move a rank of ANOTHER process makes (a pull from our buffer, a put into ours;
// t.is_local false) is booked here too, as it comes: this process's view of its own links.
// Threads: every move is booked once, by its own rank, on the fabric all ranks share; processes:
// each books its moves and its peers' moves with it on a fabric of its own. This rank's first
// move starts no earlier than not_before.
LinkFabric::Clock::time_point book_step(LinkFabric& fab, const Transport& t, int rank,
                                        std::span<const SendOp> sends,
                                        std::span<const RecvOp> recvs,
                                        LinkFabric::Clock::time_point not_before = {});

// Paces every step of `inner` on `fabric`: book_step, the inner step's moves (real data, at host
// speed), a sleep until the link delivers, then the step's fence. When every rank books on the
// fabric (threads: one fabric shared by all), the rank makes and books its moves one at a time,
// each when the one before is delivered: the links are booked first come, first served (no gaps
// filled), so a rank that booked a whole step at once would take links its peers need sooner
// (direct's k-1 reads at k = 4 took 2.5x the model that way). Its paced() is true and its
// issue(r, t) is fab->issue(r, t). make_thread_transport and make_mpi_transport wrap their
// transport with it when they are given an enabled LinkSpec (threads: one fabric for the k
// ranks; processes: a fabric per process).
std::unique_ptr<Transport> with_link(std::unique_ptr<Transport> inner,
                                     std::shared_ptr<LinkFabric> fabric);
// The transport a paced one wraps; t itself when it is not paced.
Transport& unpaced(Transport& t);
// The link a paced transport is paced by (its fabric's spec), or nullptr when t is not paced:
// what `--allreduce auto` weighs hier against the flat rules on (auto.cpp).
const LinkSpec* paced_link(const Transport& t);

// ---- alpha-beta cost models. Each algorithm's lives in its own file (naive.cpp, ring.cpp, ...)
// and its registry entry carries it (AllReduceEntry::link_cost, collectives/registry.cpp).
// What a cost model is asked: one all-reduce of `bytes` per rank over k ranks of backend `kind` on
// `link`; tune_file: the tuning table auto consults ("": the built-in one).
struct LinkCostQuery {
  double bytes = 0;
  int k = 1;
  LinkSpec link;
  BackendKind kind = BackendKind::Cpu;
  std::string tune_file;
};
// Seconds for that all-reduce by the registry entry called `algorithm`. Throws dpb::Error naming
// the algorithm when it is unknown or has no cost model.
double allreduce_link_cost(const std::string& algorithm, double bytes, int k, const LinkSpec& link,
                           BackendKind kind = BackendKind::Cpu, const std::string& tune_file = "");

}  // namespace dpb
