#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "base/error.h"
#include "model/safetensors_writer.h"

namespace omni::model {
namespace {

namespace fs = std::filesystem;
using tensor::DType;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("omni_st_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file written byte by byte, for dtypes and defects our writer does not produce.
  void write_raw(const fs::path& path, const std::string& header, const std::string& data) {
    std::ofstream out(path, std::ios::binary);
    uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header << data;
  }

  std::string expect_error(const std::function<void()>& f, ErrorCode code) {
    try {
      f();
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }

  fs::path dir_;
};

TEST_F(SafetensorsTest, WriterRoundTripsFloat32AndBfloat16) {
  const float values[6] = {1.0f, -2.5f, 3.140625f, 0.0f, 1e-3f, 65504.0f};
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SafetensorsWriter w(dtype);
    w.add("b.weight", {2, 3}, values);
    w.add("a.bias", {1}, values + 1);
    w.write(dir_ / "model.safetensors");
    Checkpoint c = Checkpoint::open(dir_);
    EXPECT_EQ(c.tensor_names(), (std::vector<std::string>{"a.bias", "b.weight"}));
    tensor::Tensor t = c.load_f32("b.weight", {2, 3});
    for (int i = 0; i < 6; ++i) {
      const float want = dtype == DType::kF32 ? values[i] : tensor::bf16_to_f32(tensor::f32_to_bf16(values[i]));
      EXPECT_EQ(t.data<float>()[i], want) << i;
    }
  }
}

TEST_F(SafetensorsTest, SlicesOfRowsAndColumnsAreReadAlone) {
  // [3, 4] = 0..11; a tensor-parallel shard reads rows [1, 3) or columns [1, 3).
  float values[12];
  for (int i = 0; i < 12; ++i) values[i] = static_cast<float>(i);
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    SafetensorsWriter w(dtype);
    w.add("w", {3, 4}, values);
    w.add("b", {4}, values);
    w.write(dir_ / "model.safetensors");
    Checkpoint c = Checkpoint::open(dir_);
    float rows[8], cols[6], bias[2];
    c.load_f32_slice_into("w", {3, 4}, 0, 1, 2, rows);
    c.load_f32_slice_into("w", {3, 4}, 1, 1, 2, cols);
    c.load_f32_slice_into("b", {4}, 0, 2, 2, bias);
    EXPECT_EQ(std::vector<float>(rows, rows + 8), (std::vector<float>{4, 5, 6, 7, 8, 9, 10, 11}));
    EXPECT_EQ(std::vector<float>(cols, cols + 6), (std::vector<float>{1, 2, 5, 6, 9, 10}));
    EXPECT_EQ(std::vector<float>(bias, bias + 2), (std::vector<float>{2, 3}));
    const std::string message = expect_error(
        [&] {
          c.load_f32_slice_into("w", {3, 4}, 1, 3, 2, cols);
        },
        ErrorCode::kInvalidArgument);
    EXPECT_NE(message.find("tensor 'w' [3, 4] has no slice [3, 5) of dimension 1"), std::string::npos) << message;
  }
}

TEST_F(SafetensorsTest, Float16IsWidenedToFloat32) {
  const uint16_t halves[3] = {0x3c00, 0xc500, 0x0001};
  write_raw(dir_ / "model.safetensors", R"({"x":{"dtype":"F16","shape":[3],"data_offsets":[0,6]}})",
            std::string(reinterpret_cast<const char*>(halves), 6));
  tensor::Tensor t = Checkpoint::open(dir_).load_f32("x", {3});
  EXPECT_EQ(t.data<float>()[0], 1.0f);
  EXPECT_EQ(t.data<float>()[1], -5.0f);
  EXPECT_EQ(t.data<float>()[2], std::ldexp(1.0f, -24));
}

// Found by the safetensors fuzzer: offsets need not be aligned, and a 16-bit tensor at an odd
// one was read through a misaligned uint16_t pointer (undefined behaviour, which UBSan reports in
// the fuzz build; x86 itself reads it either way).
TEST_F(SafetensorsTest, SixteenBitTensorsAtOddOffsetsLoad) {
  const uint16_t values[2] = {0x3f80, 0xc040};  // bf16 1.0, -3.0
  write_raw(dir_ / "model.safetensors", R"({"x":{"dtype":"BF16","shape":[2],"data_offsets":[1,5]}})",
            std::string(1, '\0') + std::string(reinterpret_cast<const char*>(values), 4));
  tensor::Tensor t = Checkpoint::open(dir_).load_f32("x", {2});
  EXPECT_EQ(t.data<float>()[0], 1.0f);
  EXPECT_EQ(t.data<float>()[1], -3.0f);
}

TEST_F(SafetensorsTest, MissingAndMisshapedTensorsNameTheTensorAndBothShapes) {
  const float values[6] = {};
  SafetensorsWriter w(DType::kF32);
  w.add("model.norm.weight", {6}, values);
  w.write(dir_ / "model.safetensors");
  Checkpoint c = Checkpoint::open(dir_);
  EXPECT_NE(expect_error(
                [&] {
                  c.load_f32("lm_head.weight", {4, 8});
                },
                ErrorCode::kLoadFailed)
                .find("tensor 'lm_head.weight' is missing (expected shape [4, 8])"),
            std::string::npos);
  EXPECT_NE(expect_error([&] { c.load_f32("model.norm.weight", {8}); }, ErrorCode::kLoadFailed)
                .find("tensor 'model.norm.weight' has shape [6] in model.safetensors, expected [8]"),
            std::string::npos);
}

TEST_F(SafetensorsTest, MalformedFilesAreLoadErrorsNamingTheFile) {
  write_raw(dir_ / "model.safetensors", R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", "12345678");
  std::string msg = expect_error([&] { Checkpoint::open(dir_); }, ErrorCode::kLoadFailed);
  EXPECT_NE(msg.find("model.safetensors: tensor 'x' has data_offsets that do not fit its shape [4]"), std::string::npos)
      << msg;
  write_raw(dir_ / "model.safetensors", R"({"x":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", "1");
  msg = expect_error([&] { Checkpoint::open(dir_); }, ErrorCode::kLoadFailed);
  EXPECT_NE(msg.find("unsupported dtype F8_E4M3"), std::string::npos) << msg;
  {
    std::ofstream out(dir_ / "model.safetensors", std::ios::binary);
    const uint64_t len = 1000;
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << "{}";
  }
  msg = expect_error([&] { Checkpoint::open(dir_); }, ErrorCode::kLoadFailed);
  EXPECT_NE(msg.find("header length 1000 runs past the end of the file"), std::string::npos) << msg;
  fs::remove(dir_ / "model.safetensors");
  msg = expect_error([&] { Checkpoint::open(dir_); }, ErrorCode::kNotFound);
  EXPECT_NE(msg.find("no model.safetensors or model.safetensors.index.json"), std::string::npos) << msg;
}

// Found by tests/fuzz/safetensors_fuzzer: a shape whose product overflows 64 bits wrapped to a
// size that matched the offsets, and a load would have read far past the mapping.
TEST_F(SafetensorsTest, ShapesLargerThanTheFileAreLoadErrors) {
  write_raw(dir_ / "model.safetensors",
            R"({"x":{"dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,0]}})", "");
  std::string msg = expect_error([&] { Checkpoint::open(dir_); }, ErrorCode::kLoadFailed);
  EXPECT_NE(msg.find("tensor 'x' has shape [4294967296, 4294967296, 4], whose size in bytes overflows 64 bits"),
            std::string::npos)
      << msg;
  write_raw(dir_ / "model.safetensors", R"({"x":{"dtype":"F32","shape":[-1,-4],"data_offsets":[0,16]}})",
            std::string(16, '\0'));
  msg = expect_error([&] { Checkpoint::open(dir_); }, ErrorCode::kLoadFailed);
  EXPECT_NE(msg.find("tensor 'x' has a negative dimension in shape [-1, -4]"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, ShardedCheckpointsFollowTheIndex) {
  const float a[2] = {1, 2}, b[3] = {3, 4, 5};
  SafetensorsWriter w1(DType::kF32), w2(DType::kBF16);
  w1.add("a", {2}, a);
  w2.add("b", {3}, b);
  w1.write(dir_ / "model-00001-of-00002.safetensors");
  w2.write(dir_ / "model-00002-of-00002.safetensors");
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
  Checkpoint c = Checkpoint::open(dir_);
  EXPECT_TRUE(c.contains("a"));
  EXPECT_TRUE(c.contains("b"));
  EXPECT_EQ(c.load_f32("b", {3}).data<float>()[2], 5.0f);
  std::ofstream(dir_ / "model.safetensors.index.json") << R"({"weight_map":{"a":"model-00002-of-00002.safetensors"}})";
  std::string msg = expect_error([&] { Checkpoint::open(dir_); }, ErrorCode::kLoadFailed);
  EXPECT_NE(msg.find("names tensor 'a' in model-00002-of-00002.safetensors, which does not hold it"), std::string::npos)
      << msg;
}

TEST_F(SafetensorsTest, RealShardedReferenceCheckpointOpens) {
  Checkpoint c = Checkpoint::open(fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen/qwen3_gqa3_tied_f32_v4_sharded");
  EXPECT_TRUE(c.contains("model.embed_tokens.weight"));
  EXPECT_FALSE(c.contains("lm_head.weight"));
  EXPECT_EQ(c.tensor_names().size(), 2u + 2u * 11u);
}

// Checkpoint::random (--load-format dummy): every name is there, in the shape asked for, with
// values in the documented ranges that depend on the seed and the name only; slices are the whole
// tensor's elements at the same places, in any dtype; impossible slices are still errors.
TEST(RandomCheckpointTest, HoldsEveryTensorWithReproducibleValues) {
  const Checkpoint a = Checkpoint::random("/no/such/dir", 1), b = Checkpoint::random("/no/such/dir", 1);
  const Checkpoint other_seed = Checkpoint::random("/no/such/dir", 2);
  EXPECT_TRUE(a.is_random());
  EXPECT_TRUE(a.contains("anything.at.all"));
  const tensor::Tensor w = a.load_f32("layers.3.mlp.gate.weight", {24, 10});
  const float* v = w.data<float>();
  const float scale = Checkpoint::kRandomWeightScale;
  float lo = 1.0f, hi = -1.0f;
  for (int i = 0; i < 240; ++i) {
    lo = std::min(lo, v[i]);
    hi = std::max(hi, v[i]);
  }
  EXPECT_GE(lo, -scale);
  EXPECT_LT(hi, scale);
  EXPECT_LT(lo, -0.8f * scale) << "spread over the range";
  EXPECT_GT(hi, 0.8f * scale);
  const tensor::Tensor same = b.load_f32("layers.3.mlp.gate.weight", {24, 10});
  EXPECT_EQ(std::memcmp(same.raw(), w.raw(), w.nbytes()), 0);
  const tensor::Tensor seeded = other_seed.load_f32("layers.3.mlp.gate.weight", {24, 10});
  EXPECT_NE(std::memcmp(seeded.raw(), w.raw(), w.nbytes()), 0);
  const tensor::Tensor renamed = a.load_f32("layers.4.mlp.gate.weight", {24, 10});
  EXPECT_NE(std::memcmp(renamed.raw(), w.raw(), w.nbytes()), 0);
  const tensor::Tensor norm = a.load_f32("layers.3.input_layernorm.weight", {64});
  for (int i = 0; i < 64; ++i) {
    EXPECT_GE(norm.data<float>()[i], 1.0f - scale);
    EXPECT_LT(norm.data<float>()[i], 1.0f + scale);
  }
  std::vector<float> rows(3 * 10), cols(24 * 4);
  a.load_f32_slice_into("layers.3.mlp.gate.weight", {24, 10}, 0, 5, 3, rows.data());
  a.load_f32_slice_into("layers.3.mlp.gate.weight", {24, 10}, 1, 6, 4, cols.data());
  for (int i = 0; i < 30; ++i) EXPECT_EQ(rows[i], v[50 + i]);
  for (int r = 0; r < 24; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(cols[r * 4 + c], v[r * 10 + 6 + c]);
  const tensor::Tensor bf16 = a.load("layers.3.mlp.gate.weight", {24, 10}, DType::kBF16);
  for (int i = 0; i < 240; ++i) {
    EXPECT_EQ(static_cast<const uint16_t*>(bf16.raw())[i], tensor::f32_to_bf16(v[i]));
  }
  EXPECT_THROW(a.load_f32_slice_into("layers.3.mlp.gate.weight", {24, 10}, 0, 22, 3, rows.data()), Error);
}

}  // namespace
}  // namespace omni::model
