// cpu_ranks.h: test helper: k devices, one per rank (CPU devices with one math thread each, or
// what a factory makes: the async test device), and a CommGroup over them (the threads transport,
// paced when given a link): the set-up of the collective tests.
//   dpb::CpuRanks ranks(k[, link[, make]]);  ranks.group, ranks.raw[r]
//   dpb::RankDevices devs(k);                 devices only, for tests that make their own groups
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "collectives/allreduce.h"
#include "collectives/link.h"
#include "kernels/cpu/cpu_device.h"
#include "src/core/device.h"

namespace dpb {

// Makes rank r's device.
using RankDeviceFactory = std::function<std::unique_ptr<Device>(int rank)>;

// k devices: rank r's from make(r), else a CPU device with one math thread. raw: the pointers a
// CommGroup takes, in rank order.
struct RankDevices {
  std::vector<std::unique_ptr<Device>> devs;
  std::vector<Device*> raw;
  explicit RankDevices(int k, const RankDeviceFactory& make = {}) {
    for (int r = 0; r < k; ++r) devs.push_back(make ? make(r) : make_cpu_device(r, 1));
    for (auto& d : devs) raw.push_back(d.get());
  }
};

// RankDevices and a CommGroup over them. The group, a member, is destroyed before the devices
// (the base), which it uses.
struct CpuRanks : RankDevices {
  CommGroup group;
  explicit CpuRanks(int k, const LinkSpec& link = {}, const RankDeviceFactory& make = {})
      : RankDevices(k, make), group(k, raw, link) {}
};

}  // namespace dpb
