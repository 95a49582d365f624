#include "server/process_local_state.h"

#include <gtest/gtest.h>

#include "base/json.h"

namespace omni::server {
namespace {

Json error_of(const HttpResponse& response) { return Json::parse(response.body)["error"]; }

TEST(ProcessLocalState, SeveralFrontendsRefuseTheProcessLocalOperationsWith409) {
  for (const auto& [method, path, operation] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"POST", "/v1/omni/sleep", "Sleep"},
           {"POST", "/v1/omni/wakeup", "Wakeup"},
           {"POST", "/v1/audio/voices", "Runtime voice upload"},
           {"DELETE", "/v1/audio/voices/vivian", "Runtime voice deletion"}}) {
    SCOPED_TRACE(method + " " + path);
    EXPECT_EQ(process_local_operation(method, path), operation);
    EXPECT_FALSE(process_local_refusal(method, path, 1).has_value()) << "one frontend serves them";
    std::optional<HttpResponse> refused = process_local_refusal(method, path, 4);
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->status, 409);
    EXPECT_EQ(error_of(*refused)["message"],
              operation +
                  " is not supported with --api-server-count > 1 because the operation uses process-local "
                  "frontend state");
  }
}

TEST(ProcessLocalState, UninitialisedTopologyAnswers503AndOtherRoutesPass) {
  std::optional<HttpResponse> refused = process_local_refusal("POST", "/v1/omni/sleep", 0);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(error_of(*refused)["message"], "API worker topology is not initialized.");
  for (const auto& [method, path] : std::vector<std::pair<std::string, std::string>>{{"GET", "/v1/audio/voices"},
                                                                                     {"DELETE", "/v1/audio/voices"},
                                                                                     {"DELETE", "/v1/audio/voices/"},
                                                                                     {"POST", "/v1/chat/completions"},
                                                                                     {"GET", "/v1/omni/sleep"}}) {
    EXPECT_FALSE(process_local_operation(method, path).has_value()) << method << " " << path;
    EXPECT_FALSE(process_local_refusal(method, path, 0).has_value()) << method << " " << path;
    EXPECT_FALSE(process_local_refusal(method, path, 2).has_value()) << method << " " << path;
  }
}

}  // namespace
}  // namespace omni::server
