// op_table.cpp: the table of op cases (see op_cases.h): shapes from LeNet and ResNet-18, odd and
// tiny sizes, in-place, null dx, TF32 and unaligned parameter offsets. Every backward output starts
// as garbage, so an op that accumulates instead of overwriting, or skips an entry, shows.
// Adding an op: a function that makes its OpCase and its entries in op_cases() below.
#include <algorithm>
#include <cmath>
#include <random>
#include <set>

#include "src/core/check.h"
#include "kernels/conformance/op_case_io.h"

namespace dpb {
namespace {

using namespace op_case_io;

// GEMM-like outputs (conv, dense): sums of many products. TF32 keeps 10 mantissa bits, float32
// 23; cuDNN may pick Winograd or FFT algorithms, whose float32 error reaches ~1e-5 of max|ref|.
Tol gemm_tol(unsigned flags) { return {1e-5f, 1e-3f, (flags & kTf32) ? 1e-2f : 5e-5f}; }

// ---- conv2d: forward, then backward (twice: the second pass uses cached plans) ----

OpCase conv(ConvShape s, unsigned flags, uint32_t seed, const char* what = "") {
  OpCase c;
  c.op = "conv2d";
  c.shape = dims("x", {s.n, s.c, s.h, s.w}) + " " + dims("w", {s.k, s.c, s.r, s.s}) + " pad " +
            std::to_string(s.pad) + " stride " + std::to_string(s.stride) + what;
  c.flags = flags;
  c.inputs = [=] {
    return Inputs{rand_vec(s.x_size(), seed), rand_vec(s.w_size(), seed + 1, -.2f, .2f),
                  rand_vec(s.k, seed + 2), rand_vec(s.y_size(), seed + 3)};
  };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    const size_t off = (flags & kUnaligned) ? 3 : 0, goff = (flags & kUnaligned) ? 1 : 0;
    float *x = io.up(in[0]), *w = io.up(in[1], off), *b = io.up(in[2], goff), *dy = io.up(in[3]);
    float* y = io.filled(s.y_size(), kGarbage);
    float* dx = (flags & kNullDx) ? nullptr : io.filled(s.x_size(), kGarbage);
    float *dw = io.filled(s.w_size(), kGarbage, goff), *db = io.filled(s.k, kGarbage, off);
    for (int rep = 0; rep < 2; ++rep) {
      d.conv2d_forward(s, x, w, b, y);
      d.conv2d_backward(s, x, w, dy, dx, dw, db);
    }
    Outputs o;
    io.out(o, "y", y, s.y_size(), gemm_tol(flags));
    if (dx) io.out(o, "dx", dx, s.x_size(), gemm_tol(flags));
    io.out(o, "dw", dw, s.w_size(), gemm_tol(flags));
    io.out(o, "db", db, s.k, gemm_tol(flags));
    return o;
  };
  return c;
}

// ---- dense: y (n, out) = x (n, in) . w (in, out) + b, and its backward ----

OpCase dense(int n, int in, int out, unsigned flags, uint32_t seed, const char* what = "") {
  OpCase c;
  c.op = "dense";
  c.shape = dims("x", {n, in}) + " " + dims("w", {in, out}) + what;
  c.flags = flags;
  const size_t nx = size_t(n) * in, nw = size_t(in) * out, ny = size_t(n) * out;
  c.inputs = [=] {
    return Inputs{rand_vec(nx, seed), rand_vec(nw, seed + 1), rand_vec(out, seed + 2),
                  rand_vec(ny, seed + 3)};
  };
  c.run = [=](Device& d, const Inputs& v) {
    Io io(d);
    const size_t off = (flags & kUnaligned) ? 3 : 0, goff = (flags & kUnaligned) ? 1 : 0;
    float *x = io.up(v[0]), *w = io.up(v[1], off), *b = io.up(v[2], goff), *dy = io.up(v[3]);
    float* y = io.filled(ny, kGarbage);
    float* dx = (flags & kNullDx) ? nullptr : io.filled(nx, kGarbage);
    float *dw = io.filled(nw, kGarbage, goff), *db = io.filled(out, kGarbage, off);
    d.dense_forward(n, in, out, x, w, b, y);
    d.dense_backward(n, in, out, x, w, dy, dx, dw, db);
    Outputs o;
    io.out(o, "y", y, ny, gemm_tol(flags));
    if (dx) io.out(o, "dx", dx, nx, gemm_tol(flags));
    io.out(o, "dw", dw, nw, gemm_tol(flags));
    io.out(o, "db", db, out, gemm_tol(flags));
    return o;
  };
  return c;
}

// ---- pooling ----

OpCase avgpool(int h, int w, int win, int stride, unsigned flags = 0) {
  PoolShape s;
  s.n = 3, s.c = 4, s.h = h, s.w = w, s.win = win, s.stride = stride;
  OpCase c;
  c.op = "avgpool";
  c.shape = dims("x", {s.n, s.c, h, w}) + " win " + std::to_string(win) + " stride " +
            std::to_string(stride);
  c.flags = flags;
  c.inputs = [=] { return Inputs{rand_vec(s.x_size(), 31), rand_vec(s.y_size(), 32)}; };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    float *x = io.up(in[0]), *dy = io.up(in[1]);
    float *y = io.filled(s.y_size(), kGarbage), *dx = io.filled(s.x_size(), kGarbage);
    d.avgpool_forward(s, x, y);
    d.avgpool_backward(s, dy, dx);  // entries no window covers must come back as zero
    Outputs o;
    io.out(o, "y", y, s.y_size(), {1e-6f, 1e-5f});
    io.out(o, "dx", dx, s.x_size(), {1e-6f, 1e-5f});
    return o;
  };
  return c;
}

OpCase gap(int n, int ch, int hw, unsigned flags = 0) {
  OpCase c;
  c.op = "global_avgpool";
  c.shape = dims("x", {n, ch, hw});
  c.flags = flags;
  const size_t nx = size_t(n) * ch * hw, ny = size_t(n) * ch;
  c.inputs = [=] { return Inputs{rand_vec(nx, 34), rand_vec(ny, 35)}; };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    float *x = io.up(in[0]), *dy = io.up(in[1]);
    float *y = io.filled(ny, kGarbage), *dx = io.filled(nx, kGarbage);
    d.gap_forward(n, ch, hw, x, y);
    d.gap_backward(n, ch, hw, dy, dx);
    Outputs o;
    io.out(o, "y", y, ny, {1e-6f, 1e-5f});
    io.out(o, "dx", dx, nx, {1e-7f, 1e-6f});
    return o;
  };
  return c;
}

// ---- elementwise ----

OpCase relu(size_t n, unsigned flags) {
  OpCase c;
  c.op = "relu";
  c.shape = "n " + std::to_string(n);
  c.flags = flags;
  c.inputs = [=] { return Inputs{rand_vec(n, 41), rand_vec(n, 42)}; };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    float *x = io.up(in[0]), *dy = io.up(in[1]);
    Outputs o;
    if (flags & kInPlace) {
      d.relu_forward(x, x, n);
      d.relu_backward(x, dy, dy, n);
      io.out(o, "y", x, n, {});
      io.out(o, "dx", dy, n, {});
    } else {
      float *y = io.filled(n, kGarbage), *dx = io.filled(n, kGarbage);
      d.relu_forward(x, y, n);
      d.relu_backward(y, dy, dx, n);
      io.out(o, "y", y, n, {});
      io.out(o, "dx", dx, n, {});
    }
    return o;
  };
  return c;
}

// axpy, sgd_step, fill and copy in one case (each output named after the op that wrote it).
OpCase vector_ops(size_t n, unsigned flags = 0) {
  OpCase c;
  c.op = "vector_ops";
  c.shape = "n " + std::to_string(n);
  c.flags = flags;
  c.inputs = [=] { return Inputs{rand_vec(n, 43), rand_vec(n, 44)}; };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    float *x = io.up(in[0]), *y = io.up(in[1]), *f = io.filled(n, kGarbage);
    Outputs o;
    d.axpy(-0.375f, x, y, n);
    io.out(o, "axpy", y, n, {1e-7f, 1e-6f});  // the GPU may fuse a*x+y
    d.sgd_step(y, x, 0.1f, n);
    io.out(o, "sgd_step", y, n, {1e-7f, 1e-6f});
    d.fill(f, 2.5f, n);
    io.out(o, "fill", f, n, {});
    d.copy(f, x, n - 1);  // the last entry keeps the fill
    io.out(o, "copy", f, n, {});
    return o;
  };
  return c;
}

// uint8 pixels and labels to floats, growing then reusing the device's staging.
OpCase load_data(unsigned flags = 0) {
  OpCase c;
  c.op = "load_images_labels";
  c.shape = "n 2352, 50181, 100";
  c.flags = flags;
  const std::vector<size_t> sizes = {784 * 3, 784 * 64 + 5, 100};
  c.inputs = [=] {
    std::mt19937 g(71);
    Inputs in;
    for (size_t n : sizes) {
      HostVec px(n), lab(n);
      for (auto& v : px) v = float(g() % 256);
      for (auto& v : lab) v = float(g() % 10);
      in.push_back(px), in.push_back(lab);
    }
    return in;
  };
  c.run = [=](Device& d, const Inputs& in) {
    Io io(d);
    Outputs o;
    for (size_t k = 0; k < sizes.size(); ++k) {
      const size_t n = sizes[k];
      std::vector<uint8_t> px(in[2 * k].begin(), in[2 * k].end());
      std::vector<uint8_t> lab(in[2 * k + 1].begin(), in[2 * k + 1].end());
      float *img = io.filled(n, kGarbage), *l = io.filled(n, kGarbage);
      d.load_images(img, px.data(), n);
      d.load_labels(l, lab.data(), n);
      io.out(o, "images n=" + std::to_string(n), img, n, {});
      io.out(o, "labels n=" + std::to_string(n), l, n, {});
    }
    return o;
  };
  return c;
}

}  // namespace

// Defined in op_table_more.cpp: softmax cross-entropy, MSE, Adam, batch norm, communication and
// allocation.
void add_more_op_cases(std::vector<OpCase>& t);

const std::vector<OpCase>& op_cases() {
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> t = {
        conv({8, 20, 13, 13, 50, 5, 5, 0, 1}, kSelftest, 2, " (LeNet conv2)"),
        conv({8, 1, 28, 28, 20, 3, 3, 0, 1}, kNullDx, 1, " (LeNet conv1)"),
        conv({8, 1, 28, 28, 20, 3, 3, 0, 1}, 0, 1, " (LeNet conv1)"),
        conv({8, 1, 28, 28, 6, 5, 5, 2, 1}, 0, 3),
        conv({8, 6, 14, 14, 16, 5, 5, 0, 1}, 0, 4),
        conv({2, 64, 28, 28, 128, 3, 3, 1, 2}, 0, 5, " (ResNet-18 first stride-2 conv)"),
        conv({2, 64, 28, 28, 128, 1, 1, 0, 2}, 0, 6, " (ResNet-18 first 1x1 projection)"),
        conv({4, 1, 28, 28, 64, 3, 3, 1, 1}, kNullDx, 7, " (ResNet-18 stem)"),
        conv({2, 2, 6, 7, 3, 2, 3, 2, 2}, 0, 8),
        conv({3, 5, 9, 8, 6, 3, 2, 2, 1}, 0, 9),
        conv({2, 3, 7, 6, 4, 3, 3, 1, 1}, 0, 10),
        conv({2, 32, 12, 12, 48, 3, 3, 1, 2}, kUnaligned, 11),
        conv({2, 32, 12, 12, 48, 1, 1, 0, 2}, kUnaligned, 12),
        conv({4, 1, 96, 96, 64, 7, 7, 3, 2}, 0, 13, " (7x7 stem)"),
        conv({4, 8, 12, 12, 16, 3, 3, 1, 1}, kTf32, 14),
        conv({8, 20, 13, 13, 50, 5, 5, 0, 1}, kTf32, 15, " (LeNet conv2)"),
        dense(8, 800, 128, kSelftest, 21, " (LeNet fc1)"),
        dense(5, 3, 7, 0, 22),
        dense(256, 128, 10, 0, 23),
        dense(5, 7, 4, kNullDx, 24),
        dense(5, 7, 4, kUnaligned, 25),
        dense(64, 512, 10, kTf32, 26),
        avgpool(8, 8, 2, 2, kSelftest),
        avgpool(7, 9, 3, 2),
        avgpool(5, 5, 2, 2),
        avgpool(6, 6, 3, 1),
        avgpool(9, 7, 2, 2),
        gap(4, 5, 49, kSelftest),
        gap(3, 7, 1),
        gap(2, 3, 100),
        relu(100003, kSelftest),
        relu(100003, kInPlace),
        relu(1, 0),
        vector_ops(100003, kSelftest),
        vector_ops(1),
        load_data(kSelftest),
    };
    add_more_op_cases(t);
    std::set<std::string> ids;
    for (const OpCase& c : t) DPB_CHECK(ids.insert(c.id()).second, "duplicate op case " << c.id());
    return t;
  }();
  return table;
}

}  // namespace dpb
