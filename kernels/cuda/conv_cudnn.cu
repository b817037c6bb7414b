// conv_cudnn.cu: 2-D convolution forward, backward-data and backward-filter through cuDNN (NCHW,
// OIHW, float32), bias add and bias gradient with own kernels (elementwise.cu).
//
// Per shape the descriptors are made once; per direction the algorithm is chosen once, on first
// use, by cudnnFind*AlgorithmEx on the real buffers (like PyTorch's cudnn.benchmark = True) within
// a workspace of kFindWorkspace bytes, then reused. One workspace per device, grown as needed.
// The search runs once per (GPU, tf32, direction, shape) for the whole process, after this
// rank's own stream has drained: ranks sharing a GPU share the result. The cache, its per-GPU
// locks (never held during a search: a search can wait for an NCCL kernel that waits for a peer
// rank) and the reuse of another batch size's algorithm for the last, partial batch (no search
// inside a timed epoch; re-searched for the exact shape if cuDNN refuses to run it) are in
// conv_algo_cache.h. Other ranks' kernels may still run during a search on a shared GPU.
// Math: CUDNN_FMA_MATH when tf32 is off (CUDNN_DEFAULT_MATH would let cuDNN use TF32 tensor cores
// on Ampere and later); CUDNN_DEFAULT_MATH when tf32 is on, then the math type the found
// algorithm was timed with (never ALLOW_CONVERSION, which may compute in FP16).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <vector>

#include "kernels/cuda/conv_algo_cache.h"
#include "kernels/cuda/cuda_device.h"

namespace dpb {

namespace {

constexpr size_t kFindWorkspace = size_t(64) << 20;  // 64 MiB: room to try most algorithms
const char* const kDirName[3] = {"forward", "backward-data", "backward-filter"};

std::string shape_str(const ConvShape& s) {
  std::ostringstream os;
  os << "x(" << s.n << "," << s.c << "," << s.h << "," << s.w << ") w(" << s.k << "," << s.c << ","
     << s.r << "," << s.s << ") pad " << s.pad << " stride " << s.stride;
  return os.str();
}

bool is_tensor_op(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// The fastest usable result of a cudnnFind* call (results come sorted by time). Without tf32,
// tensor-op results are skipped so that float32 stays float32.
template <class Perf>
const Perf& pick(const std::vector<Perf>& perf, int got, bool tf32, int dir, const ConvShape& s,
                 int gpu) {
  for (int i = 0; i < got; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    if (!tf32 && is_tensor_op(p.mathType)) continue;
    if (p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;  // FP16 down-conversion
    if (p.memory > kFindWorkspace) continue;
    return p;
  }
  DPB_CHECK(false, "cuDNN found no usable convolution " << kDirName[dir] << " algorithm on cuda:"
                       << gpu << " for " << shape_str(s) << " (" << got << " tried, tf32 "
                       << (tf32 ? "on" : "off") << ")");
}

// The algorithms found so far, process-wide (shared by every CudaDevice on a GPU).
ConvAlgoCache& algo_cache() {
  static ConvAlgoCache c;
  return c;
}

cudnnMathType_t base_math(bool tf32) { return tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }

// Picks direction dir's algorithm for plan p (conv_algo_cache.h). find runs cudnnFind* and
// returns the usable best; ws_size asks the workspace size of an algorithm for this shape.
// exact_only: search for this very shape instead of reusing another batch size's algorithm.
void choose_algo(CudnnConvPlan& p, const ConvShape& s, int dir, int gpu, bool tf32,
                 bool exact_only, const std::function<ConvAlgo()>& find,
                 const std::function<cudnnStatus_t(int, size_t*)>& ws_size) {
  const ConvAlgoKey key{gpu, tf32, dir, {s.n, s.c, s.h, s.w, s.k, s.r, s.s, s.pad, s.stride}};
  auto use = [&](const ConvAlgo& a) {  // false: a does not support this shape
    if (tf32) CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv[dir], cudnnMathType_t(a.math)));
    size_t ws = 0;
    if (ws_size(a.algo, &ws) != CUDNN_STATUS_SUCCESS) return false;
    p.algo[dir] = a.algo;
    p.ws[dir] = ws;
    return true;
  };
  auto search = [&] {  // from the math type the plan was made with, whatever use() tried
    CUDNN_CHECK(cudnnSetConvolutionMathType(p.conv[dir], base_math(tf32)));
    return find();
  };
  p.exact[dir] = choose_conv_algo(algo_cache(), key, exact_only, search, use).exact;
}

// Runs direction dir: exec() issues the cuDNN call with p.algo[dir] and returns its status. An
// algorithm reused from another batch size that cuDNN refuses to run (FFT, Winograd: shapes
// their workspace query accepted) is replaced by a search for this shape, once (rechoose).
void run_conv(CudnnConvPlan& p, int dir, const ConvShape& s, const std::function<cudnnStatus_t()>& exec,
              const std::function<void()>& rechoose, const char* call) {
  cudnnStatus_t st = exec();
  if (st != CUDNN_STATUS_SUCCESS && !p.exact[dir]) {
    std::fprintf(stderr, "dpbench: cuDNN refused the %s algorithm %d reused from another batch "
                         "size for %s (%s); searching for this shape\n",
                 kDirName[dir], p.algo[dir], shape_str(s).c_str(), cudnnGetErrorString(st));
    rechoose();
    st = exec();
  }
  if (st != CUDNN_STATUS_SUCCESS)
    DPB_LIB_FAIL_("cuDNN", call << " (" << kDirName[dir] << " algorithm " << p.algo[dir] << ", "
                               << shape_str(s) << ")", int(st), cudnnGetErrorString(st));
}

// Descriptors for shape s; tf32 picks the math type the algorithm search starts from.
void fill_conv_plan(CudnnConvPlan& p, const ConvShape& s, bool tf32) {
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.c, s.h,
                                         s.w));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s.k, s.c, s.r,
                                         s.s));
  // DEFAULT lets cuDNN use TF32 tensor cores on sm_80 and later (as PyTorch does with
  // allow_tf32); ALLOW_CONVERSION would also let it convert float32 to FP16, whose range loses
  // the ~1e-5 gradients of a 1/batch-scaled loss.
  const cudnnMathType_t math = base_math(tf32);
  for (cudnnConvolutionDescriptor_t& c : p.conv) {
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&c));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(c, s.pad, s.pad, s.stride, s.stride, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(c, math));
  }
  int on = 0, ok = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv[0], p.x, p.w, &on, &ok, &oh, &ow));
  DPB_CHECK(on == s.n && ok == s.k && oh == s.oh() && ow == s.ow(),
            "cuDNN output shape (" << on << "," << ok << "," << oh << "," << ow
                                   << ") differs from dpbench's for " << shape_str(s));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s.n, s.k, oh,
                                         ow));
}

void destroy_plan(CudnnConvPlan& p) noexcept {
  if (p.x) cudnnDestroyTensorDescriptor(p.x);
  if (p.y) cudnnDestroyTensorDescriptor(p.y);
  if (p.w) cudnnDestroyFilterDescriptor(p.w);
  for (cudnnConvolutionDescriptor_t c : p.conv)
    if (c) cudnnDestroyConvolutionDescriptor(c);
  p = CudnnConvPlan{};
}

}  // namespace

CudnnConvPlan& CudaDevice::conv_plan(const ConvShape& s) {
  ConvKey key{s.n, s.c, s.h, s.w, s.k, s.r, s.s, s.pad, s.stride};
  auto it = conv_plans_.find(key);
  if (it != conv_plans_.end()) return it->second;
  DPB_CHECK(s.n > 0 && s.c > 0 && s.h > 0 && s.w > 0 && s.k > 0 && s.r > 0 && s.s > 0 &&
                s.pad >= 0 && s.stride > 0 && s.h + 2 * s.pad >= s.r && s.w + 2 * s.pad >= s.s,
            "invalid convolution shape " << shape_str(s));
  CudnnConvPlan p;
  try {
    fill_conv_plan(p, s, tf32_);
  } catch (...) {
    destroy_plan(p);
    throw;
  }
  return conv_plans_.emplace(key, p).first->second;
}

void CudaDevice::destroy_conv_plans() noexcept {
  for (auto& [key, p] : conv_plans_) destroy_plan(p);
  conv_plans_.clear();
}

void CudaDevice::conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* b,
                                float* y) {
  bind();
  CudnnConvPlan& p = conv_plan(s);
  auto choose = [&](bool exact_only) {
    auto find = [&] {
      int max_n = 0, got = 0;
      CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(cudnn_, &max_n));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(std::max(max_n, 1));
      void* ws = workspace(kFindWorkspace);
      wait_stream(compute_, "cuDNN algorithm search");
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(cudnn_, p.x, x, p.w, w, p.conv[0], p.y,
                                                         y, int(perf.size()), &got, perf.data(),
                                                         ws, kFindWorkspace));
      const auto& best = pick(perf, got, tf32_, 0, s, gpu_);
      return ConvAlgo{int(best.algo), int(best.mathType)};
    };
    choose_algo(p, s, 0, gpu_, tf32_, exact_only, find, [&](int algo, size_t* ws) {
      return cudnnGetConvolutionForwardWorkspaceSize(cudnn_, p.x, p.w, p.conv[0], p.y,
                                                     cudnnConvolutionFwdAlgo_t(algo), ws);
    });
  };
  if (p.algo[0] < 0) choose(false);
  const float one = 1.f, zero = 0.f;
  run_conv(p, 0, s, [&] {
    void* ws = workspace(p.ws[0]);
    return cudnnConvolutionForward(cudnn_, &one, p.x, x, p.w, w, p.conv[0],
                                   cudnnConvolutionFwdAlgo_t(p.algo[0]), ws, p.ws[0], &zero, p.y,
                                   y);
  }, [&] { choose(true); }, "cudnnConvolutionForward");
  if (b) cuda_kernels::add_bias(y, b, s.y_size(), s.oh() * s.ow(), s.k, compute_);
  op_done("conv2d_forward", compute_);
}

void CudaDevice::conv2d_backward(const ConvShape& s, const float* x, const float* w,
                                 const float* dy, float* dx, float* dw, float* db) {
  bind();
  CudnnConvPlan& p = conv_plan(s);
  const float one = 1.f, zero = 0.f;
  if (db) {
    const int inner = s.oh() * s.ow();
    const size_t scr = cuda_kernels::channel_sum_scratch(s.n, s.k, inner);
    float* scratch = scr ? static_cast<float*>(workspace(scr * sizeof(float))) : nullptr;
    cuda_kernels::channel_sum(dy, db, s.n, s.k, inner, scratch, compute_);
  }
  if (dw) {
    auto choose = [&](bool exact_only) {
      auto find = [&] {
        int max_n = 0, got = 0;
        CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(cudnn_, &max_n));
        std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(std::max(max_n, 1));
        void* ws = workspace(kFindWorkspace);
        wait_stream(compute_, "cuDNN algorithm search");
        CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            cudnn_, p.x, x, p.y, dy, p.conv[2], p.w, dw, int(perf.size()), &got, perf.data(), ws,
            kFindWorkspace));
        const auto& best = pick(perf, got, tf32_, 2, s, gpu_);
        return ConvAlgo{int(best.algo), int(best.mathType)};
      };
      choose_algo(p, s, 2, gpu_, tf32_, exact_only, find, [&](int algo, size_t* ws) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            cudnn_, p.x, p.y, p.conv[2], p.w, cudnnConvolutionBwdFilterAlgo_t(algo), ws);
      });
    };
    if (p.algo[2] < 0) choose(false);
    run_conv(p, 2, s, [&] {
      void* ws = workspace(p.ws[2]);
      return cudnnConvolutionBackwardFilter(cudnn_, &one, p.x, x, p.y, dy, p.conv[2],
                                            cudnnConvolutionBwdFilterAlgo_t(p.algo[2]), ws,
                                            p.ws[2], &zero, p.w, dw);
    }, [&] { choose(true); }, "cudnnConvolutionBackwardFilter");
  }
  if (dx) {
    auto choose = [&](bool exact_only) {
      auto find = [&] {
        int max_n = 0, got = 0;
        CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(cudnn_, &max_n));
        std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(std::max(max_n, 1));
        void* ws = workspace(kFindWorkspace);
        wait_stream(compute_, "cuDNN algorithm search");
        CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            cudnn_, p.w, w, p.y, dy, p.conv[1], p.x, dx, int(perf.size()), &got, perf.data(), ws,
            kFindWorkspace));
        const auto& best = pick(perf, got, tf32_, 1, s, gpu_);
        return ConvAlgo{int(best.algo), int(best.mathType)};
      };
      choose_algo(p, s, 1, gpu_, tf32_, exact_only, find, [&](int algo, size_t* ws) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            cudnn_, p.w, p.y, p.conv[1], p.x, cudnnConvolutionBwdDataAlgo_t(algo), ws);
      });
    };
    if (p.algo[1] < 0) choose(false);
    run_conv(p, 1, s, [&] {
      void* ws = workspace(p.ws[1]);
      return cudnnConvolutionBackwardData(cudnn_, &one, p.w, w, p.y, dy, p.conv[1],
                                          cudnnConvolutionBwdDataAlgo_t(p.algo[1]), ws, p.ws[1],
                                          &zero, p.x, dx);
    }, [&] { choose(true); }, "cudnnConvolutionBackwardData");
  }
  op_done("conv2d_backward", compute_);
}

}  // namespace dpb
