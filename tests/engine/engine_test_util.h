// Helpers for driving an ArEngine in tests: run requests to completion and collect each completion's
// whole output from the streamed deltas.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "engine/ar_engine.h"

namespace omni::engine::testing {

struct Completed {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<std::string> text_deltas;
  std::optional<FinishReason> finish_reason;
  StopReason stop_reason;
  int num_logprobs = 0;
  bool operator==(const Completed& o) const {
    return token_ids == o.token_ids && text == o.text && finish_reason == o.finish_reason &&
           stop_reason == o.stop_reason;
  }
};

// A prompt of `length` ids in [0, below), the same for the same seed.
inline std::vector<int32_t> random_prompt(int length, uint64_t seed, int below) {
  std::mt19937_64 gen(seed);
  std::vector<int32_t> tokens(length);
  for (int32_t& t : tokens) t = static_cast<int32_t>(gen() % static_cast<uint64_t>(below));
  return tokens;
}

// (request id, completion index) -> its collected output.
using Results = std::map<std::pair<std::string, int>, Completed>;

inline void collect(const RequestOutput& out, Results& results) {
  for (const CompletionOutput& c : out.completions) {
    Completed& r = results[{out.request_id, c.index}];
    r.token_ids.insert(r.token_ids.end(), c.token_ids.begin(), c.token_ids.end());
    r.text += c.text;
    if (!c.text.empty()) r.text_deltas.push_back(c.text);
    r.num_logprobs += static_cast<int>(c.logprobs.size());
    if (c.finish_reason) {
      r.finish_reason = c.finish_reason;
      r.stop_reason = c.stop_reason;
    }
  }
}

// The message of the kInvalidArgument error add_request throws for `request`; "accepted" when it
// throws none.
inline std::string rejection(ArEngine& engine, EngineRequest request) {
  try {
    engine.add_request(std::move(request));
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return std::string(e.what());
  }
  return "accepted";
}

// Steps the engine until no request is left (at most `max_steps`).
inline Results run_to_completion(ArEngine& engine, int max_steps = 100000) {
  Results results;
  for (int i = 0; i < max_steps && engine.has_unfinished_requests(); ++i) {
    for (const RequestOutput& out : engine.step()) collect(out, results);
  }
  return results;
}

}  // namespace omni::engine::testing
