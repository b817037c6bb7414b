// test_tables.cpp: the fields of the table entries that code below the CLI asks instead of
// comparing names: the backend table's one name per kind, its physical devices and emulated-link
// flag, the all-reduce entries' launchers, link pacing and tuning-table picks, and the messages
// built from them (the same words as when they were written by hand).
//   build/dpb_tests --gtest_filter='Tables.*'
#include <gtest/gtest.h>

#include <string>

#include "collectives/registry.h"
#include "collectives/tuning.h"
#include "kernels/backends.h"
#include "src/core/check.h"
#include "src/model/model.h"
#include "src/train/projection.h"
#include "src/train/trainer.h"

namespace dpb {
namespace {

std::string validate_error(const TrainConfig& cfg) {
  Dataset d;
  d.train.n = 64;
  d.test.n = 8;
  try {
    validate(cfg, d);
  } catch (const Error& e) {
    const std::string what = e.what();
    return what.substr(0, what.rfind(" ["));  // without the " [file:line]" of DPB_CHECK
  }
  return "";
}

// One entry per kind, named by src/core/device.h's backend_kind_name (what collectives and
// tuning tables use to name a backend without seeing this table).
TEST(Tables, EveryBackendKindHasOneEntryNamedByTheKind) {
  for (BackendKind k : kBackendKinds) {
    int n = 0;
    for (const BackendEntry& b : backends())
      if (b.kind == k) {
        ++n;
        EXPECT_EQ(b.name, backend_kind_name(k));
      }
    EXPECT_EQ(n, 1) << backend_kind_name(k);
    EXPECT_EQ(backend_of_kind(k).name, backend_kind_name(k));
  }
  EXPECT_EQ(backends().size(), std::size(kBackendKinds));
}

TEST(Tables, BackendFieldsReplaceNameTests) {
  EXPECT_EQ(find_backend("cpu").physical_devices, nullptr);    // ranks share the host's cores
  EXPECT_EQ(find_backend("async").physical_devices, nullptr);
  EXPECT_NE(find_backend("cuda").physical_devices, nullptr);   // the GPUs
  EXPECT_EQ(emulated_link_backends(), "cpu");
  // The model layout asks no backend by name, and the profile refuses an unknown backend.
  EXPECT_FALSE(model_param_layout("lenet", ModelOptions{}).empty());
}

TEST(Tables, LauncherEnumAndLinkPacing) {
  EXPECT_STREQ(launcher_name(Launcher::Threads), "threads");
  EXPECT_STREQ(launcher_name(Launcher::Mpi), "mpi");
  TrainConfig cfg;
  EXPECT_EQ(cfg.launcher(), Launcher::Threads);
  cfg.procs.size = 2;
  EXPECT_EQ(cfg.launcher(), Launcher::Mpi);
  for (const AllReduceEntry& e : allreduce_algorithms()) {
    EXPECT_EQ(e.runs_with(Launcher::Threads), bool(e.launchers & AllReduceEntry::kThreads));
    EXPECT_EQ(e.runs_with(Launcher::Mpi), bool(e.launchers & AllReduceEntry::kProcesses));
  }
  EXPECT_FALSE(find_allreduce("mpi").link_paced);
  EXPECT_TRUE(find_allreduce("ring").link_paced);
  EXPECT_EQ(link_paced_algorithms(BackendKind::Cpu, Launcher::Mpi),
            "naive, ring, direct, rhd, hier or auto");
  EXPECT_EQ(link_paced_algorithms(BackendKind::Cpu, Launcher::Threads),
            "naive, ring, direct, rhd, hier or auto");
}

// validate() words these refusals from the entries' fields as it did from names.
TEST(Tables, TrainRefusalsFromFields) {
  TrainConfig cfg;
  cfg.devices = 2;
  cfg.batch = 8;
  cfg.link.gbps = 1;
  cfg.backend = "async";
  EXPECT_EQ(validate_error(cfg),
            "--link-gbps/--link-latency-us: the emulated link needs --backend cpu (GPU transfers "
            "use the real interconnect)");
  cfg.backend = "cpu";
  cfg.procs = ProcessPlace{2, 0, 0, 2};
  cfg.allreduce = "mpi";
  EXPECT_EQ(validate_error(cfg),
            "--link-gbps/--link-latency-us: --allreduce mpi (MPI_Allreduce) is not paced by the "
            "emulated link; use naive, ring, direct, rhd, hier or auto, or omit the link");
  cfg.link.gbps = 0;
  cfg.procs = ProcessPlace{};
  const std::string threads = validate_error(cfg);
  EXPECT_NE(threads.find("runs only with one process per rank"), std::string::npos) << threads;
}

TEST(Tables, TuningTablesNameKindsAndRefuseThePicker) {
  const std::string head = R"({"format": "dpbench-allreduce-tuning/1", "tables": [{"backend": )";
  auto error_of = [](const std::string& json) -> std::string {
    try {
      parse_tune_json(json, "t.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  auto table = [&](const std::string& backend, const std::string& algorithm) {
    return head + "\"" + backend + R"(", "ranks": 2, "rules": [{"up_to_bytes": null, "algorithm": ")" +
           algorithm + "\"}]}]}";
  };
  EXPECT_NE(error_of(table("tpu", "ring"))
                .find("unknown backend 'tpu' (valid: cpu, cuda, async, meta)"),
            std::string::npos);
  EXPECT_NE(error_of(table("cpu", "auto")).find("(valid: every --allreduce choice but auto: naive"),
            std::string::npos);
  EXPECT_EQ(error_of(table("async", "ring")), "");
}

TEST(Tables, ProfileBackendIsAnEntry) {
  StepProfile p;
  p.model = "lenet";
  p.backend = "cpu";
  p.threads = 1;
  p.batch = 4;
  p.steps = 1;
  for (const ParamInfo& q : model_param_layout("lenet", ModelOptions{}))
    p.params.push_back({q.name, q.size, 0.0});
  nlohmann::json j = profile_to_json(p);
  EXPECT_NO_THROW(profile_from_json(j, "p.json"));
  j["backend"] = "tpu";
  try {
    profile_from_json(j, "p.json");
    FAIL() << "an unknown backend was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("p.json: unknown backend 'tpu'"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dpb
