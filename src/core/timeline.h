// timeline.h: what one rank did and when, on one clock: spans on its three tracks (the rank's host
// thread, its compute stream, its comm stream), each tagged with the epoch and step it belongs to.
// The per-rank time breakdown (src/train/breakdown.h) and the Chrome trace (src/core/trace_json.h)
// are both read from it. Stream spans are recorded as StreamStamps (device.h: CUDA events, the
// async device's stream worker, the CPU's host clock) and get their times in take(), so recording
// never waits for a device.
//
//   RankTimeline tl(dev, rank, /*host_spans=*/trace_on);
//   tl.set_step(epoch, step);
//   { PhaseRange p(&tl, "forward"); ...issue forward... }  // NVTX range + compute (+ host) span
//   // comm thread: CommQueue stamps each job on the comm stream (begin_comm / end_comm)
//   std::vector<Span> spans = tl.take();                   // every stream idle: resolved times
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "src/core/device.h"
#include "src/core/nvtx.h"

namespace dpb {

enum class Track : uint8_t { Host = 0, Compute = 1, Comm = 2 };
const char* to_string(Track t);  // "host", "compute", "comm"

// One span. Trivially copyable (gathered from every rank as bytes): names are truncated copies.
struct Span {
  char name[28] = {};      // the NVTX range's name ("forward") or the comm job's ("all-reduce")
  char algorithm[20] = {}; // collectives: the algorithm that ran ("ring"); "" otherwise
  int32_t rank = 0;
  Track track = Track::Host;
  int32_t epoch = 0;       // 1-based; 0: before the first epoch
  int32_t step = -1;       // 0-based step of the epoch; -1: outside the steps (evaluation, setup)
  int32_t bucket = -1;     // collectives: the unit (bucket / parameter) index; -1 otherwise
  uint64_t bytes = 0;      // collectives: bytes of this rank's buffer
  double t0 = 0, t1 = 0;   // seconds on the run's clock (the host's steady clock + its offset)
  void set_name(std::string_view s);
  void set_algorithm(std::string_view s);
};

// What a comm job is, for its span: the collective, the algorithm, bytes and unit.
struct CommJobInfo {
  std::string name = "comm";
  std::string algorithm;
  uint64_t bytes = 0;
  int bucket = -1;
};

// One rank's recorder. The compute spans (and host spans) are recorded by the rank's thread; the
// comm spans by whichever thread runs its comm jobs (CommQueue); take() by the rank's thread when
// no comm job is in flight.
class RankTimeline {
 public:
  // host_spans: also keep host-track spans (tracing); the breakdown needs the streams only.
  RankTimeline(Device& dev, int rank, bool host_spans);
  int rank() const { return rank_; }
  bool host_spans() const { return host_spans_; }
  // The step the spans recorded next belong to (epoch 1-based; step -1: outside the steps).
  void set_step(int epoch, int step) { epoch_ = epoch, step_ = step; }
  int epoch() const { return epoch_; }
  int step() const { return step_; }
  // Seconds added to every time (processes on other nodes: their offset to rank 0's clock).
  void set_clock_offset(double s) { offset_ = s; }

  // A compute-stream phase (and, with host_spans, the same on the host track).
  struct Open {
    size_t s0 = 0;
    double h0 = 0;
    const char* name = nullptr;
    int epoch = 0, step = -1;
  };
  Open begin_phase(const char* name);
  void end_phase(const Open& o);
  // A comm job on the comm stream, tagged with the step it was submitted in.
  struct OpenComm {
    size_t s0 = 0;
    int epoch = 0, step = -1;
  };
  OpenComm begin_comm(int epoch, int step);
  void end_comm(const OpenComm& o, const CommJobInfo& info);

  // Every span recorded since the last take(), with times; compute and host spans first, then
  // comm spans, each in recording order.
  std::vector<Span> take();

 private:
  struct Pending {
    Span span;
    size_t s0, s1;  // stamp indices (host spans: unused, times already set)
  };
  const int rank_;
  const bool host_spans_;
  int epoch_ = 0, step_ = -1;
  double offset_ = 0;
  std::unique_ptr<StreamStamps> compute_, comm_;
  std::vector<Pending> compute_spans_, host_spans_list_;
  std::mutex comm_mu_;  // comm spans: written by the comm thread, taken by the rank's thread
  std::vector<Pending> comm_spans_;
};

// An NVTX range that is also a compute-stream phase of the rank's timeline (when one is given).
class PhaseRange {
 public:
  PhaseRange(RankTimeline* tl, const char* name) : nvtx_(name), tl_(tl) {
    if (tl_) open_ = tl_->begin_phase(name);
  }
  ~PhaseRange() {
    if (tl_) tl_->end_phase(open_);
  }
  PhaseRange(const PhaseRange&) = delete;
  PhaseRange& operator=(const PhaseRange&) = delete;

 private:
  NvtxRange nvtx_;
  RankTimeline* tl_;
  RankTimeline::Open open_;
};

}  // namespace dpb
