#include "engine/sampler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>

namespace omni::engine {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

SampledToken Sampler::sample(std::span<float> logits, const SamplingState& state) {
  const SamplingParams& params = state.params;
  if (params.logprobs) raw_logits_.assign(logits.begin(), logits.end());

  apply_min_tokens(logits, static_cast<int>(state.output_token_ids.size()), params.min_tokens, state.stop_token_ids);
  apply_logit_bias(logits, params.logit_bias);
  apply_penalties(logits, state.prompt_token_ids, state.output_token_ids, params.repetition_penalty,
                  params.frequency_penalty, params.presence_penalty, penalty_scratch_);

  SampledToken out;
  out.token_id = params.greedy() ? argmax(logits) : draw(logits, params, state.rng);
  if (params.logprobs) fill_logprobs(raw_logits_, *params.logprobs, out);
  return out;
}

int32_t Sampler::draw(std::span<float> logits, const SamplingParams& params, SamplingRng& rng) {
  const size_t vocab = logits.size();
  for (float& l : logits) l /= params.temperature;

  float max_logit = *std::max_element(logits.begin(), logits.end());
  if (params.min_p > 0) {
    // p / p_max = exp(l - l_max), so this compares probabilities without normalising.
    for (float& l : logits) {
      if (std::exp(l - max_logit) < params.min_p) l = kNegInf;
    }
  }

  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < vocab) {
    values_.assign(logits.begin(), logits.end());
    auto kth = values_.begin() + (params.top_k - 1);
    std::nth_element(values_.begin(), kth, values_.end(), std::greater<float>());
    float threshold = *kth;
    for (float& l : logits) {
      if (l < threshold) l = kNegInf;
    }
  }

  probs_.resize(vocab);
  double total = 0;
  for (size_t v = 0; v < vocab; ++v) {
    probs_[v] = std::exp(logits[v] - max_logit);
    total += probs_[v];
  }

  // Every logit masked or not a number: nothing to draw from, so fall back to the argmax rule.
  if (!(total > 0) || !std::isfinite(total)) return argmax(logits);

  double u = rng.uniform();
  if (params.top_p >= 1.0f) {
    double target = u * total;
    double cumulative = 0;
    int32_t last = -1;
    for (size_t v = 0; v < vocab; ++v) {
      if (probs_[v] <= 0) continue;
      cumulative += probs_[v];
      last = static_cast<int32_t>(v);
      if (cumulative > target) return last;
    }
    return last;  // rounding left the target at the very end
  }

  // top_p needs the tokens in order of probability, but only as far as the nucleus reaches: sort a
  // growing head of the candidates until its mass reaches top_p.
  candidates_.clear();
  for (size_t v = 0; v < vocab; ++v) {
    if (probs_[v] > 0) candidates_.emplace_back(probs_[v], static_cast<int32_t>(v));
  }
  auto more_likely = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  double mass_limit = static_cast<double>(params.top_p) * total;
  size_t kept = 0;
  double kept_mass = 0;
  size_t sorted = 0;
  while (true) {
    // Everything past `sorted` is less likely than what precedes it, so each round only selects and
    // sorts the next slice.
    size_t head = std::min(std::max<size_t>(64, sorted * 4), candidates_.size());
    auto begin = candidates_.begin() + sorted;
    std::nth_element(begin, candidates_.begin() + head - 1, candidates_.end(), more_likely);
    std::sort(begin, candidates_.begin() + head, more_likely);
    sorted = head;
    while (kept < sorted && (kept == 0 || kept_mass < mass_limit)) kept_mass += candidates_[kept++].first;
    if (kept < sorted || kept_mass >= mass_limit || sorted == candidates_.size()) break;
  }

  double target = u * kept_mass;
  double cumulative = 0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += candidates_[i].first;
    if (cumulative > target) return candidates_[i].second;
  }
  return candidates_[kept - 1].second;
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
