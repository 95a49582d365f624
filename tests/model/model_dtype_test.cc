#include "model/model_dtype.h"

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"

namespace omni::model {
namespace {

using tensor::Device;
using tensor::DType;

TEST(ModelDTypeTest, ParsesVllmValuesAndAliases) {
  EXPECT_EQ(parse_model_dtype("auto", "--dtype"), std::nullopt);
  EXPECT_EQ(parse_model_dtype("bfloat16", "--dtype"), DType::kBF16);
  EXPECT_EQ(parse_model_dtype("float16", "--dtype"), DType::kF16);
  EXPECT_EQ(parse_model_dtype("half", "--dtype"), DType::kF16);
  EXPECT_EQ(parse_model_dtype("float32", "--dtype"), DType::kF32);
  EXPECT_EQ(parse_model_dtype("float", "--dtype"), DType::kF32);
}

TEST(ModelDTypeTest, ABadValueNamesTheFlagAndTheAllowedValues) {
  try {
    parse_model_dtype("fp8", "stage 0 engine argument dtype");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("stage 0 engine argument dtype: 'fp8' is not a dtype (allowed: auto, "
                                         "bfloat16, float16 (half), float32 (float))"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(parse_model_dtype("BFloat16", "--dtype"), Error) << "vLLM's values are lower case";
}

TEST(ModelDTypeTest, AutoTakesTheCheckpointsDtypeAndBf16ForFloat32OnCuda) {
  const Device gpu = Device::cuda(0);
  EXPECT_EQ(resolve_model_dtype(std::nullopt, "bfloat16", gpu, "m"), DType::kBF16);
  EXPECT_EQ(resolve_model_dtype(std::nullopt, "float16", gpu, "m"), DType::kF16);
  EXPECT_EQ(resolve_model_dtype(std::nullopt, "float32", gpu, "m"), DType::kBF16);
  EXPECT_EQ(resolve_model_dtype(std::nullopt, "", gpu, "m"), DType::kBF16);
  EXPECT_EQ(resolve_model_dtype(DType::kF32, "bfloat16", gpu, "m"), DType::kF32) << "a requested dtype wins";
  EXPECT_EQ(resolve_model_dtype(DType::kF16, "float32", gpu, "m"), DType::kF16);
}

TEST(ModelDTypeTest, TheCpuComputesInFloat32Whatever) {
  for (std::optional<DType> requested :
       {std::optional<DType>(), std::optional(DType::kBF16), std::optional(DType::kF16), std::optional(DType::kF32)}) {
    EXPECT_EQ(resolve_model_dtype(requested, "bfloat16", Device::cpu(), "m"), DType::kF32);
  }
}

}  // namespace
}  // namespace omni::model
