#include "base/json.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"

namespace omni {
namespace {

TEST(JsonTest, ParseJsonNamesTheSourceAndOffsetOnError) {
  EXPECT_EQ(parse_json(R"({"1": {"max_num_seqs": 8}})", "--stage-overrides")["1"]["max_num_seqs"], 8);
  try {
    parse_json(R"({"1": {)", "--stage-overrides");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(e.what()).rfind("--stage-overrides: malformed JSON: parse error at line 1, column 8", 0), 0u)
        << e.what();
  }
}

// nlohmann reports a number beyond double's range as out_of_range, not parse_error; the deploy
// fuzzer found it escaping as a foreign exception.
TEST(JsonTest, ANumberTooLargeForADoubleIsAnInvalidArgument) {
  try {
    parse_json(R"({"0": {"gpu_memory_utilization": 6666666666666e666}})", "--stage-overrides");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--stage-overrides: malformed JSON: number overflow"), std::string::npos)
        << e.what();
  }
}

TEST(JsonTest, ReadJsonFileReportsMissingAndMalformedFiles) {
  auto dir = std::filesystem::temp_directory_path() / ("omni_json_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "good.json") << R"({"model_type": "qwen3", "vocab_size": 151936})";
  std::ofstream(dir / "bad.json") << R"({"model_type": )";
  EXPECT_EQ(read_json_file(dir / "good.json")["vocab_size"], 151936);
  try {
    read_json_file(dir / "missing.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("missing.json"), std::string::npos);
  }
  try {
    read_json_file(dir / "bad.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kLoadFailed);
    EXPECT_NE(std::string(e.what()).find("bad.json: malformed JSON"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace omni
