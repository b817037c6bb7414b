// conv.cpp: CpuDevice conv2d forward / backward-data / backward-weights (with bias) via oneDNN.
//
// User tensors are plain NCHW / OIHW. The primitives are created with format `any`, so oneDNN
// picks its fastest (usually channel-blocked, nChw16c) layouts; plain <-> blocked reorders run
// per call (cheaper than plain-format or nhwc convolution; figures in docs/decisions.md).
// Primitives and reorders are created once per shape and cached in the device; the blocked
// copies and the (user-mode) scratchpad live in device-wide workspaces reused by every shape. The
// descriptors and each call's workspace requests come from conv_workspace.h, which the meta
// backend charges alike; a call reserves its requests before it runs.
#include <sstream>

#include "kernels/cpu/cpu_device.h"
#include "src/core/check.h"
#include "src/core/memory.h"

namespace dpb {
namespace {

cpu::ConvOperand make_operand(const dnnl::engine& eng, const dnnl::memory::desc& user_md,
                              const dnnl::memory::desc& prim_md, bool input, cpu::ConvSlot slot) {
  cpu::ConvOperand o{dnnl::memory(user_md, eng, DNNL_MEMORY_NONE), std::nullopt, std::nullopt, slot};
  if (prim_md != user_md) {
    o.prim.emplace(prim_md, eng, static_cast<void*>(DNNL_MEMORY_NONE));
    if (input)
      o.reorder.emplace(o.user, *o.prim);
    else
      o.reorder.emplace(*o.prim, o.user);
  }
  return o;
}

// A oneDNN error in a conv call: out of memory (a primitive, its JIT code or a buffer the host
// refused) is OutOfMemory (exit 3); anything else an Error naming the call and shape.
[[noreturn]] void conv_failed(int rank, const char* op, const ConvShape& s, const dnnl::error& e) {
  std::ostringstream os;
  os << "cpu:" << rank << ": " << op << " " << s << ": oneDNN error: " << e.what();
  if (e.status == dnnl_out_of_memory)
    throw OutOfMemory("out of memory: " + os.str() + address_limit_note(), 0, 0);
  throw Error(os.str());
}

// The layout the primitive uses for operand o.
dnnl::memory::desc prim_desc(const cpu::ConvOperand& o) {
  return o.prim ? o.prim->get_desc() : o.user.get_desc();
}

}  // namespace

dnnl::memory& CpuDevice::conv_input(cpu::ConvOperand& o, const float* p) {
  o.user.set_data_handle(const_cast<float*>(p));
  if (!o.prim) return o.user;
  o.prim->set_data_handle(ws_[o.slot].get(o.prim->get_desc().get_size(), "conv workspace", ledger_));
  o.reorder->execute(strm_, o.user, *o.prim);
  return *o.prim;
}

dnnl::memory& CpuDevice::conv_output(cpu::ConvOperand& o, float* p) {
  o.user.set_data_handle(p);
  if (!o.prim) return o.user;
  o.prim->set_data_handle(ws_[o.slot].get(o.prim->get_desc().get_size(), "conv workspace", ledger_));
  return *o.prim;
}

void CpuDevice::conv_finish(cpu::ConvOperand& o) {
  if (o.reorder) o.reorder->execute(strm_, *o.prim, o.user);
}

dnnl::memory& CpuDevice::conv_scratch(dnnl::memory& m) {
  m.set_data_handle(ws_[cpu::kSlotScratch].get(m.get_desc().get_size(), "conv scratchpad", ledger_));
  return m;
}

cpu::ConvPrims& CpuDevice::conv_prims(const ConvShape& s) {
  cpu::ConvKey key{s.n, s.c, s.h, s.w, s.k, s.r, s.s, s.pad, s.stride};
  auto it = conv_cache_.find(key);
  if (it != conv_cache_.end()) return *it->second;
  DPB_CHECK(s.n > 0 && s.c > 0 && s.k > 0 && s.r > 0 && s.s > 0 && s.stride > 0 && s.pad >= 0 &&
                s.oh() > 0 && s.ow() > 0,
            "cpu:" << rank_ << ": conv2d: invalid shape " << s);
  auto p = std::make_unique<cpu::ConvPrims>();
  const cpu::ConvUserDescs u = cpu::conv_user_descs(s);
  p->x_md = u.x, p->w_md = u.w, p->b_md = u.b, p->y_md = u.y;

  // Forward (also the hint for both backward directions).
  const cpu::ConvFwdPd fpd = cpu::conv_forward_pd(s, eng_);
  p->fwd_pd = fpd;
  p->fwd.emplace(fpd);
  p->fwd_x = make_operand(eng_, p->x_md, fpd.src_desc(), true, cpu::kSlotX);
  p->fwd_w = make_operand(eng_, p->w_md, fpd.weights_desc(), true, cpu::kSlotW);
  p->fwd_b = make_operand(eng_, p->b_md, fpd.bias_desc(), true, cpu::kSlotB);
  p->fwd_y = make_operand(eng_, p->y_md, fpd.dst_desc(), false, cpu::kSlotY);
  p->fwd_scratch = dnnl::memory(fpd.scratchpad_desc(), eng_, DNNL_MEMORY_NONE);

  const cpu::ConvBwdWeightsPd wpd = cpu::conv_backward_weights_pd(s, eng_, fpd);
  p->bwd_weights.emplace(wpd);
  p->bw_x = make_operand(eng_, p->x_md, wpd.src_desc(), true, cpu::kSlotX);
  p->bw_dy = make_operand(eng_, p->y_md, wpd.diff_dst_desc(), true, cpu::kSlotY);
  p->bw_dw = make_operand(eng_, p->w_md, wpd.diff_weights_desc(), false, cpu::kSlotW);
  p->bw_db = make_operand(eng_, p->b_md, wpd.diff_bias_desc(), false, cpu::kSlotB);
  p->bw_scratch = dnnl::memory(wpd.scratchpad_desc(), eng_, DNNL_MEMORY_NONE);
  p->ws = cpu::conv_workspace(u, fpd, wpd);
  // Backward-data is created on first use: the first layer never needs it.
  return *conv_cache_.emplace(key, std::move(p)).first->second;
}

void CpuDevice::conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* b,
                               float* y) {
  enter();
  DPB_CHECK(x && w && b && y, "cpu:" << rank_ << ": conv2d_forward " << s << ": null buffer");
  try {
    cpu::ConvPrims& p = conv_prims(s);
    cpu::reserve_workspace(ws_, p.ws.forward, ledger_);  // what the meta backend charges too
    p.fwd->execute(strm_, {{DNNL_ARG_SRC, conv_input(p.fwd_x, x)},
                           {DNNL_ARG_WEIGHTS, conv_input(p.fwd_w, w)},
                           {DNNL_ARG_BIAS, conv_input(p.fwd_b, b)},
                           {DNNL_ARG_DST, conv_output(p.fwd_y, y)},
                           {DNNL_ARG_SCRATCHPAD, conv_scratch(p.fwd_scratch)}});
    conv_finish(p.fwd_y);
    strm_.wait();
  } catch (const dnnl::error& e) {
    conv_failed(rank_, "conv2d_forward", s, e);
  }
}

void CpuDevice::conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                                float* dx, float* dw, float* db) {
  enter();
  DPB_CHECK(x && w && dy && dw && db,
            "cpu:" << rank_ << ": conv2d_backward " << s << ": null buffer");
  try {
    cpu::ConvPrims& p = conv_prims(s);
    const dnnl::memory* dy_done = nullptr;  // dy already reordered into the Y slot by backward-data
    if (dx) {
      if (!p.bwd_data) {
        const cpu::ConvBwdDataPd pd = cpu::conv_backward_data_pd(s, eng_, *p.fwd_pd);
        p.bwd_data.emplace(pd);
        p.bd_w = make_operand(eng_, p.w_md, pd.weights_desc(), true, cpu::kSlotW);
        p.bd_dy = make_operand(eng_, p.y_md, pd.diff_dst_desc(), true, cpu::kSlotY);
        p.bd_dx = make_operand(eng_, p.x_md, pd.diff_src_desc(), false, cpu::kSlotX);
        p.bd_scratch = dnnl::memory(pd.scratchpad_desc(), eng_, DNNL_MEMORY_NONE);
        p.ws.backward_data = cpu::conv_backward_data_workspace({p.x_md, p.w_md, p.b_md, p.y_md}, pd);
      }
      cpu::reserve_workspace(ws_, p.ws.backward_data, ledger_);
      dnnl::memory& dy_m = conv_input(p.bd_dy, dy);
      p.bwd_data->execute(strm_, {{DNNL_ARG_DIFF_DST, dy_m},
                                  {DNNL_ARG_WEIGHTS, conv_input(p.bd_w, w)},
                                  {DNNL_ARG_DIFF_SRC, conv_output(p.bd_dx, dx)},
                                  {DNNL_ARG_SCRATCHPAD, conv_scratch(p.bd_scratch)}});
      conv_finish(p.bd_dx);  // frees the X and W slots for backward-weights
      if (prim_desc(p.bd_dy) == prim_desc(p.bw_dy)) dy_done = &dy_m;
    }
    cpu::reserve_workspace(ws_, p.ws.backward_weights, ledger_);
    const dnnl::memory& dy_w = dy_done ? *dy_done : conv_input(p.bw_dy, dy);
    p.bwd_weights->execute(strm_, {{DNNL_ARG_SRC, conv_input(p.bw_x, x)},
                                   {DNNL_ARG_DIFF_DST, dy_w},
                                   {DNNL_ARG_DIFF_WEIGHTS, conv_output(p.bw_dw, dw)},
                                   {DNNL_ARG_DIFF_BIAS, conv_output(p.bw_db, db)},
                                   {DNNL_ARG_SCRATCHPAD, conv_scratch(p.bw_scratch)}});
    conv_finish(p.bw_dw);
    conv_finish(p.bw_db);
    strm_.wait();
  } catch (const dnnl::error& e) {
    conv_failed(rank_, "conv2d_backward", s, e);
  }
}

}  // namespace dpb
