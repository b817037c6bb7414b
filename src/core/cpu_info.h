// cpu_info.h: the CPU's model name from /proc/cpuinfo, read in one place for every caller
// (`dpbench info`, selftest's header, the projection profile).
#pragma once
#include <istream>
#include <string>

namespace dpb {

// The first "model name" line's value, without surrounding blanks; "unknown" when there is none
// (no /proc, or a CPU whose /proc/cpuinfo has no such line, e.g. many ARM kernels).
std::string cpu_model_name();
std::string cpu_model_name(std::istream& cpuinfo);  // the same, from /proc/cpuinfo's text

}  // namespace dpb
