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
  const float temperature = params.temperature;
  // Dividing by the temperature keeps the order of the logits, so top_k selects on the raw values
  // and min_p compares scaled values against the scaled maximum (p / p_max = exp(s - s_max)); only
  // the tokens that survive both are scaled and exponentiated.
  float threshold = -std::numeric_limits<float>::infinity();
  float max_logit;
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < vocab) {
    // The k-th largest logit, from a min-heap of the k largest seen so far.
    heap_.assign(logits.begin(), logits.begin() + params.top_k);
    std::make_heap(heap_.begin(), heap_.end(), std::greater<float>());
    for (size_t v = params.top_k; v < vocab; ++v) {
      if (logits[v] <= heap_.front()) continue;
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<float>());
      heap_.back() = logits[v];
      std::push_heap(heap_.begin(), heap_.end(), std::greater<float>());
    }
    threshold = heap_.front();
    max_logit = *std::max_element(heap_.begin(), heap_.end());
  } else {
    max_logit = *std::max_element(logits.begin(), logits.end());
  }
  const float max_scaled = max_logit / temperature;
  const float min_p_floor = params.min_p > 0 ? max_scaled + std::log(params.min_p) : kNegInf;

  // Under top_p, a trained model's nucleus is usually a few tokens close to the most likely one. If
  // the tokens with at least kNucleusFloor of the top probability hold top_p of the mass, the
  // nucleus lies among them (it is the most-likely-first prefix reaching that mass), so only they
  // need to be collected and sorted; otherwise a second pass collects every token.
  constexpr float kNucleusFloor = 1.0f / 1024;
  auto collect = [&](float floor) {
    candidates_.clear();
    double total = 0;
    for (size_t v = 0; v < vocab; ++v) {
      if (logits[v] < threshold) continue;
      float scaled = logits[v] / temperature;
      if (!(scaled >= min_p_floor)) continue;
      float p = std::exp(scaled - max_scaled);
      if (!(p > 0)) continue;
      total += p;
      if (p >= floor) candidates_.emplace_back(p, static_cast<int32_t>(v));
    }
    return total;
  };
  double total = collect(params.top_p < 1.0f ? kNucleusFloor : 0.0f);
  // Every logit masked or not a number: nothing to draw from, so fall back to the argmax rule.
  if (candidates_.empty() || !std::isfinite(total)) return argmax(logits);
  if (params.top_p < 1.0f) {
    double collected = 0;
    for (const auto& c : candidates_) collected += c.first;
    if (collected < static_cast<double>(params.top_p) * total) collect(0.0f);
  }

  size_t kept = candidates_.size();
  double kept_mass = total;
  if (params.top_p < 1.0f) {
    // top_p needs the candidates in order of probability, but only as far as the nucleus reaches:
    // sort a growing head until its mass reaches top_p. Everything past `sorted` is less likely than
    // what precedes it, so each round only selects and sorts the next slice.
    auto more_likely = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
      return a.first > b.first || (a.first == b.first && a.second < b.second);
    };
    double mass_limit = static_cast<double>(params.top_p) * total;
    kept = 0;
    kept_mass = 0;
    size_t sorted = 0;
    while (true) {
      size_t head = std::min(std::max<size_t>(64, sorted * 4), candidates_.size());
      auto begin = candidates_.begin() + sorted;
      std::nth_element(begin, candidates_.begin() + head - 1, candidates_.end(), more_likely);
      std::sort(begin, candidates_.begin() + head, more_likely);
      sorted = head;
      while (kept < sorted && (kept == 0 || kept_mass < mass_limit)) kept_mass += candidates_[kept++].first;
      if (kept < sorted || kept_mass >= mass_limit || sorted == candidates_.size()) break;
    }
  }

  double target = rng.uniform() * kept_mass;
  double cumulative = 0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += candidates_[i].first;
    if (cumulative > target) return candidates_[i].second;
  }
  return candidates_[kept - 1].second;  // rounding left the target at the very end
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
