// named_links.h: the table of named interconnects (`--link NAME`, `--node-link NAME`): a real
// link's bandwidth per direction and per-step latency, so that `dpbench project` answers "8 x 8
// GPUs, NVLink inside, 400 Gb InfiniBand between" without the user looking the numbers up. The
// entries and their sources are in named_links.cpp (one entry each); `dpbench info` lists them
// ("named_links") and scripts/link_study.py reads them from there. Tested by
// tests/test_named_links.cpp.
#pragma once
#include <string>
#include <vector>

namespace dpb {

struct NamedLink {
  std::string name;  // --link value: "nvlink-h100"
  std::string help;  // one line: what it is, per GPU (or NIC)
  double gbps = 0;   // gigabits per second per direction (LinkSpec::gbps)
  double latency_us = 0;  // per transfer (one ring step: LinkSpec::latency_us)
};

const std::vector<NamedLink>& named_links();
// The entry called name; throws "--link: unknown link 'x' (valid: ...)" naming `option`.
const NamedLink& find_named_link(const std::string& name, const std::string& option = "--link");

}  // namespace dpb
