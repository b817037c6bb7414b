// async_stream.cpp: the in-order queue + worker thread behind each stream of the async test
// device (see async_device.h), and the options read from the environment.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "kernels/async/async_device.h"
#include "src/core/check.h"

namespace dpb {
namespace {

// Reads an environment variable as a number in [lo, hi]; `fallback` when unset.
double env_number(const char* var, double fallback, double lo, double hi) {
  const char* e = std::getenv(var);
  if (!e || !*e) return fallback;
  char* end = nullptr;
  const double v = std::strtod(e, &end);
  DPB_CHECK(end != e && *end == '\0' && std::isfinite(v) && v >= lo && v <= hi,
            "environment variable " << var << "='" << e << "' is not a number in [" << lo << ", "
                                    << hi << "]");
  return v;
}

uint64_t process_seed() {
  static const uint64_t seed = [] {
    if (const char* e = std::getenv("DPB_ASYNC_SEED"); e && *e) {
      char* end = nullptr;
      const unsigned long long v = std::strtoull(e, &end, 10);
      DPB_CHECK(end != e && *end == '\0',
                "environment variable DPB_ASYNC_SEED='" << e << "' is not an unsigned integer");
      return uint64_t(v);
    }
    std::random_device rd;
    return (uint64_t(rd()) << 32 | rd()) % 1000000000;  // short enough to retype
  }();
  return seed;
}

bool overlaps(const async::Span& a, const async::Span& b) {
  const auto a0 = reinterpret_cast<uintptr_t>(a.p), b0 = reinterpret_cast<uintptr_t>(b.p);
  return a0 < b0 + b.n * sizeof(float) && b0 < a0 + a.n * sizeof(float);
}

}  // namespace

AsyncOptions async_options_from_env() {
  AsyncOptions o;
  o.seed = process_seed();
  o.max_delay_us = int(env_number("DPB_ASYNC_DELAY_US", o.max_delay_us, 0, 1e6));
  o.delay_prob = env_number("DPB_ASYNC_DELAY_PROB", o.delay_prob, 0, 1);
  o.poison = env_number("DPB_ASYNC_POISON", 1, 0, 1) != 0;
  return o;
}

namespace async {

Stream::Stream(std::string name, uint64_t seed, const AsyncOptions& opt,
               std::shared_ptr<std::exception_ptr> error, std::shared_ptr<std::mutex> error_mu)
    : name_(std::move(name)), opt_(opt), rng_(seed), error_(std::move(error)),
      error_mu_(std::move(error_mu)), worker_([this] { loop(); }) {}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void Stream::push(Op op) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    q_.push_back(std::move(op));
    ++issued_;
  }
  cv_.notify_all();
}

void Stream::enqueue(std::function<void()> fn, std::vector<Span> outs, std::vector<Span> ins) {
  Op op;
  op.fn = std::move(fn);
  if (opt_.poison)
    for (const Span& o : outs) {
      bool aliased = false;
      for (const Span& i : ins) aliased = aliased || (i.p && i.n && overlaps(o, i));
      if (o.p && o.n && !aliased) op.poison.push_back(o);
    }
  push(std::move(op));
}

void Stream::enqueue_stamp(std::function<void()> fn) {
  Op op;
  op.fn = std::move(fn);
  op.delay = false;
  push(std::move(op));
}

void Stream::enqueue_wait(std::shared_ptr<Stream> other, uint64_t pos) {
  if (other.get() == this) return;  // own work is in order already
  Op op;
  op.wait_on = std::move(other);
  op.wait_pos = pos;
  push(std::move(op));
}

uint64_t Stream::issued() {
  std::lock_guard<std::mutex> lk(mu_);
  return issued_;
}

void Stream::wait_done(uint64_t pos) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return done_ >= pos; });
}

void Stream::delay() {
  if (opt_.max_delay_us <= 0 || opt_.delay_prob <= 0) return;
  if (std::uniform_real_distribution<double>(0, 1)(rng_) >= opt_.delay_prob) return;
  const int us = std::uniform_int_distribution<int>(0, opt_.max_delay_us)(rng_);
  std::this_thread::sleep_for(std::chrono::microseconds(us));
}

void Stream::loop() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stopped and drained
      op = std::move(q_.front());
      q_.pop_front();
    }
    if (op.wait_on) {
      Stream& o = *op.wait_on;
      std::unique_lock<std::mutex> lk(o.mu_);
      o.cv_.wait(lk, [&] { return o.done_ >= op.wait_pos; });
    } else {
      bool failed;
      {
        std::lock_guard<std::mutex> lk(*error_mu_);
        failed = bool(*error_);
      }
      if (!failed) {  // after an error, later work is skipped (its positions still complete)
        for (const Span& s : op.poison)
          std::fill_n(const_cast<float*>(s.p), s.n, std::numeric_limits<float>::quiet_NaN());
        if (op.delay) delay();
        try {
          op.fn();
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> lk(*error_mu_);
          if (!*error_)
            *error_ = std::make_exception_ptr(Error(name_ + ": asynchronous op failed: " + e.what()));
        }
      }
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++done_;
    }
    cv_.notify_all();
  }
}

}  // namespace async
}  // namespace dpb
