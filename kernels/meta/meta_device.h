// meta_device.h: the planning backend (`--backend meta`), as PyTorch's meta device and JAX's
// compiled memory_analysis: a Device that allocates and counts exactly what the CPU backend would
// for the same calls and runs nothing, so the memory of any model, batch and device count is known
// in seconds on any machine.
//
// Counting: alloc charges the CPU backend's bytes (64-byte multiples, 64 for an empty buffer) to the
// same categories in its MemoryLedger, with the same capacity (--device-mem) and OutOfMemory; the
// CPU backend's own workspaces (oneDNN conv copies and scratchpads) are charged through the same
// functions the CPU backend calls (kernels/cpu/conv_workspace.h: primitive descriptors, made on this
// device's math-thread count as the CPU device makes them, since oneDNN sizes scratchpads by it).
// Running nothing: every compute and comm op returns at once; upload, fill, copy and data loading
// do nothing; download writes zeros. Buffers are addresses in a reserved PROT_NONE range, never
// backed by memory: a 100 GB plan costs no memory, and a host read or write of a buffer faults
// instead of going unnoticed. Made by make_meta_device; tested by tests/test_meta.cpp.
#pragma once
#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "kernels/cpu/conv_workspace.h"
#include "src/core/device.h"

namespace dpb {

namespace meta {

// Addresses without memory: a PROT_NONE mapping (MAP_NORESERVE: no commit charge, no pages),
// handed out first fit in 64-byte multiples and given back on release. Thread-safe.
class AddressRange {
 public:
  AddressRange();  // reserves the largest of 1 TiB, 512 GiB, ... 1 GiB the system grants
  ~AddressRange();
  AddressRange(const AddressRange&) = delete;
  AddressRange& operator=(const AddressRange&) = delete;
  void* take(size_t bytes);  // nullptr when no free run of `bytes` is left
  void give(void* p);
  size_t bytes() const { return bytes_; }

 private:
  char* base_ = nullptr;
  size_t bytes_ = 0;
  std::mutex mu_;
  std::map<size_t, size_t> free_;            // offset -> bytes, coalesced
  std::unordered_map<size_t, size_t> used_;  // offset -> bytes
};

}  // namespace meta

class MetaDevice final : public Device {
 public:
  // threads: the CPU math threads the CPU backend's device would have (its scratchpad sizes).
  MetaDevice(int rank, int threads);
  ~MetaDevice() override;
  MetaDevice(const MetaDevice&) = delete;
  MetaDevice& operator=(const MetaDevice&) = delete;

  BackendKind kind() const override { return BackendKind::Meta; }
  int rank() const override { return rank_; }
  std::string name() const override;

  float* alloc(size_t n, MemCategory cat, const char* what) override;
  void release(float* p) override;
  MemoryLedger& memory() override { return ledger_; }
  void upload(float*, const float*, size_t) override {}
  void download(float* host, const float* src, size_t n) override;  // zeros
  void fill(float*, float, size_t) override {}
  void copy(float*, const float*, size_t) override {}
  void load_images(float*, const uint8_t*, size_t) override {}
  void load_labels(float*, const uint8_t*, size_t) override {}
  void synchronize() override {}

  // The CPU backend's conv workspaces are charged; nothing runs.
  void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* b,
                      float* y) override;
  void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy,
                       float* dx, float* dw, float* db) override;
  void avgpool_forward(const PoolShape&, const float*, float*) override {}
  void avgpool_backward(const PoolShape&, const float*, float*) override {}
  void gap_forward(int, int, int, const float*, float*) override {}
  void gap_backward(int, int, int, const float*, float*) override {}
  void relu_forward(const float*, float*, size_t) override {}
  void relu_backward(const float*, const float*, float*, size_t) override {}
  void dense_forward(int, int, int, const float*, const float*, const float*, float*) override {}
  void dense_backward(int, int, int, const float*, const float*, const float*, float*, float*,
                      float*) override {}
  void softmax_xent(int, int, const float*, const float*, float, float*, float*) override {}
  void mse_loss(int, int, const float*, const float*, float, float*, float*) override {}
  void batchnorm_forward_train(const BnShape&, const float*, const float*, const float*, float*,
                               float*, float*, float*, float*) override {}
  void batchnorm_forward_infer(const BnShape&, const float*, const float*, const float*,
                               const float*, const float*, float*) override {}
  void batchnorm_backward(const BnShape&, const float*, const float*, const float*, const float*,
                          const float*, float*, float*, float*) override {}
  void axpy(float, const float*, float*, size_t) override {}
  void sgd_step(float*, const float*, float, size_t) override {}
  void adam_step(float*, const float*, float*, float*, size_t, const AdamStep&) override {}

  void comm_copy(float*, const float*, size_t) override {}
  void comm_reduce(float*, const float*, size_t) override {}
  void comm_download(float* host, const float* src, size_t n) override { download(host, src, n); }
  void comm_upload(float*, const float*, size_t) override {}

 private:
  // Shape s's workspace requests, every direction's (descriptors made once per shape).
  const cpu::ConvWorkspace& conv_plan(const ConvShape& s);

  int rank_;
  int threads_;
  // Declared before what charges it (the slots give their bytes back to it).
  MemoryLedger ledger_;
  meta::AddressRange addresses_;
  dnnl::engine eng_;
  std::map<std::array<int, 9>, cpu::ConvWorkspace> conv_plans_;
  cpu::HostBuf ws_[cpu::kNumSlots] = {cpu::HostBuf(false), cpu::HostBuf(false),
                                      cpu::HostBuf(false), cpu::HostBuf(false),
                                      cpu::HostBuf(false)};  // unbacked conv workspace slots
};

// Rank `rank`'s meta device, planning for a CPU device with `threads` math threads.
std::unique_ptr<Device> make_meta_device(int rank, int threads);

}  // namespace dpb
