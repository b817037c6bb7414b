// nvtx_recorder.cpp: a tiny NVTX injection library for tests. Loaded by any NVTX3-instrumented
// binary when NVTX_INJECTION64_PATH points at it, it records every domain range push and pop per
// thread and, at exit, writes one line per push to $DPB_NVTX_LOG:
//   <thread index>\t<domain>\t<depth>\t<parent range or "-">\t<range name>
// and a final line "unbalanced <n>" counting threads whose pushes and pops did not match.
// This is how the suite proves its ranges are emitted and nested without Nsight Systems.
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Recorder {
  std::mutex mu;
  std::map<std::thread::id, int> thread_index;
  std::map<std::thread::id, std::vector<std::string>> stacks;
  std::map<const void*, std::string> domains;
  std::vector<std::string> lines;
  ~Recorder() {
    const char* path = std::getenv("DPB_NVTX_LOG");
    if (!path) return;
    FILE* f = std::fopen(path, "w");
    if (!f) return;
    int unbalanced = 0;
    for (auto& [tid, st] : stacks) unbalanced += !st.empty();
    for (auto& l : lines) std::fprintf(f, "%s\n", l.c_str());
    std::fprintf(f, "unbalanced %d\n", unbalanced);
    std::fclose(f);
  }
};
Recorder& rec() {
  static Recorder r;
  return r;
}

nvtxDomainHandle_t domain_create(const char* name) {
  std::lock_guard<std::mutex> lock(rec().mu);
  auto* handle = new char(0);  // a unique address per domain, never freed (lives to exit)
  rec().domains[handle] = name ? name : "?";
  return reinterpret_cast<nvtxDomainHandle_t>(handle);
}

int range_push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  std::lock_guard<std::mutex> lock(rec().mu);
  auto tid = std::this_thread::get_id();
  auto [it, fresh] = rec().thread_index.emplace(tid, int(rec().thread_index.size()));
  auto& st = rec().stacks[tid];
  std::string name = (a && a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii)
                         ? a->message.ascii : "?";
  auto dom = rec().domains.count(d) ? rec().domains[d] : std::string("?");
  rec().lines.push_back(std::to_string(it->second) + "\t" + dom + "\t" + std::to_string(st.size()) +
                        "\t" + (st.empty() ? std::string("-") : st.back()) + "\t" + name);
  st.push_back(name);
  return int(st.size()) - 1;
}

int range_pop(nvtxDomainHandle_t) {
  std::lock_guard<std::mutex> lock(rec().mu);
  auto& st = rec().stacks[std::this_thread::get_id()];
  if (st.empty()) return -1;
  st.pop_back();
  return int(st.size());
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  auto* cb = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (!cb) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) || !table) return 0;
  if (size > NVTX_CBID_CORE2_DomainCreateA)
    *table[NVTX_CBID_CORE2_DomainCreateA] = reinterpret_cast<NvtxFunctionPointer>(&domain_create);
  if (size > NVTX_CBID_CORE2_DomainRangePushEx)
    *table[NVTX_CBID_CORE2_DomainRangePushEx] = reinterpret_cast<NvtxFunctionPointer>(&range_push);
  if (size > NVTX_CBID_CORE2_DomainRangePop)
    *table[NVTX_CBID_CORE2_DomainRangePop] = reinterpret_cast<NvtxFunctionPointer>(&range_pop);
  rec();  // construct now so it is destroyed after everything that may push at exit
  return 1;
}
