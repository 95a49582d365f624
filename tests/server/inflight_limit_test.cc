// InflightLimit admits up to its limit, then refuses with 503 and Retry-After until places return.
#include "server/inflight_limit.h"

#include <gtest/gtest.h>

#include "server/openai_error.h"

namespace omni::server {
namespace {

TEST(InflightLimitTest, RefusesPastTheLimitWithRetryLaterUntilPlacesAreReleased) {
  InflightLimit limit(3);
  limit.acquire(2);
  limit.acquire(1);
  EXPECT_EQ(limit.in_flight(), 3u);
  try {
    limit.acquire(1);
    ADD_FAILURE() << "a fourth request was admitted";
  } catch (const RetryLater& e) {
    EXPECT_EQ(e.http_status(), 503);
    EXPECT_EQ(e.retry_after_seconds(), 1);
    EXPECT_NE(std::string(e.what()).find("limit of 3 requests in flight"), std::string::npos) << e.what();
    HttpResponse response = error_response(e);
    EXPECT_EQ(response.status, 503);
    ASSERT_EQ(response.headers.size(), 1u);
    EXPECT_EQ(response.headers[0], (std::pair<std::string, std::string>{"Retry-After", "1"}));
  }
  EXPECT_EQ(limit.in_flight(), 3u) << "a refused request takes no place";
  limit.release(2);
  limit.acquire(2);
  EXPECT_EQ(limit.in_flight(), 3u);
}

TEST(InflightLimitTest, ARequestLargerThanTheLimitIsABadRequest) {
  InflightLimit limit(2);
  try {
    limit.acquire(5);
    ADD_FAILURE() << "accepted";
  } catch (const RetryLater&) {
    ADD_FAILURE() << "retrying could never help";
  } catch (const Error& e) {
    EXPECT_EQ(e.http_status(), 400);
  }
  InflightLimit unbounded(0);
  unbounded.acquire(1'000'000);
  EXPECT_EQ(unbounded.in_flight(), 0u);
}

}  // namespace
}  // namespace omni::server
