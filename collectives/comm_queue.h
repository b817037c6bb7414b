// comm_queue.h: one rank's ordered queue of communication jobs (collective calls and the copies
// around them), run on a communication thread of the rank's own (overlap on) or inline on the
// caller's (off). The sharded modes (src/train/shard.h) run their gathers and reduce-scatters
// through it: every rank submits the same jobs in the same order, so the collectives match.
//
//   CommQueue q(dev, rank, /*thread=*/true, [&](const std::string& why) { group.abort(rank, why); });
//   long t = q.submit([&](auto issued) { ag.issue(rank, issued); ag.run(rank, buf, n); });
//   ...compute...
//   q.wait(t);               // the job ran (its comm work is issued, stream-ordered) ...
//   dev.compute_wait_comm(); // ... and the compute stream waits for it before reading buf
//
// A submitted job's comm work is ordered after the compute work issued before submit() (a compute
// mark, taken on the submitting thread; inline: comm_wait_compute()), and is handed the time of
// submit(): when the host issued it (an emulated link's clock, collectives/link.h "Two clocks").
// Errors: a job that throws calls `abort` (so peers waiting in a collective wake up), later jobs
// are dropped, and wait() rethrows on the submitting thread. Destroyed with jobs in flight (a
// failed step), the queue aborts the same way before joining its thread.
// Timeline (set_timeline): each job is a comm-stream span of the rank's timeline (what it is:
// submit's CommJobInfo), tagged with the step the submitting thread was in; its start is the
// rank's arrival at that collective (the breakdown's waiting for peers, src/train/breakdown.h).
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "src/core/device.h"
#include "src/core/timeline.h"

namespace dpb {

class CommQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Job = std::function<void(Clock::time_point issued)>;

  CommQueue(Device& dev, int rank, bool thread, std::function<void(const std::string&)> abort);
  ~CommQueue();
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // Queues job; returns its ticket (1, 2, ... in submission order). Inline: runs it first.
  long submit(Job job, CommJobInfo info = {});
  // Records every job from here on in tl (nullptr: none). Only while no job is in flight.
  void set_timeline(RankTimeline* tl) { tl_ = tl; }
  // Returns when every job up to `ticket` has run; rethrows the first job's failure.
  void wait(long ticket);
  void wait_all() { wait(submitted_); }
  long submitted() const { return submitted_; }
  bool idle();  // every submitted job has run
  bool threaded() const { return thread_.joinable(); }

  // Time the comm stream spent in jobs (device timer: CUDA events; CPU: host clock) and jobs
  // run, since the last reset. Only while no job is in flight.
  double comm_seconds();
  long calls() const { return calls_; }
  void reset_times();

 private:
  struct Queued;
  void run(Queued& q);  // timed; on failure aborts and rethrows
  void loop();

  Device& dev_;
  const int rank_;
  std::function<void(const std::string&)> abort_;
  std::unique_ptr<StreamTimer> timer_;
  RankTimeline* tl_ = nullptr;
  long submitted_ = 0;
  long calls_ = 0;

  std::mutex mu_;  // the rest, shared with the thread
  std::condition_variable work_cv_, done_cv_;
  struct Queued {
    Job job;
    int mark;  // the compute stream's mark at submit()
    Clock::time_point issued;
    CommJobInfo info;
    int epoch, step;  // the timeline's at submit()
  };
  std::deque<Queued> queue_;
  long done_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace dpb
