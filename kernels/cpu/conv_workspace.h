// conv_workspace.h: the CPU backend's convolution workspaces as functions of the shape alone, so
// that a backend which runs no math (the meta backend, kernels/meta) charges exactly what the CPU
// backend charges. Three parts:
//   - the oneDNN primitive descriptors of a conv shape (format `any`, user-mode scratchpad), made
//     here for both backends (a descriptor is cheap and touches no data);
//   - the workspace requests each conv call makes, in its order: a blocked copy of every operand
//     whose layout oneDNN changed (into that operand's slot) and the scratchpad;
//   - the device-wide slots those requests grow (HostBuf), charged to the ledger as workspace.
// CpuDevice (conv.cpp) reserves a call's requests through reserve_workspace before it runs the
// primitive; the meta device reserves the same requests in slots with no memory behind them.
#pragma once
#include <cstddef>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "src/core/device.h"

namespace dpb::cpu {

// Device-wide workspaces shared by every conv shape (ops on a device are serial, so a blocked
// copy is only live during one call): one per tensor role, plus the oneDNN scratchpad.
enum ConvSlot { kSlotX, kSlotY, kSlotW, kSlotB, kSlotScratch, kNumSlots };

// A growable, 4 KiB-aligned host buffer (a conv workspace slot), charged to the device's ledger as
// workspace. Contents are not preserved when it grows. Unbacked (the meta backend): the same
// charges, no memory (get returns nullptr).
class HostBuf {
 public:
  HostBuf() = default;
  explicit HostBuf(bool backed) : backed_(backed) {}
  HostBuf(const HostBuf&) = delete;
  HostBuf& operator=(const HostBuf&) = delete;
  ~HostBuf();
  // At least `bytes`, grown as needed (throws OutOfMemory past the ledger's capacity).
  void* get(size_t bytes, const char* what, MemoryLedger& ledger);
  size_t bytes() const { return bytes_; }

 private:
  bool backed_ = true;
  void* p_ = nullptr;
  size_t bytes_ = 0;
  MemoryLedger* ledger_ = nullptr;  // the ledger bytes_ are charged to
};

using ConvFwdPd = dnnl::convolution_forward::primitive_desc;
using ConvBwdDataPd = dnnl::convolution_backward_data::primitive_desc;
using ConvBwdWeightsPd = dnnl::convolution_backward_weights::primitive_desc;

// The caller's plain layouts: x nchw, w oihw, b x, y nchw.
struct ConvUserDescs {
  dnnl::memory::desc x, w, b, y;
};
ConvUserDescs conv_user_descs(const ConvShape& s);
// The primitive descriptors of shape s; forward is the hint of both backward directions.
ConvFwdPd conv_forward_pd(const ConvShape& s, const dnnl::engine& eng);
ConvBwdWeightsPd conv_backward_weights_pd(const ConvShape& s, const dnnl::engine& eng,
                                          const ConvFwdPd& hint);
ConvBwdDataPd conv_backward_data_pd(const ConvShape& s, const dnnl::engine& eng,
                                    const ConvFwdPd& hint);

// One request: `bytes` of slot `slot` (0: nothing, the operand keeps the user's layout).
struct WorkspaceRequest {
  ConvSlot slot;
  size_t bytes;
  const char* what;
};
// The bytes of the copy an operand needs when the primitive wants layout `prim` for the user's
// `user`: 0 when they are the same (the primitive reads the caller's buffer).
size_t blocked_bytes(const dnnl::memory::desc& user, const dnnl::memory::desc& prim);

// What each conv call of one shape asks for, in the order it asks.
struct ConvWorkspace {
  std::vector<WorkspaceRequest> forward;           // conv2d_forward
  std::vector<WorkspaceRequest> backward_data;     // conv2d_backward with dx (first)
  std::vector<WorkspaceRequest> backward_weights;  // conv2d_backward (then, or alone)
};
ConvWorkspace conv_workspace(const ConvUserDescs& u, const ConvFwdPd& fwd,
                             const ConvBwdWeightsPd& bwd_weights);
// Backward-data is made on first use (the first layer never needs it): its requests then.
std::vector<WorkspaceRequest> conv_backward_data_workspace(const ConvUserDescs& u,
                                                           const ConvBwdDataPd& bwd_data);

// Grows slots to hold every request, in order, charging ledger (throws OutOfMemory past its
// capacity, as the first request that does not fit).
void reserve_workspace(HostBuf (&slots)[kNumSlots], const std::vector<WorkspaceRequest>& reqs,
                       MemoryLedger& ledger);

}  // namespace dpb::cpu
