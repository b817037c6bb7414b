// conv.cpp: CpuDevice conv2d forward / backward-data / backward-weights (with bias) via oneDNN.
//
// User tensors are plain NCHW / OIHW. The primitives are created with format `any`, so oneDNN
// picks its fastest (usually channel-blocked, e.g. nChw16c) layouts; the plain <-> blocked
// reorders run per call (memory-bound, a small fraction of the conv time; the plain-format gemm
// implementation measured 3-4x slower). Primitives, reorders and blocked buffers are created once
// per shape and cached in the device; the scratchpad is a per-device buffer in user mode, reused
// by all shapes.
#include <omp.h>

#include <cstdlib>
#include <cstring>

#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"

namespace dpb {
namespace {

using dnnl::memory;
using tag = memory::format_tag;
constexpr memory::data_type f32 = memory::data_type::f32;

cpu::ConvOperand make_operand(const dnnl::engine& eng, const memory::desc& user_md,
                              const memory::desc& prim_md, bool input) {
  cpu::ConvOperand o{memory(user_md, eng, DNNL_MEMORY_NONE), std::nullopt, std::nullopt};
  if (prim_md != user_md) {
    o.prim.emplace(prim_md, eng);  // owned by oneDNN, allocated once per shape
    if (input)
      o.reorder.emplace(o.user, *o.prim);
    else
      o.reorder.emplace(*o.prim, o.user);
  }
  return o;
}

// Points an input operand at p and returns the memory the primitive reads (reordered if needed).
memory& input(cpu::ConvOperand& o, const float* p, dnnl::stream& strm) {
  o.user.set_data_handle(const_cast<float*>(p));
  if (!o.reorder) return o.user;
  o.reorder->execute(strm, o.user, *o.prim);
  return *o.prim;
}

// Points an output operand at p and returns the memory the primitive writes.
memory& output(cpu::ConvOperand& o, float* p) {
  o.user.set_data_handle(p);
  return o.prim ? *o.prim : o.user;
}

// The layout the primitive uses for operand o.
memory::desc prim_desc(const cpu::ConvOperand& o) {
  return o.prim ? o.prim->get_desc() : o.user.get_desc();
}

// After the primitive ran: copies a blocked output back to the user's plain buffer.
void finish(cpu::ConvOperand& o, dnnl::stream& strm) {
  if (o.reorder) o.reorder->execute(strm, *o.prim, o.user);
}

}  // namespace

cpu::ConvPrims& CpuDevice::conv_prims(const ConvShape& s) {
  cpu::ConvKey key{s.n, s.c, s.h, s.w, s.k, s.r, s.s, s.pad, s.stride};
  auto it = conv_cache_.find(key);
  if (it != conv_cache_.end()) return *it->second;
  DPB_CHECK(s.n > 0 && s.c > 0 && s.k > 0 && s.r > 0 && s.s > 0 && s.stride > 0 && s.pad >= 0 &&
                s.oh() > 0 && s.ow() > 0,
            "conv2d: invalid shape " << s);
  auto p = std::make_unique<cpu::ConvPrims>();
  p->x_md = memory::desc({s.n, s.c, s.h, s.w}, f32, tag::nchw);
  p->w_md = memory::desc({s.k, s.c, s.r, s.s}, f32, tag::oihw);
  p->b_md = memory::desc({s.k}, f32, tag::x);
  p->y_md = memory::desc({s.n, s.k, s.oh(), s.ow()}, f32, tag::nchw);
  memory::desc xa({s.n, s.c, s.h, s.w}, f32, tag::any), wa({s.k, s.c, s.r, s.s}, f32, tag::any),
      ya({s.n, s.k, s.oh(), s.ow()}, f32, tag::any);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                    dnnl::algorithm::convolution_direct, xa, wa, p->b_md, ya,
                                    {s.stride, s.stride}, {s.pad, s.pad}, {s.pad, s.pad});
  p->fwd_pd.emplace(d, attr, eng_);
  return *conv_cache_.emplace(key, std::move(p)).first->second;
}

dnnl::memory CpuDevice::scratch_for(const dnnl::memory::desc& md) {
  size_t need = md.get_size();
  if (need > scratch_bytes_) {
    size_t bytes = (need + 4095) / 4096 * 4096;
    void* q = std::aligned_alloc(4096, bytes);
    DPB_CHECK(q != nullptr, "cpu:" << rank_ << ": cannot allocate conv scratchpad (" << bytes
                                   << " bytes)");
    std::free(scratch_);
    scratch_ = static_cast<float*>(q);
    scratch_bytes_ = bytes;
  }
  return dnnl::memory(md, eng_, scratch_);
}

void CpuDevice::conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* b,
                               float* y) {
  enter();
  try {
    cpu::ConvPrims& p = conv_prims(s);
    if (!p.fwd) {
      const auto& pd = *p.fwd_pd;
      p.fwd.emplace(pd);
      p.fwd_x = make_operand(eng_, p.x_md, pd.src_desc(), true);
      p.fwd_w = make_operand(eng_, p.w_md, pd.weights_desc(), true);
      p.fwd_b = make_operand(eng_, p.b_md, pd.bias_desc(), true);
      p.fwd_y = make_operand(eng_, p.y_md, pd.dst_desc(), false);
      p.fwd_scratch = pd.scratchpad_desc();
    }
    p.fwd->execute(strm_, {{DNNL_ARG_SRC, input(p.fwd_x, x, strm_)},
                           {DNNL_ARG_WEIGHTS, input(p.fwd_w, w, strm_)},
                           {DNNL_ARG_BIAS, input(p.fwd_b, b, strm_)},
                           {DNNL_ARG_DST, output(p.fwd_y, y)},
                           {DNNL_ARG_SCRATCHPAD, scratch_for(p.fwd_scratch)}});
    finish(p.fwd_y, strm_);
    strm_.wait();
  } catch (const dnnl::error& e) {
    DPB_CHECK(false, "cpu:" << rank_ << ": conv2d_forward " << s << ": oneDNN error: " << e.what());
  }
}

void CpuDevice::conv2d_backward(const ConvShape& s, const float* x, const float* w,
                                const float* dy, float* dx, float* dw, float* db) {
  enter();
  try {
    cpu::ConvPrims& p = conv_prims(s);
    memory::desc xa({s.n, s.c, s.h, s.w}, f32, tag::any), wa({s.k, s.c, s.r, s.s}, f32, tag::any),
        ya({s.n, s.k, s.oh(), s.ow()}, f32, tag::any);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const dnnl::memory::dims strides{s.stride, s.stride}, pad{s.pad, s.pad};
    // The blocked dy is shared by both directions when they chose the same layout.
    memory* dy_blocked = nullptr;

    if (dx) {
      if (!p.bwd_data) {
        dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, xa, wa, ya,
                                                strides, pad, pad);
        dnnl::convolution_backward_data::primitive_desc pd(d, attr, eng_, *p.fwd_pd);
        p.bwd_data.emplace(pd);
        p.bd_w = make_operand(eng_, p.w_md, pd.weights_desc(), true);
        p.bd_dy = make_operand(eng_, p.y_md, pd.diff_dst_desc(), true);
        p.bd_dx = make_operand(eng_, p.x_md, pd.diff_src_desc(), false);
        p.bd_scratch = pd.scratchpad_desc();
      }
      dy_blocked = &input(p.bd_dy, dy, strm_);
      p.bwd_data->execute(strm_, {{DNNL_ARG_DIFF_DST, *dy_blocked},
                                  {DNNL_ARG_WEIGHTS, input(p.bd_w, w, strm_)},
                                  {DNNL_ARG_DIFF_SRC, output(p.bd_dx, dx)},
                                  {DNNL_ARG_SCRATCHPAD, scratch_for(p.bd_scratch)}});
      finish(p.bd_dx, strm_);
    }

    if (!p.bwd_weights) {
      dnnl::convolution_backward_weights::desc d(dnnl::algorithm::convolution_direct, xa, wa,
                                                 p.b_md, ya, strides, pad, pad);
      dnnl::convolution_backward_weights::primitive_desc pd(d, attr, eng_, *p.fwd_pd);
      p.bwd_weights.emplace(pd);
      p.bw_x = make_operand(eng_, p.x_md, pd.src_desc(), true);
      p.bw_dy = make_operand(eng_, p.y_md, pd.diff_dst_desc(), true);
      p.bw_dw = make_operand(eng_, p.w_md, pd.diff_weights_desc(), false);
      p.bw_db = make_operand(eng_, p.b_md, pd.diff_bias_desc(), false);
      p.bw_scratch = pd.scratchpad_desc();
    }
    memory& dy_w = dy_blocked && prim_desc(p.bd_dy) == prim_desc(p.bw_dy)
                       ? *dy_blocked
                       : input(p.bw_dy, dy, strm_);
    p.bwd_weights->execute(strm_, {{DNNL_ARG_SRC, input(p.bw_x, x, strm_)},
                                   {DNNL_ARG_DIFF_DST, dy_w},
                                   {DNNL_ARG_DIFF_WEIGHTS, output(p.bw_dw, dw)},
                                   {DNNL_ARG_DIFF_BIAS, output(p.bw_db, db)},
                                   {DNNL_ARG_SCRATCHPAD, scratch_for(p.bw_scratch)}});
    finish(p.bw_dw, strm_);
    finish(p.bw_db, strm_);
    strm_.wait();
  } catch (const dnnl::error& e) {
    DPB_CHECK(false,
              "cpu:" << rank_ << ": conv2d_backward " << s << ": oneDNN error: " << e.what());
  }
}

}  // namespace dpb
