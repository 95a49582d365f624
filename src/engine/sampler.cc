#include "engine/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

#include "tensor/sample_row.h"

namespace omni::engine {

namespace {

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

tensor::ops::SamplingParams device_sampling_params(const SamplingParams& params, std::span<const int32_t> prompt,
                                                   std::span<const int32_t> output, const SamplingRng& rng) {
  tensor::ops::SamplingParams p;
  p.temperature = params.greedy() ? 0.0f : params.temperature;
  p.top_k = params.top_k > 0 ? params.top_k : 0;
  p.top_p = params.top_p;
  p.min_p = params.min_p;
  p.repetition_penalty = params.repetition_penalty;
  p.presence_penalty = params.presence_penalty;
  p.frequency_penalty = params.frequency_penalty;
  p.seed = rng.seed();
  p.step = rng.step();
  p.prompt_tokens = prompt;
  p.output_tokens = output;
  return p;
}

SampledToken Sampler::sample(std::span<float> logits, const SamplingState& state) {
  const SamplingParams& params = state.params;
  if (params.logprobs) raw_logits_.assign(logits.begin(), logits.end());

  apply_min_tokens(logits, static_cast<int>(state.output_token_ids.size()), params.min_tokens, state.stop_token_ids);
  apply_logit_bias(logits, params.logit_bias);
  apply_penalties(logits, state.prompt_token_ids, state.output_token_ids, params.repetition_penalty,
                  params.frequency_penalty, params.presence_penalty, penalty_scratch_);

  SampledToken out;
  if (params.greedy()) {
    out.token_id = argmax(logits);
  } else {
    // The penalties are in the row already: sample_row reads only the filters and the draw.
    out.token_id = tensor::sample_row(logits, device_sampling_params(params, {}, {}, state.rng));
    state.rng.skip();
  }
  if (params.logprobs) fill_logprobs(raw_logits_, *params.logprobs, out);
  return out;
}

void Sampler::fill_logprobs(std::span<const float> raw, int num_top, SampledToken& out) {
  float max_logit = *std::max_element(raw.begin(), raw.end());
  double sum = 0;
  for (float l : raw) sum += std::exp(static_cast<double>(l) - max_logit);
  float log_normaliser = max_logit + static_cast<float>(std::log(sum));

  float chosen = raw[out.token_id];
  out.logprob = chosen - log_normaliser;
  out.rank = static_cast<int>(std::count_if(raw.begin(), raw.end(), [&](float l) { return l >= chosen; }));

  // A small sorted list beats sorting the vocabulary for the at most kMaxLogprobs entries asked for.
  out.top_logprobs.clear();
  if (num_top == 0) return;
  std::vector<std::pair<float, int32_t>> top;
  top.reserve(num_top + 1);
  for (size_t v = 0; v < raw.size(); ++v) {
    if (static_cast<int>(top.size()) == num_top && raw[v] <= top.back().first) continue;
    auto pos = std::find_if(top.begin(), top.end(), [&](const auto& e) { return raw[v] > e.first; });
    top.insert(pos, {raw[v], static_cast<int32_t>(v)});
    if (static_cast<int>(top.size()) > num_top) top.pop_back();
  }
  for (const auto& [logit, token] : top) out.top_logprobs.push_back({token, logit - log_normaliser});
}

}  // namespace omni::engine
