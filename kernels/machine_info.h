// machine_info.h: facts about this machine and this build, gathered in one place. `dpbench info`
// prints them as JSON, run_all's manifest.json stores that output (scripts/run_suite.py), and the
// microbenchmarks add them to Google Benchmark's context (bench/main.cpp), so every result names
// the same CPU, GPUs, library versions and commit.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace dpb {

// Keys, in this order: cpu (model name), cores, memory_gib, os, compiler, build_type,
// dpbench_version, git_commit, onednn_version, cuda_built, cuda_devices, default_backend,
// cuda_error (only without a usable GPU: why, e.g. "CUDA driver too old for this runtime: driver
// 12.2, runtime 13.0 (...)" or "this dpbench was built without the CUDA backend ..."), then
// with CUDA: cuda_architectures (built for), cuda_driver_version, cuda_runtime_version, cudnn_version, nccl_version,
// cublas_version, nvidia_driver, gpus ([{name, memory_gib, compute_capability}]). A fact that
// cannot be found is "unknown" (never a guess).
nlohmann::ordered_json machine_info();

// The same facts as (key, text) pairs: the gpus list becomes one line.
std::vector<std::pair<std::string, std::string>> machine_info_text();

}  // namespace dpb
