#include "tensor/backend.h"

#include <gtest/gtest.h>

namespace omni::tensor {
namespace {

TEST(BackendTest, CompiledBackendsListCpuFirstAndCudaWhenBuilt) {
  std::string backends = compiled_backends();
  EXPECT_EQ(backends.rfind("cpu", 0), 0u);
#ifdef OMNI_TEST_EXPECT_CUDA
  EXPECT_EQ(backends, "cpu, cuda (sm_90)");
#endif
}

TEST(BackendTest, DeviceCountIsNeverNegative) { EXPECT_GE(cuda_device_count(), 0); }

}  // namespace
}  // namespace omni::tensor
