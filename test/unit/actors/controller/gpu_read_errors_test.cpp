// A field nvidia-smi keeps reading as [Unknown Error] on one GPU
// (actors/controller/gpu_read_errors.cpp; issue 18, rule 6).

#include "actors/controller/gpu_read_errors.hpp"

#include <gtest/gtest.h>

using namespace astraeus;

TEST(GpuReadErrors, AFieldThatKeepsReadingUnknownErrorMakesTheGpuAtRisk) {
  gpu_read_errors errors;
  v1::Gpu g;
  g.add_unknown_fields("ecc.errors.uncorrected.volatile.total: Unknown Error");
  g.add_unknown_fields("fan.speed: Not Supported");
  for (unsigned i = 1; i < unknown_error_reports; ++i)
    EXPECT_TRUE(errors.take(g).empty()) << "report " << i;
  EXPECT_EQ(errors.take(g), std::vector<std::string>{
                              "nvidia-smi cannot read ecc.errors.uncorrected.volatile.total"});
  // A report that reads it again starts the count over.
  v1::Gpu fine;
  EXPECT_TRUE(errors.take(fine).empty());
  EXPECT_TRUE(errors.take(g).empty());
}
