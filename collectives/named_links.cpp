// named_links.cpp: the named interconnects (see named_links.h), one entry each.
// Bandwidth: per direction, per GPU (NVLink, PCIe) or per NIC (a rail-optimized cluster has one
// per GPU, the emulated link's one send and one receive link per rank):
//   NVLink 4 (H100 SXM): 18 links x 25 GB/s = 450 GB/s = 3600 Gb/s per direction (NVIDIA H100
//     datasheet: 900 GB/s bidirectional); NVLink 3 (A100 SXM): 12 x 25 GB/s = 300 GB/s = 2400 Gb/s.
//   PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s = 252 Gb/s; PCIe 5.0 x16: twice, 504.
//   Ethernet and InfiniBand (HDR 200, NDR 400): the line rate.
// Latency: NCCL's own model of one ring step with the Simple protocol (hwLat in NCCL's
// src/graph/tuning.cc: NVLink 3.4 us, PCI 5.7 us, network 14 us).
// scripts/link_study.py takes its named links from `dpbench info`, so the two cannot disagree.
#include "collectives/named_links.h"

#include "src/core/check.h"
#include "src/core/registry.h"

namespace dpb {

const std::vector<NamedLink>& named_links() {
  static const std::vector<NamedLink> table = {
      {"nvlink-h100", "NVLink 4 (H100 SXM): 450 GB/s per direction per GPU", 3600, 3.4},
      {"nvlink-a100", "NVLink 3 (A100 SXM): 300 GB/s per direction per GPU", 2400, 3.4},
      {"pcie4", "PCIe 4.0 x16: 31.5 GB/s per direction", 252, 5.7},
      {"pcie5", "PCIe 5.0 x16: 63 GB/s per direction", 504, 5.7},
      {"eth100", "100 Gb Ethernet, one NIC per GPU", 100, 14},
      {"eth400", "400 Gb Ethernet, one NIC per GPU", 400, 14},
      {"ib-hdr200", "InfiniBand HDR, 200 Gb/s, one NIC per GPU", 200, 14},
      {"ib-ndr400", "InfiniBand NDR, 400 Gb/s, one NIC per GPU", 400, 14},
  };
  return table;
}

const NamedLink& find_named_link(const std::string& name, const std::string& option) {
  const NamedLink* e = find_entry(named_links(), name);
  DPB_CHECK(e != nullptr, option << ": unknown link '" << name << "' (valid: "
                                 << entry_names(named_links()) << ")");
  return *e;
}

}  // namespace dpb
