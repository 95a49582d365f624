#include "engine/engine_loop.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "base/error.h"
#include "engine_test_util.h"
#include "fake_causal_lm.h"

namespace omni::engine {
namespace {

using testing::FakeCausalLm;
using testing::Results;

EngineConfig small_config() {
  EngineConfig c;
  c.num_gpu_blocks_override = 64;
  c.max_model_len = 256;
  c.max_num_seqs = 8;
  return c;
}

EngineRequest request(int i, int max_tokens = 20) {
  std::vector<int32_t> prompt;
  for (int t = 0; t < 5 + 7 * i; ++t) prompt.push_back((t * 31 + i) % 90);
  return {"req-" + std::to_string(i),
          prompt,
          {.temperature = 0.9f, .seed = 1000 + i, .ignore_eos = true, .max_tokens = max_tokens}};
}

TEST(EngineLoopTest, RequestsFromManyThreadsGetTheirOwnCompleteStreams) {
  Results expected;
  {
    FakeCausalLm model;
    ArEngine engine(model, small_config());
    for (int i = 0; i < 12; ++i) engine.add_request(request(i));
    expected = testing::run_to_completion(engine);
  }

  FakeCausalLm model;
  ArEngine engine(model, small_config());
  EngineLoop loop(engine);
  std::vector<Results> per_thread(4);
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      std::vector<std::unique_ptr<OutputStream>> streams;
      for (int i = t; i < 12; i += 4) {
        streams.push_back(std::make_unique<OutputStream>());
        loop.submit(request(i), streams.back()->writer());
      }
      for (auto& stream : streams) {
        int outputs = 0;
        std::optional<RequestOutput> last;
        while (auto out = stream->next()) {
          if (last) EXPECT_FALSE(last->finished) << "only the last output is final";
          testing::collect(*out, per_thread[t]);
          ++outputs;
          last = std::move(out);
        }
        EXPECT_TRUE(last && last->finished);
        EXPECT_GT(outputs, 1) << "outputs stream step by step";
      }
    });
  }
  for (std::thread& c : clients) c.join();
  Results got;
  for (const Results& r : per_thread) got.insert(r.begin(), r.end());
  ASSERT_EQ(got.size(), expected.size());
  for (const auto& [key, want] : expected) EXPECT_EQ(got.at(key).token_ids, want.token_ids) << key.first;
}

TEST(EngineLoopTest, RejectsBadRequestsOnTheCallersThreadAndDuplicatesThroughTheStream) {
  FakeCausalLm model;
  // The first forward holds the loop until `released`, so that what the test queues meanwhile
  // reaches a request that is certainly still running.
  std::mutex mutex;
  std::condition_variable cv;
  bool entered = false, released = false;
  model.on_forward = [&] {
    std::unique_lock lock(mutex);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  };
  ArEngine engine(model, small_config());
  EngineLoop loop(engine);
  EngineRequest bad = request(0);
  bad.sampling_params.temperature = -1;
  EXPECT_THROW(loop.submit(bad, [](RequestOutput) {}), Error);

  OutputStream first, second;
  loop.submit(request(1, 200), first.writer());
  {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return entered; });
  }
  loop.submit(request(1, 200), second.writer());
  loop.abort("req-1");
  {
    std::lock_guard lock(mutex);
    released = true;
  }
  cv.notify_all();

  auto refused = second.next();
  ASSERT_TRUE(refused);
  EXPECT_TRUE(refused->finished);
  EXPECT_NE(refused->error.find("already in the engine"), std::string::npos) << refused->error;
  EXPECT_FALSE(second.next());
  std::optional<RequestOutput> last;
  int outputs = 0;
  while (auto out = first.next()) {
    last = std::move(out);
    ++outputs;
  }
  ASSERT_TRUE(last);
  EXPECT_EQ(outputs, 2) << "one token, then the abort";
  EXPECT_TRUE(last->finished);
  EXPECT_EQ(last->completions.at(0).finish_reason, FinishReason::kAbort);
}

TEST(EngineLoopTest, StopAbortsWhatIsUnfinishedAndFreesTheCache) {
  FakeCausalLm model;
  ArEngine engine(model, small_config());
  std::vector<OutputStream> streams(3);
  {
    EngineLoop loop(engine);
    for (int i = 0; i < 3; ++i) loop.submit(request(i, 250 - 5 - 7 * i), streams[i].writer());
    loop.stop();
    EXPECT_THROW(loop.submit(request(5), [](RequestOutput) {}), Error);
  }
  for (OutputStream& s : streams) {
    std::optional<RequestOutput> last;
    while (auto out = s.next()) last = std::move(out);
    ASSERT_TRUE(last);
    EXPECT_TRUE(last->finished);
  }
  EXPECT_FALSE(engine.has_unfinished_requests());
  EXPECT_EQ(engine.stats().num_free_blocks, engine.stats().num_blocks);
}

}  // namespace
}  // namespace omni::engine
