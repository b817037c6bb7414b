// machine_info.cpp: the machine and build facts of `dpbench info` (see machine_info.h).
#include "kernels/machine_info.h"

#include <oneapi/dnnl/dnnl.h>
#include <sys/utsname.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "kernels/backends.h"
#include "kernels/cuda/cuda_backend.h"
#include "src/core/build_facts.h"
#include "src/core/cpu_info.h"
#include "src/core/device.h"

namespace dpb {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '"')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '"')) ++i;
  return s.substr(i);
}

// The value after the first ':' or '=' of the first line of `path` starting with `key`.
std::string field(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0) {
      const size_t sep = line.find_first_of(":=");
      return sep == std::string::npos ? trim(line) : trim(line.substr(sep + 1));
    }
  return "";
}

std::string run_cmd(const std::string& cmd) {  // stdout of cmd, "" on failure
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return "";
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  return pclose(p) == 0 ? trim(out) : "";
}

// DPB_GIT_COMMIT when the build passes it, else git in the source tree this binary was built from
// (DPB_SOURCE_DIR, from CMake; suffix "-dirty" with uncommitted changes to tracked files), else
// "unknown" (e.g. a binary copied to another machine).
std::string git_commit() {
#ifdef DPB_GIT_COMMIT
  if (std::string(DPB_GIT_COMMIT).size() > 0) return DPB_GIT_COMMIT;
#endif
#ifndef DPB_SOURCE_DIR
  return "unknown";
#else
  std::error_code ec;
  const std::filesystem::path src = DPB_SOURCE_DIR;
  if (!std::filesystem::exists(src / ".git", ec)) return "unknown";
  const std::string git = "git -C '" + src.string() + "' ";
  std::string head = run_cmd(git + "rev-parse HEAD 2>/dev/null");
  if (head.empty()) return "unknown";
  if (!run_cmd(git + "status --porcelain --untracked-files=no 2>/dev/null").empty()) head += "-dirty";
  return head;
#endif
}

std::string os_name() {
  std::string os = field("/etc/os-release", "PRETTY_NAME");
  utsname u{};
  if (uname(&u) == 0)
    os += (os.empty() ? "" : ", ") + std::string(u.sysname) + " " + u.release + " " + u.machine;
  return os.empty() ? "unknown" : os;
}

nlohmann::ordered_json memory_gib() {
  const std::string kb = field("/proc/meminfo", "MemTotal");  // "24563412 kB"
  try {
    return std::round(double(std::stoll(kb)) / (1 << 20) * 10) / 10;  // GiB, one decimal
  } catch (...) {
    return "unknown";
  }
}

}  // namespace

nlohmann::ordered_json machine_info() {
  nlohmann::ordered_json j;
  j["cpu"] = cpu_model_name();
  j["cores"] = std::thread::hardware_concurrency();
  j["memory_gib"] = memory_gib();
  j["os"] = os_name();
  j["compiler"] = DPB_COMPILER;
  j["build_type"] = DPB_BUILD_TYPE;
#ifdef DPB_CUDA_ARCHS
  j["cuda_architectures"] = DPB_CUDA_ARCHS;
#endif
  j["dpbench_version"] = DPB_VERSION;
  j["git_commit"] = git_commit();
  const dnnl_version_t* v = dnnl_version();
  j["onednn_version"] = std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                        std::to_string(v->patch) + " (" + v->hash + ")";
  const int ngpu = cuda_device_count();
  j["cuda_built"] = cuda_built();
  j["cuda_devices"] = ngpu;
  j["default_backend"] =
      backend_kind_name(cuda_built() && ngpu > 0 ? BackendKind::Cuda : BackendKind::Cpu);
  if (ngpu == 0) j["cuda_error"] = backend_of_kind(BackendKind::Cuda).unavailable();
  const nlohmann::ordered_json cuda = cuda_info();  // a named object: items() refers to it
  for (const auto& [key, value] : cuda.items()) j[key] = value;
  const std::string nv = field("/proc/driver/nvidia/version", "NVRM version");
  if (!nv.empty()) j["nvidia_driver"] = nv;
  return j;
}

std::vector<std::pair<std::string, std::string>> machine_info_text() {
  std::vector<std::pair<std::string, std::string>> out;
  const nlohmann::ordered_json info = machine_info();
  for (const auto& [key, value] : info.items()) {
    if (value.is_string()) {
      out.emplace_back(key, value.get<std::string>());
    } else if (key == "gpus") {  // "NVIDIA H100 (79.1 GiB, sm 9.0); ..."
      std::string s;
      for (const auto& g : value)
        s += (s.empty() ? "" : "; ") + g.value("name", std::string("?")) + " (" +
             g.value("memory_gib", nlohmann::ordered_json()).dump() + " GiB, sm " +
             g.value("compute_capability", std::string("?")) + ")";
      out.emplace_back(key, s);
    } else {
      out.emplace_back(key, value.dump());
    }
  }
  return out;
}

}  // namespace dpb
