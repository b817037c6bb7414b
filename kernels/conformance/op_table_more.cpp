// op_table_more.cpp: op cases for softmax cross-entropy, mean squared error, Adam, batch norm, the
// communication ops on one device, and allocation (continues op_table.cpp's table).
#include <random>

#include "kernels/conformance/op_case_io.h"

namespace dpb {
namespace {

using namespace op_case_io;

// Logits (n, classes), labels, and with kNullDx the evaluation call only (dlogits = nullptr).
// huge: one logit of 1000, which must not overflow.
OpCase softmax_xent(int n, int classes, unsigned flags, bool huge = false) {
  OpCase c;
  c.op = "softmax_xent";
  c.shape = dims("logits", {n, classes}) + (huge ? " one logit 1000" : "");
  c.flags = flags;
  const size_t nz = size_t(n) * classes;
  c.inputs = [=] {
    HostVec z = rand_vec(nz, 51, -4.f, 4.f), lab(n);
    if (huge) z[0] = 1000.f;
    std::mt19937 g(52);
    for (auto& l : lab) l = float(g() % classes);
    return Inputs{z, lab};
  };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    float *z = io.up(in[0]), *lab = io.up(in[1]), *stats = io.up({1.5f, 2.f});  // accumulates
    Outputs o;
    if (!(flags & kNullDx)) {
      float* dz = io.filled(nz, kGarbage);
      d.softmax_xent(n, classes, z, lab, 1.f / n, dz, stats);
      io.out(o, "dlogits", dz, nz, {1e-7f, 1e-5f});
      io.out(o, "stats (loss, correct)", stats, 2, {1e-5f, 1e-5f});
    }
    d.softmax_xent(n, classes, z, lab, 1.f, nullptr, stats);
    io.out(o, "stats after eval call", stats, 2, {1e-4f, 1e-5f});
    return o;
  };
  return c;
}

// Mean squared error against one-hot labels: as softmax_xent's case (kNullDx: eval call only).
OpCase mse_loss(int n, int classes, unsigned flags) {
  OpCase c;
  c.op = "mse_loss";
  c.shape = dims("pred", {n, classes});
  c.flags = flags;
  const size_t nz = size_t(n) * classes;
  c.inputs = [=] {
    HostVec p = rand_vec(nz, 55, -0.5f, 1.5f), lab(n);
    std::mt19937 g(56);
    for (auto& l : lab) l = float(g() % classes);
    return Inputs{p, lab};
  };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    float *p = io.up(in[0]), *lab = io.up(in[1]), *stats = io.up({1.5f, 2.f});  // accumulates
    Outputs o;
    if (!(flags & kNullDx)) {
      float* dp = io.filled(nz, kGarbage);
      d.mse_loss(n, classes, p, lab, 1.f / n, dp, stats);
      io.out(o, "dpred", dp, nz, {1e-7f, 1e-6f});
      io.out(o, "stats (loss, correct)", stats, 2, {1e-5f, 1e-5f});
    }
    d.mse_loss(n, classes, p, lab, 1.f, nullptr, stats);
    io.out(o, "stats after eval call", stats, 2, {1e-4f, 1e-5f});
    return o;
  };
  return c;
}

// Three Adam steps (t = 1, 2, 3) on n floats with fresh gradients each, moments from zero; some
// gradients are 0 (then the first step leaves the weight as it is). At float offset `off`.
OpCase adam(size_t n, size_t off, unsigned flags = 0) {
  OpCase c;
  c.op = "adam_step";
  c.shape = "n " + std::to_string(n) + (off ? " offset " + std::to_string(off) : "");
  c.flags = flags;
  constexpr int kSteps = 3;
  c.inputs = [=] {
    Inputs in{rand_vec(n, 91)};
    for (int t = 0; t < kSteps; ++t) {
      HostVec g = rand_vec(n, 92 + t, -2.f, 2.f);
      for (size_t i = 0; i < n; i += 7) g[i] = 0.f;
      in.push_back(g);
    }
    return in;
  };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    float *w = io.up(in[0], off), *m = io.filled(n, 0.f, off), *v = io.filled(n, 0.f, off);
    AdamStep s;
    s.lr = 0.01;
    for (int t = 1; t <= kSteps; ++t) {
      s.t = t;
      d.adam_step(w, io.up(in[size_t(t)], off), m, v, n, s);
    }
    Outputs o;
    io.out(o, "w", w, n, {1e-7f, 1e-6f});
    io.out(o, "m", m, n, {1e-7f, 1e-6f});
    io.out(o, "v", v, n, {1e-9f, 1e-6f});
    return o;
  };
  return c;
}

// Training-mode forward (running statistics updated) then backward.
OpCase batchnorm_train(int n, int ch, int hw, unsigned flags = 0) {
  BnShape s;
  s.n = n, s.c = ch, s.hw = hw;
  OpCase c;
  c.op = "batchnorm_train";
  c.shape = dims("x", {n, ch, hw});
  c.flags = flags;
  c.inputs = [=] {
    return Inputs{rand_vec(s.size(), 61, 0.5f, 3.f), rand_vec(s.size(), 62),
                  rand_vec(ch, 63, 0.5f, 1.5f), rand_vec(ch, 64), rand_vec(ch, 65),
                  rand_vec(ch, 66, 0.5f, 2.f)};
  };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    float *x = io.up(in[0]), *dy = io.up(in[1]), *gamma = io.up(in[2]), *beta = io.up(in[3]);
    float *rmean = io.up(in[4]), *rvar = io.up(in[5]), *y = io.filled(s.size(), kGarbage);
    float *smean = io.filled(ch, kGarbage), *sinv = io.filled(ch, kGarbage);
    float *dx = io.filled(s.size(), kGarbage), *dg = io.filled(ch, kGarbage);
    float* db = io.filled(ch, kGarbage);
    d.batchnorm_forward_train(s, x, gamma, beta, y, rmean, rvar, smean, sinv);
    d.batchnorm_backward(s, x, dy, gamma, smean, sinv, dx, dg, db);
    Outputs o;
    io.out(o, "y", y, s.size(), {1e-4f, 1e-4f});
    io.out(o, "running_mean", rmean, ch, {1e-5f, 1e-4f});
    io.out(o, "running_var (unbiased)", rvar, ch, {1e-5f, 1e-4f});
    io.out(o, "save_mean", smean, ch, {1e-5f, 1e-4f});
    io.out(o, "save_invstd", sinv, ch, {1e-5f, 1e-4f});
    io.out(o, "dx", dx, s.size(), {1e-4f, 1e-3f});
    io.out(o, "dgamma", dg, ch, {1e-4f, 1e-3f, 1e-5f});
    io.out(o, "dbeta", db, ch, {1e-4f, 1e-4f, 1e-5f});
    return o;
  };
  return c;
}

OpCase batchnorm_infer(int n, int ch, int hw, unsigned flags = 0) {
  BnShape s;
  s.n = n, s.c = ch, s.hw = hw;
  OpCase c;
  c.op = "batchnorm_infer";
  c.shape = dims("x", {n, ch, hw});
  c.flags = flags;
  c.inputs = [=] {
    return Inputs{rand_vec(s.size(), 67, -1.f, 3.f), rand_vec(ch, 68, 0.5f, 1.5f),
                  rand_vec(ch, 69), rand_vec(ch, 70), rand_vec(ch, 71, 0.5f, 2.f)};
  };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    float *x = io.up(in[0]), *gamma = io.up(in[1]), *beta = io.up(in[2]);
    float *rmean = io.up(in[3]), *rvar = io.up(in[4]), *y = io.filled(s.size(), kGarbage);
    d.batchnorm_forward_infer(s, x, gamma, beta, rmean, rvar, y);
    Outputs o;
    io.out(o, "y", y, s.size(), {1e-5f, 1e-4f});
    io.out(o, "running_mean (unchanged)", rmean, ch, {});
    return o;
  };
  return c;
}

// comm_reduce (dst += src) and comm_copy on one device's comm stream, at float offsets od, os.
OpCase comm(size_t n, size_t od, size_t os, unsigned flags = 0) {
  OpCase c;
  c.op = "comm_reduce_copy";
  c.shape = "n " + std::to_string(n) + " offsets " + std::to_string(od) + "," + std::to_string(os);
  c.flags = flags;
  c.inputs = [=] { return Inputs{rand_vec(n + 4, 81), rand_vec(n + 4, 82)}; };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    float *dst = io.up(in[0]), *src = io.up(in[1]), *cp = io.filled(n + 4, kGarbage);
    d.comm_wait_compute();  // uploads and fills are ordered on the compute stream
    d.comm_reduce(dst + od, src + os, n);
    d.comm_copy(cp, src, n + 4);
    d.comm_synchronize();
    Outputs o;
    io.out(o, "comm_reduce dst", dst, n + 4, {});
    io.out(o, "comm_copy dst", cp, n + 4, {});
    return o;
  };
  return c;
}

// Fresh allocations are zero-filled, including after a larger one was released.
OpCase alloc(unsigned flags = 0) {
  OpCase c;
  c.op = "alloc";
  c.shape = "n 1, 17, 100000, 17";
  c.flags = flags;
  c.inputs = [] { return Inputs{}; };
  c.run = [](Device& d, const Inputs&) {
    Outputs o;
    for (size_t n : {size_t(1), size_t(17), size_t(100000), size_t(17)}) {
      Buffer b(d, n, MemCategory::Temporaries, "op case alloc");
      d.synchronize();
      HostVec v(n);
      d.download(v.data(), b.get(), n);
      o.push_back({"alloc n=" + std::to_string(n), std::move(v), {}});
      d.fill(b.get(), kGarbage, n);
      d.synchronize();
    }
    return o;
  };
  return c;
}

}  // namespace

void add_more_op_cases(std::vector<OpCase>& t) {
  t.push_back(softmax_xent(37, 10, kSelftest));
  t.push_back(softmax_xent(5, 100, 0));
  t.push_back(softmax_xent(256, 10, 0));
  t.push_back(softmax_xent(6, 5, 0, true));
  t.push_back(softmax_xent(37, 10, kNullDx));
  t.push_back(mse_loss(37, 10, kSelftest));
  t.push_back(mse_loss(5, 100, 0));
  t.push_back(mse_loss(256, 10, 0));
  t.push_back(mse_loss(37, 10, kNullDx));
  t.push_back(adam(1027, 0, kSelftest));
  t.push_back(adam(5, 3, kUnaligned));
  t.push_back(adam(size_t(1) << 20, 0));
  t.push_back(batchnorm_train(8, 6, 49, kSelftest));
  t.push_back(batchnorm_train(16, 10, 1));
  t.push_back(batchnorm_train(4, 64, 36));
  t.push_back(batchnorm_train(3, 64, 784));
  t.push_back(batchnorm_train(3, 512, 16));
  t.push_back(batchnorm_infer(3, 2, 4, kSelftest));
  t.push_back(batchnorm_infer(4, 64, 36));
  for (size_t n : {size_t(1), size_t(5), size_t(1027), size_t(1) << 20})
    for (auto [od, os] : {std::pair<size_t, size_t>{0, 0}, {1, 2}, {3, 0}})
      t.push_back(comm(n, od, os, n == 1027 && od == 0 ? unsigned(kSelftest) : 0u));
  t.push_back(alloc(kSelftest));
}

}  // namespace dpb
