// The worker supervisor (runtime/workers/worker_supervisor.cpp): keeping the
// CDI specs in step with discovery passes. Source: shared/seeds/gpus.md.

#include <gtest/gtest.h>

#include "runtime/workers/worker_supervisor.hpp"
#include "worker_test_files.hpp"

using namespace astraeus;
using namespace astraeus::test;

TEST(CdiHandOver, TheAgentsSpecIsRemovedWhenTheDriverGoesAway) {
  ctk_fixture f;
  ::setenv("FAKE_CTK_GPUS", "GPU-1", 1);
  supervisor_options opts;
  opts.data_dir = f.dir.path() + "/agent";
  opts.cdi = f.o;
  worker_supervisor sup{opts};
  v1::GpuSection healthy;
  healthy.set_read_as("driver: healthy");
  auto* g = healthy.add_gpus();
  g->set_id("GPU-1");
  g->set_vendor("nvidia");
  g->set_driver_version("550.54.15");
  sup.sync_cdi(healthy, "/");
  auto spec = fs::path{f.o.dynamic_dir} / "nvidia.yaml";
  ASSERT_TRUE(fs::exists(spec));
  // The driver does not answer (NVML init failed): the spec is kept.
  auto hung = healthy;
  hung.set_read_as("unavailable");
  hung.set_detail("nvmlInit_v2: NVML_ERROR_UNKNOWN; the last known GPUs are kept");
  sup.sync_cdi(hung, "/");
  EXPECT_TRUE(fs::exists(spec));
  // The kernel driver was unloaded: the GPUs are gone for CDI.
  auto gone = healthy;
  gone.set_read_as("unavailable");
  gone.set_detail("nvmlInit_v2: NVML_ERROR_DRIVER_NOT_LOADED; the last known GPUs are kept");
  sup.sync_cdi(gone, "/");
  EXPECT_FALSE(fs::exists(spec));
  EXPECT_FALSE(fs::exists(fs::path{f.o.dynamic_dir} / ".nvidia.yaml.astraeus-fingerprint"));
}
