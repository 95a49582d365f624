#include "base/yaml.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace omni {
namespace {

TEST(YamlTest, ConvertsScalarsWithTheCoreSchema) {
  Json j = yaml_to_json(parse_yaml(R"(
async_chunk: true
devices: "0,1"
port: 8091
utilization: 0.9
ratio: 1e-3
nothing: null
tilde: ~
quoted_number: "42"
name: SharedMemoryConnector
list: [1, two, 3.5]
)",
                                   "test.yaml"));
  EXPECT_EQ(j["async_chunk"], true);
  EXPECT_EQ(j["devices"], "0,1");
  EXPECT_EQ(j["port"], 8091);
  EXPECT_TRUE(j["port"].is_number_integer());
  EXPECT_DOUBLE_EQ(j["utilization"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(j["ratio"].get<double>(), 1e-3);
  EXPECT_TRUE(j["nothing"].is_null());
  EXPECT_TRUE(j["tilde"].is_null());
  EXPECT_EQ(j["quoted_number"], "42");
  EXPECT_EQ(j["name"], "SharedMemoryConnector");
  EXPECT_EQ(j["list"], Json::parse(R"([1, "two", 3.5])"));
}

TEST(YamlTest, SyntaxErrorsCarryFileLineAndColumn) {
  try {
    parse_yaml("stages:\n  - stage_id: 0\n    devices: [0, 1\n", "deploy/broken.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidConfig);
    EXPECT_EQ(std::string(e.what()).rfind("deploy/broken.yaml:4:", 0), 0u) << e.what();
  }
}

TEST(YamlTest, NonScalarKeysAreRejectedWithTheirLine) {
  try {
    yaml_to_json(parse_yaml("a: 1\n? [x, y]\n: 2\n", "k.yaml"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 2:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace omni
