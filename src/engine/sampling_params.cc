#include "engine/sampling_params.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "base/error.h"
#include "config/sampling_ranges.h"

namespace omni::engine {

namespace {

[[noreturn]] void reject(std::string_view name, std::string_view rule, std::string_view got) {
  throw_error(ErrorCode::kInvalidArgument, "sampling parameter '{}' must be {}, got {}", name, rule, got);
}

// The value as the caller's type prints it (a float's 1.1, not its double's 1.100000023841858).
template <typename T>
void check(const config::SamplingRange& range, T value) {
  if (!range.contains(static_cast<double>(value))) reject(range.field, range.rule, fmt::format("{}", value));
}

}  // namespace

SamplingParams validated(SamplingParams params) {
  check(config::kSamplingN, params.n);
  check(config::kTemperature, params.temperature);
  check(config::kTopP, params.top_p);
  check(config::kTopK, params.top_k);
  check(config::kMinP, params.min_p);
  check(config::kPresencePenalty, params.presence_penalty);
  check(config::kFrequencyPenalty, params.frequency_penalty);
  check(config::kRepetitionPenalty, params.repetition_penalty);
  for (const auto& [token, bias] : params.logit_bias) {
    if (!std::isfinite(bias)) reject("logit_bias", "finite", fmt::format("{} for token {}", bias, token));
  }
  if (params.stop.size() > static_cast<size_t>(config::kMaxStopStrings)) {
    reject("stop", fmt::format("at most {} strings", config::kMaxStopStrings),
           fmt::format("{} strings", params.stop.size()));
  }
  for (const std::string& s : params.stop) {
    if (s.empty()) reject("stop", "a list of non-empty strings", "an empty string");
    if (s.size() > static_cast<size_t>(config::kMaxStopStringBytes)) {
      reject("stop", fmt::format("strings of at most {} bytes", config::kMaxStopStringBytes),
             fmt::format("one of {} bytes", s.size()));
    }
  }
  if (params.max_tokens) check(config::kMaxTokens, *params.max_tokens);
  check(config::kMinTokens, params.min_tokens);
  if (params.max_tokens && params.min_tokens > *params.max_tokens) {
    reject("min_tokens", fmt::format("<= max_tokens ({})", *params.max_tokens), std::to_string(params.min_tokens));
  }
  if (params.logprobs) check(config::kLogprobs, *params.logprobs);

  if (params.greedy()) {
    params.top_p = 1.0f;
    params.top_k = 0;
    params.min_p = 0.0f;
  } else if (params.temperature < kMinTemperature) {
    params.temperature = kMinTemperature;
  }
  if (params.top_k == -1) params.top_k = 0;
  return params;
}

namespace {

// How to read one field: each reader throws with the field's name on a type mismatch.
struct FieldReader {
  std::string_view name;
  std::function<void(const Json&, SamplingParams&)> read;
};

[[noreturn]] void wrong_type(std::string_view source, std::string_view field, std::string_view expected,
                             const Json& value) {
  throw_error(ErrorCode::kInvalidArgument, "{}: sampling parameter '{}' must be {}, got {}", source, field, expected,
              value.dump());
}

template <typename Int>
Int read_int(const Json& v, std::string_view source, std::string_view field) {
  if (!v.is_number_integer()) wrong_type(source, field, "an integer", v);
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<Int>::max())) wrong_type(source, field, "in range", v);
    return static_cast<Int>(u);
  }
  auto i = v.get<int64_t>();
  if (i < std::numeric_limits<Int>::min() || i > std::numeric_limits<Int>::max()) {
    wrong_type(source, field, "in range", v);
  }
  return static_cast<Int>(i);
}

float read_float(const Json& v, std::string_view source, std::string_view field) {
  if (!v.is_number()) wrong_type(source, field, "a number", v);
  return v.get<float>();
}

bool read_bool(const Json& v, std::string_view source, std::string_view field) {
  if (!v.is_boolean()) wrong_type(source, field, "true or false", v);
  return v.get<bool>();
}

std::vector<FieldReader> field_readers(std::string_view source) {
  static const SamplingParams kDefault;
  auto s = std::string(source);
  return {
      {"n", [s](const Json& v, SamplingParams& p) { p.n = v.is_null() ? kDefault.n : read_int<int>(v, s, "n"); }},
      {"temperature",
       [s](const Json& v, SamplingParams& p) {
         p.temperature = v.is_null() ? kDefault.temperature : read_float(v, s, "temperature");
       }},
      {"top_p",
       [s](const Json& v, SamplingParams& p) { p.top_p = v.is_null() ? kDefault.top_p : read_float(v, s, "top_p"); }},
      {"top_k", [s](const Json& v,
                    SamplingParams& p) { p.top_k = v.is_null() ? kDefault.top_k : read_int<int>(v, s, "top_k"); }},
      {"min_p",
       [s](const Json& v, SamplingParams& p) { p.min_p = v.is_null() ? kDefault.min_p : read_float(v, s, "min_p"); }},
      {"presence_penalty",
       [s](const Json& v, SamplingParams& p) {
         p.presence_penalty = v.is_null() ? kDefault.presence_penalty : read_float(v, s, "presence_penalty");
       }},
      {"frequency_penalty",
       [s](const Json& v, SamplingParams& p) {
         p.frequency_penalty = v.is_null() ? kDefault.frequency_penalty : read_float(v, s, "frequency_penalty");
       }},
      {"repetition_penalty",
       [s](const Json& v, SamplingParams& p) {
         p.repetition_penalty = v.is_null() ? kDefault.repetition_penalty : read_float(v, s, "repetition_penalty");
       }},
      {"logit_bias",
       [s](const Json& v, SamplingParams& p) {
         p.logit_bias.clear();
         if (v.is_null()) return;
         if (!v.is_object()) wrong_type(s, "logit_bias", "an object mapping token ids to biases", v);
         for (const auto& [key, bias] : v.items()) {
           int32_t token = 0;
           try {
             size_t used = 0;
             long parsed = std::stol(key, &used);
             if (used != key.size() || parsed < std::numeric_limits<int32_t>::min() ||
                 parsed > std::numeric_limits<int32_t>::max()) {
               throw std::invalid_argument(key);
             }
             token = static_cast<int32_t>(parsed);
           } catch (const std::logic_error&) {
             throw_error(ErrorCode::kInvalidArgument,
                         "{}: sampling parameter 'logit_bias' has key \"{}\", not a token id", s, key);
           }
           p.logit_bias[token] = read_float(bias, s, "logit_bias");
         }
       }},
      {"seed",
       [s](const Json& v, SamplingParams& p) {
         p.seed = v.is_null() ? std::nullopt : std::optional<int64_t>(read_int<int64_t>(v, s, "seed"));
       }},
      {"stop",
       [s](const Json& v, SamplingParams& p) {
         p.stop.clear();
         if (v.is_null()) return;
         if (v.is_string()) {
           p.stop.push_back(v.get<std::string>());
           return;
         }
         if (!v.is_array()) wrong_type(s, "stop", "a string or a list of strings", v);
         for (const Json& item : v) {
           if (!item.is_string()) wrong_type(s, "stop", "a string or a list of strings", v);
           p.stop.push_back(item.get<std::string>());
         }
       }},
      {"stop_token_ids",
       [s](const Json& v, SamplingParams& p) {
         p.stop_token_ids.clear();
         if (v.is_null()) return;
         if (!v.is_array()) wrong_type(s, "stop_token_ids", "a list of token ids", v);
         for (const Json& item : v) p.stop_token_ids.push_back(read_int<int32_t>(item, s, "stop_token_ids"));
       }},
      {"include_stop_str_in_output",
       [s](const Json& v, SamplingParams& p) {
         p.include_stop_str_in_output =
             v.is_null() ? kDefault.include_stop_str_in_output : read_bool(v, s, "include_stop_str_in_output");
       }},
      {"ignore_eos",
       [s](const Json& v, SamplingParams& p) {
         p.ignore_eos = v.is_null() ? kDefault.ignore_eos : read_bool(v, s, "ignore_eos");
       }},
      {"min_tokens",
       [s](const Json& v, SamplingParams& p) {
         p.min_tokens = v.is_null() ? kDefault.min_tokens : read_int<int>(v, s, "min_tokens");
       }},
      {"max_tokens",
       [s](const Json& v, SamplingParams& p) {
         p.max_tokens = v.is_null() ? std::nullopt : std::optional<int>(read_int<int>(v, s, "max_tokens"));
       }},
      {"logprobs",
       [s](const Json& v, SamplingParams& p) {
         p.logprobs = v.is_null() ? std::nullopt : std::optional<int>(read_int<int>(v, s, "logprobs"));
       }},
      {"skip_special_tokens",
       [s](const Json& v, SamplingParams& p) {
         p.skip_special_tokens = v.is_null() ? kDefault.skip_special_tokens : read_bool(v, s, "skip_special_tokens");
       }},
  };
}

}  // namespace

SamplingParams sampling_params_from_json(const Json& object, SamplingParams base, std::string_view source) {
  if (!object.is_object()) wrong_type(source, "sampling_params", "an object", object);
  std::vector<FieldReader> readers = field_readers(source);
  for (const auto& item : object.items()) {
    const std::string& key = item.key();
    auto it = std::find_if(readers.begin(), readers.end(), [&](const FieldReader& r) { return r.name == key; });
    if (it == readers.end()) {
      std::string known;
      for (const FieldReader& r : readers) known += (known.empty() ? "" : ", ") + std::string(r.name);
      throw_error(ErrorCode::kInvalidArgument, "{}: unknown sampling parameter '{}' (known: {})", source, key, known);
    }
    it->read(item.value(), base);
  }
  return base;
}

}  // namespace omni::engine
