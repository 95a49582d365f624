// CorsPolicy answers preflights and grants cross-origin responses as vLLM's server does.
#include "server/cors.h"

#include <gtest/gtest.h>

namespace omni::server {
namespace {

HttpRequest request(std::string method, HttpHeaders headers) {
  HttpRequest r;
  r.method = std::move(method);
  r.path = "/v1/chat/completions";
  r.headers = std::move(headers);
  return r;
}

std::string header(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return "<absent>";
}

TEST(CorsPolicyTest, DefaultsAllowEveryOriginMethodAndHeader) {
  CorsPolicy cors{CorsOptions{}};
  auto response = cors.preflight(request("OPTIONS", {{"origin", "http://app.example"},
                                                     {"access-control-request-method", "POST"},
                                                     {"access-control-request-headers", "Authorization, X-Custom"}}));
  ASSERT_TRUE(response);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "OK");
  EXPECT_EQ(header(response->headers, "Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(header(response->headers, "Access-Control-Allow-Methods"), "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT");
  EXPECT_EQ(header(response->headers, "Access-Control-Allow-Headers"), "Authorization, X-Custom");
  EXPECT_EQ(header(response->headers, "Access-Control-Max-Age"), "600");
  EXPECT_EQ(header(response->headers, "Access-Control-Allow-Credentials"), "<absent>");

  HttpHeaders simple = cors.response_headers(request("POST", {{"origin", "http://app.example"}}));
  EXPECT_EQ(header(simple, "Access-Control-Allow-Origin"), "*");
}

TEST(CorsPolicyTest, RequestsThatAreNotCrossOriginOrNotPreflightsAreLeftAlone) {
  CorsPolicy cors{CorsOptions{}};
  EXPECT_FALSE(cors.preflight(request("OPTIONS", {})));
  EXPECT_FALSE(cors.preflight(request("OPTIONS", {{"origin", "http://a.example"}})));  // no request method
  EXPECT_FALSE(
      cors.preflight(request("POST", {{"origin", "http://a.example"}, {"access-control-request-method", "POST"}})));
  EXPECT_TRUE(cors.response_headers(request("POST", {})).empty());
}

TEST(CorsPolicyTest, ExplicitListsNameTheOriginAndRefuseWhatTheyDoNotList) {
  CorsPolicy cors{CorsOptions{.allowed_origins = {"http://good.example"},
                              .allowed_methods = {"POST"},
                              .allowed_headers = {"Authorization"},
                              .allow_credentials = true}};
  auto ok = cors.preflight(request("OPTIONS", {{"origin", "http://good.example"},
                                               {"access-control-request-method", "POST"},
                                               {"access-control-request-headers", "authorization,content-type"}}));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(header(ok->headers, "Access-Control-Allow-Origin"), "http://good.example");
  EXPECT_EQ(header(ok->headers, "Vary"), "Origin");
  EXPECT_EQ(header(ok->headers, "Access-Control-Allow-Methods"), "POST");
  EXPECT_EQ(header(ok->headers, "Access-Control-Allow-Headers"),
            "accept, accept-language, authorization, content-language, content-type");
  EXPECT_EQ(header(ok->headers, "Access-Control-Allow-Credentials"), "true");

  auto bad = cors.preflight(request("OPTIONS", {{"origin", "http://evil.example"},
                                                {"access-control-request-method", "DELETE"},
                                                {"access-control-request-headers", "X-Other"}}));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(bad->body, "Disallowed CORS origin, method, headers");
  EXPECT_EQ(header(bad->headers, "Access-Control-Allow-Origin"), "<absent>");

  HttpHeaders granted = cors.response_headers(request("POST", {{"origin", "http://good.example"}}));
  EXPECT_EQ(header(granted, "Access-Control-Allow-Origin"), "http://good.example");
  EXPECT_EQ(header(granted, "Access-Control-Allow-Credentials"), "true");
  EXPECT_TRUE(cors.response_headers(request("POST", {{"origin", "http://evil.example"}})).empty());
}

TEST(CorsPolicyTest, AWildcardOriginIsNamedForARequestWithCookies) {
  CorsPolicy cors{CorsOptions{.allow_credentials = true}};
  HttpHeaders headers = cors.response_headers(request("GET", {{"origin", "http://a.example"}, {"cookie", "s=1"}}));
  EXPECT_EQ(header(headers, "Access-Control-Allow-Origin"), "http://a.example");
  auto preflight =
      cors.preflight(request("OPTIONS", {{"origin", "http://a.example"}, {"access-control-request-method", "GET"}}));
  ASSERT_TRUE(preflight);
  EXPECT_EQ(header(preflight->headers, "Access-Control-Allow-Origin"), "http://a.example");
}

}  // namespace
}  // namespace omni::server
