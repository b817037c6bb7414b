// links.h: test helper: an emulated two-level link (collectives/link.h) in one call, for the
// tests of hier, the two-level cost models and auto's choice on emulated nodes.
//   const LinkSpec l = two_level_link(2, 1, 10, 0.1, 100);  // 2 nodes: 1 Gb/s 10 us inside,
//                                                           // 0.1 Gb/s 100 us between
#pragma once
#include "collectives/link.h"

namespace dpb {

// `nodes` emulated nodes; gbps and latency_us on the link inside a node, node_gbps and
// node_latency_us on the link between nodes.
inline LinkSpec two_level_link(int nodes, double gbps, double latency_us, double node_gbps,
                               double node_latency_us) {
  LinkSpec l;
  l.gbps = gbps;
  l.latency_us = latency_us;
  l.nodes = nodes;
  l.node_gbps = node_gbps;
  l.node_latency_us = node_latency_us;
  return l;
}

}  // namespace dpb
