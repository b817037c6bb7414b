// cpu_info.cpp: the CPU model name (see cpu_info.h).
#include "src/core/cpu_info.h"

#include <fstream>

namespace dpb {

std::string cpu_model_name(std::istream& cpuinfo) {
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t a = line.find_first_not_of(" \t", colon + 1);
    const size_t b = line.find_last_not_of(" \t\r");
    if (a != std::string::npos && b >= a) return line.substr(a, b - a + 1);
  }
  return "unknown";
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  return cpu_model_name(in);
}

}  // namespace dpb
