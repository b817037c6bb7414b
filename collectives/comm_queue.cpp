// comm_queue.cpp: the rank's ordered communication jobs (see comm_queue.h).
#include "collectives/comm_queue.h"

#include "src/core/check.h"

namespace dpb {

CommQueue::CommQueue(Device& dev, int rank, bool thread,
                     std::function<void(const std::string&)> abort)
    : dev_(dev), rank_(rank), abort_(std::move(abort)), timer_(dev.make_timer(StreamKind::Comm)) {
  if (thread) thread_ = std::thread([this] { loop(); });
}

CommQueue::~CommQueue() {
  if (!thread_.joinable()) return;
  bool in_flight;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    in_flight = done_ < submitted_;
  }
  // Jobs in flight at destruction: this rank's step failed. Abort, so that neither our thread nor
  // the peers wait forever for collectives this rank will never join.
  if (in_flight)
    abort_("communication of rank " + std::to_string(rank_) +
           " was abandoned with jobs in flight");
  work_cv_.notify_all();
  thread_.join();
}

void CommQueue::run(Queued& q) {
  try {
    RankTimeline::OpenComm span;
    if (tl_) span = tl_->begin_comm(q.epoch, q.step);
    timer_->begin();
    q.job(q.issued);
    timer_->end();
    if (tl_) tl_->end_comm(span, q.info);
  } catch (const std::exception& e) {
    abort_(e.what());
    throw;
  } catch (...) {
    abort_("unknown exception in a communication job");
    throw;
  }
}

long CommQueue::submit(Job job, CommJobInfo info) {
  const auto issued = Clock::now();
  const long ticket = ++submitted_;
  Queued q{std::move(job), -1, issued, std::move(info), tl_ ? tl_->epoch() : 0,
           tl_ ? tl_->step() : -1};
  if (!thread_.joinable()) {  // inline: ordered after all compute issued so far
    if (error_) std::rethrow_exception(error_);
    ++calls_;  // a failed job counts, as on the thread
    try {
      dev_.comm_wait_compute();
      run(q);
    } catch (...) {
      error_ = std::current_exception();
      throw;
    }
    done_ = ticket;
    return ticket;
  }
  // The mark is taken here, on the submitting thread: the job waits for exactly the compute
  // issued before it, not for what the caller issues after.
  q.mark = dev_.compute_mark();
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(std::move(q));
  }
  work_cv_.notify_one();
  return ticket;
}

void CommQueue::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    if (!error_) {  // after a failure later jobs are dropped (the group is aborted)
      lk.unlock();
      std::exception_ptr err;
      try {
        dev_.comm_wait_mark(q.mark);
        run(q);
      } catch (...) {
        err = std::current_exception();
      }
      lk.lock();
      ++calls_;
      if (err && !error_) error_ = err;
    }
    ++done_;
    done_cv_.notify_all();
  }
}

void CommQueue::wait(long ticket) {
  DPB_CHECK(ticket <= submitted_, "rank " << rank_ << ": waiting for communication job " << ticket
                                          << " of " << submitted_ << " submitted");
  std::exception_ptr err;
  if (thread_.joinable()) {
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [&] { return done_ >= ticket || error_; });
    err = error_;
  } else {
    err = error_;
  }
  if (err) std::rethrow_exception(err);
}

bool CommQueue::idle() {
  std::lock_guard<std::mutex> lk(mu_);
  return done_ >= submitted_;
}

double CommQueue::comm_seconds() { return timer_->seconds(); }

void CommQueue::reset_times() {
  timer_->reset();
  calls_ = 0;
}

}  // namespace dpb
