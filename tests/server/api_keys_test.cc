// ApiKeys guards the paths vLLM's server guards and accepts any of its keys as a bearer token.
#include "server/api_keys.h"

#include <gtest/gtest.h>

namespace omni::server {
namespace {

TEST(ApiKeysTest, NoKeysGuardNothing) {
  ApiKeys keys({});
  EXPECT_FALSE(keys.enabled());
  EXPECT_FALSE(keys.guards("POST", "/v1/chat/completions", true));
  ApiKeys empty({""});  // an empty variable is no key
  EXPECT_FALSE(empty.enabled());
}

TEST(ApiKeysTest, GuardsRoutesAndTheApiPrefixesButNotThePublicEndpointsOrPreflights) {
  ApiKeys keys({"k1"});
  EXPECT_TRUE(keys.guards("POST", "/v1/chat/completions", true));
  EXPECT_TRUE(keys.guards("GET", "/v1/no-such-route", false));
  EXPECT_TRUE(keys.guards("GET", "/v2/anything", false));
  EXPECT_TRUE(keys.guards("POST", "/inference/v1/generate", false));
  EXPECT_TRUE(keys.guards("POST", "/tokenize", true));
  EXPECT_FALSE(keys.guards("GET", "/elsewhere", false));  // no route, no API prefix: 404 for everyone
  for (const char* path : {"/health", "/ping", "/load", "/version", "/metrics", "/metrics/extra"}) {
    EXPECT_FALSE(keys.guards("GET", path, true)) << path;
  }
  EXPECT_TRUE(keys.guards("GET", "/healthz", true));  // a segment boundary, not a prefix of the name
  EXPECT_FALSE(keys.guards("OPTIONS", "/v1/chat/completions", true));
}

TEST(ApiKeysTest, AcceptsAnyKeyAsABearerTokenAndNothingElse) {
  ApiKeys keys({"first-key", "second"});
  EXPECT_TRUE(keys.accepts("Bearer first-key"));
  EXPECT_TRUE(keys.accepts("Bearer second"));
  EXPECT_TRUE(keys.accepts("bearer second"));  // the scheme's case does not matter
  EXPECT_FALSE(keys.accepts("Bearer secon"));
  EXPECT_FALSE(keys.accepts("Bearer second2"));
  EXPECT_FALSE(keys.accepts("Bearer first-kez"));
  EXPECT_FALSE(keys.accepts("Bearer "));
  EXPECT_FALSE(keys.accepts("Basic second"));
  EXPECT_FALSE(keys.accepts("second"));
  EXPECT_FALSE(keys.accepts(""));
}

}  // namespace
}  // namespace omni::server
