// conv_workspace.cpp: conv primitive descriptors, each call's workspace requests and the
// workspace slots (see conv_workspace.h).
#include "kernels/cpu/conv_workspace.h"

#include <cstdlib>

namespace dpb::cpu {
namespace {

using tag = dnnl::memory::format_tag;
constexpr dnnl::memory::data_type f32 = dnnl::memory::data_type::f32;

// Format `any` for x, w and y: oneDNN picks its fastest layouts (usually channel-blocked).
struct AnyDescs {
  dnnl::memory::desc x, w, y;
  dnnl::memory::dims strides, pad;
};
AnyDescs any_descs(const ConvShape& s) {
  return {dnnl::memory::desc({s.n, s.c, s.h, s.w}, f32, tag::any),
          dnnl::memory::desc({s.k, s.c, s.r, s.s}, f32, tag::any),
          dnnl::memory::desc({s.n, s.k, s.oh(), s.ow()}, f32, tag::any),
          {s.stride, s.stride},
          {s.pad, s.pad}};
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // the scratchpad is our workspace
  return attr;
}

}  // namespace

HostBuf::~HostBuf() {
  std::free(p_);
  if (ledger_) ledger_->unreserve(bytes_, MemCategory::Workspace);
}

void* HostBuf::get(size_t bytes, const char* what, MemoryLedger& ledger) {
  if (bytes > bytes_) {
    const size_t want = (bytes + 4095) / 4096 * 4096;
    std::free(p_);
    p_ = nullptr;
    ledger.unreserve(bytes_, MemCategory::Workspace);
    bytes_ = 0;
    ledger.reserve(want, MemCategory::Workspace, what);  // throws past the capacity
    ledger_ = &ledger;
    if (backed_) {
      p_ = std::aligned_alloc(4096, want);
      if (!p_)
        ledger.fail(want, MemCategory::Workspace, what,
                    "the host heap refused it" + address_limit_note());
    }
    bytes_ = want;
  }
  return p_;
}

ConvUserDescs conv_user_descs(const ConvShape& s) {
  return {dnnl::memory::desc({s.n, s.c, s.h, s.w}, f32, tag::nchw),
          dnnl::memory::desc({s.k, s.c, s.r, s.s}, f32, tag::oihw),
          dnnl::memory::desc({s.k}, f32, tag::x),
          dnnl::memory::desc({s.n, s.k, s.oh(), s.ow()}, f32, tag::nchw)};
}

ConvFwdPd conv_forward_pd(const ConvShape& s, const dnnl::engine& eng) {
  const AnyDescs a = any_descs(s);
  return ConvFwdPd({dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, a.x,
                    a.w, conv_user_descs(s).b, a.y, a.strides, a.pad, a.pad},
                   user_scratchpad(), eng);
}

ConvBwdWeightsPd conv_backward_weights_pd(const ConvShape& s, const dnnl::engine& eng,
                                          const ConvFwdPd& hint) {
  const AnyDescs a = any_descs(s);
  return ConvBwdWeightsPd({dnnl::algorithm::convolution_direct, a.x, a.w, conv_user_descs(s).b,
                           a.y, a.strides, a.pad, a.pad},
                          user_scratchpad(), eng, hint);
}

ConvBwdDataPd conv_backward_data_pd(const ConvShape& s, const dnnl::engine& eng,
                                    const ConvFwdPd& hint) {
  const AnyDescs a = any_descs(s);
  return ConvBwdDataPd(
      {dnnl::algorithm::convolution_direct, a.x, a.w, a.y, a.strides, a.pad, a.pad},
      user_scratchpad(), eng, hint);
}

size_t blocked_bytes(const dnnl::memory::desc& user, const dnnl::memory::desc& prim) {
  return prim == user ? 0 : prim.get_size();
}

ConvWorkspace conv_workspace(const ConvUserDescs& u, const ConvFwdPd& fwd,
                             const ConvBwdWeightsPd& bw) {
  ConvWorkspace ws;
  ws.forward = {{kSlotX, blocked_bytes(u.x, fwd.src_desc()), "conv workspace"},
                {kSlotW, blocked_bytes(u.w, fwd.weights_desc()), "conv workspace"},
                {kSlotB, blocked_bytes(u.b, fwd.bias_desc()), "conv workspace"},
                {kSlotY, blocked_bytes(u.y, fwd.dst_desc()), "conv workspace"},
                {kSlotScratch, fwd.scratchpad_desc().get_size(), "conv scratchpad"}};
  ws.backward_weights = {{kSlotY, blocked_bytes(u.y, bw.diff_dst_desc()), "conv workspace"},
                         {kSlotX, blocked_bytes(u.x, bw.src_desc()), "conv workspace"},
                         {kSlotW, blocked_bytes(u.w, bw.diff_weights_desc()), "conv workspace"},
                         {kSlotB, blocked_bytes(u.b, bw.diff_bias_desc()), "conv workspace"},
                         {kSlotScratch, bw.scratchpad_desc().get_size(), "conv scratchpad"}};
  return ws;
}

std::vector<WorkspaceRequest> conv_backward_data_workspace(const ConvUserDescs& u,
                                                           const ConvBwdDataPd& bd) {
  return {{kSlotY, blocked_bytes(u.y, bd.diff_dst_desc()), "conv workspace"},
          {kSlotW, blocked_bytes(u.w, bd.weights_desc()), "conv workspace"},
          {kSlotX, blocked_bytes(u.x, bd.diff_src_desc()), "conv workspace"},
          {kSlotScratch, bd.scratchpad_desc().get_size(), "conv scratchpad"}};
}

void reserve_workspace(HostBuf (&slots)[kNumSlots], const std::vector<WorkspaceRequest>& reqs,
                       MemoryLedger& ledger) {
  for (const WorkspaceRequest& r : reqs) slots[r.slot].get(r.bytes, r.what, ledger);
}

}  // namespace dpb::cpu
