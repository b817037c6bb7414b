// nvtx.h: NVTX ranges in the "dpbench" domain, on both backends, so that Nsight Systems shows every
// phase on every rank's thread. Compiles to nothing when the NVTX3 headers are absent.
//   { dpb::NvtxRange r("forward"); ... }   // push on construction, pop on destruction
#pragma once
#include <string>
#ifdef DPB_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace dpb {

#ifdef DPB_HAVE_NVTX
inline nvtxDomainHandle_t nvtx_domain() {
  static nvtxDomainHandle_t d = nvtxDomainCreateA("dpbench");
  return d;
}
class NvtxRange {
 public:
  explicit NvtxRange(const char* msg) { push(msg); }
  explicit NvtxRange(const std::string& msg) { push(msg.c_str()); }
  ~NvtxRange() { nvtxDomainRangePop(nvtx_domain()); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

 private:
  static void push(const char* msg) {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = msg;
    nvtxDomainRangePushEx(nvtx_domain(), &a);
  }
};
#else
class NvtxRange {
 public:
  explicit NvtxRange(const char*) {}
  explicit NvtxRange(const std::string&) {}
};
#endif

}  // namespace dpb
