// cuda_check.h: checking macros for CUDA, cuBLAS, cuDNN and NCCL calls (CUDA backend only).
// Each throws dpb::Error with the call text, the library's error name and string, and file:line
// (NCCL_CHECK where <nccl.h> is included: NCCL is optional, see collectives/cuda/nccl_absent.cpp):
//   CUDA_CHECK(cudaMalloc(&p, bytes));
//   CUDA_CHECK_LAUNCH("relu_forward");          // after every kernel launch (cudaGetLastError)
//   CUBLAS_CHECK(cublasGemmEx(...));
//   CUDNN_CHECK(cudnnConvolutionForward(...));
//   NCCL_CHECK(ncclAllReduce(...), "rank " << rank);  // second argument: context, streamed
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <sstream>

#include "src/core/check.h"

#define DPB_LIB_FAIL_(lib, call, code, text)                                          \
  do {                                                                                \
    std::ostringstream dpb_os_;                                                       \
    dpb_os_ << lib << " call failed: " << call << " -> " << text << " (" << code << ")"; \
    ::dpb::fail_at(__FILE__, __LINE__, dpb_os_.str());                                \
  } while (0)

#define CUDA_CHECK(call)                                                                    \
  do {                                                                                      \
    cudaError_t dpb_e_ = (call);                                                            \
    if (dpb_e_ != cudaSuccess) {                                                            \
      (void)cudaGetLastError(); /* clear a non-sticky error so later calls are not blamed */ \
      DPB_LIB_FAIL_("CUDA", #call, cudaGetErrorName(dpb_e_), cudaGetErrorString(dpb_e_));   \
    }                                                                                       \
  } while (0)

// After a <<<...>>> launch: configuration errors show up here, execution errors at the next sync.
#define CUDA_CHECK_LAUNCH(kernel_name)                                                     \
  do {                                                                                     \
    cudaError_t dpb_e_ = cudaGetLastError();                                               \
    if (dpb_e_ != cudaSuccess)                                                             \
      DPB_LIB_FAIL_("CUDA", "launch of " << kernel_name, cudaGetErrorName(dpb_e_),         \
                    cudaGetErrorString(dpb_e_));                                           \
  } while (0)

#define CUBLAS_CHECK(call)                                                            \
  do {                                                                                \
    cublasStatus_t dpb_s_ = (call);                                                   \
    if (dpb_s_ != CUBLAS_STATUS_SUCCESS)                                              \
      DPB_LIB_FAIL_("cuBLAS", #call, cublasGetStatusName(dpb_s_), cublasGetStatusString(dpb_s_)); \
  } while (0)

#define CUDNN_CHECK(call)                                                        \
  do {                                                                           \
    cudnnStatus_t dpb_s_ = (call);                                               \
    if (dpb_s_ != CUDNN_STATUS_SUCCESS)                                          \
      DPB_LIB_FAIL_("cuDNN", #call, int(dpb_s_), cudnnGetErrorString(dpb_s_));   \
  } while (0)

#define NCCL_CHECK(call, context)                                                            \
  do {                                                                                       \
    ncclResult_t dpb_r_ = (call);                                                            \
    if (dpb_r_ != ncclSuccess)                                                               \
      DPB_LIB_FAIL_("NCCL", #call << " [" << context << "]", int(dpb_r_),                    \
                    ncclGetErrorString(dpb_r_));                                             \
  } while (0)
