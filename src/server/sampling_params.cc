#include "server/sampling_params.h"

#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "config/sampling_ranges.h"
#include "server/openai_error.h"
#include "server/request_fields.h"

namespace omni::server {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kDefaultCompletionMaxTokens = 16;

// A number (integer fields: an integer) within the range the engine accepts (config/sampling_ranges.h).
template <typename T>
std::optional<T> ranged(const FieldReader& fields, const config::SamplingRange& range, std::string_view name = {}) {
  if (name.empty()) name = range.field;
  std::optional<T> value;
  if constexpr (std::is_integral_v<T>) {
    value = fields.integer(name);
  } else {
    value = fields.number(name, -kInf, kInf);
  }
  if (value && !range.contains(static_cast<double>(*value))) {
    throw_invalid_field(fields.path(name), "'{}' must be {}, got {}", fields.path(name), range.rule, *value);
  }
  return value;
}

// `stop` within the engine's bounds (config/sampling_ranges.h), the error naming the entry at fault.
std::optional<std::vector<std::string>> read_stop(const Json& body, const FieldReader& fields) {
  auto stop = fields.strings("stop");
  if (!stop) return stop;
  if (stop->size() > static_cast<size_t>(config::kMaxStopStrings)) {
    throw_invalid_field("stop", "'stop' may hold at most {} strings, got {}", config::kMaxStopStrings, stop->size());
  }
  const bool list = body.at("stop").is_array();
  for (size_t i = 0; i < stop->size(); ++i) {
    const std::string& entry = (*stop)[i];
    std::string field = list ? fmt::format("stop[{}]", i) : std::string("stop");
    if (entry.empty()) throw_invalid_field(field, "'{}' is empty; stop strings must not be", field);
    if (entry.size() > static_cast<size_t>(config::kMaxStopStringBytes)) {
      throw_invalid_field(field, "'{}' is {} bytes long; a stop string may be at most {} bytes", field, entry.size(),
                          config::kMaxStopStringBytes);
    }
  }
  return stop;
}

}  // namespace

Json sampling_params_from_request(const Json& body, SamplingEndpoint endpoint) {
  FieldReader fields(body);
  Json params = Json::object();
  auto put = [&](const char* name, auto value) {
    if (value) params[name] = *value;
  };

  put("n", ranged<int64_t>(fields, config::kSamplingN));
  put("temperature", ranged<double>(fields, config::kTemperature));
  put("top_p", ranged<double>(fields, config::kTopP));
  put("top_k", ranged<int64_t>(fields, config::kTopK));
  put("min_p", ranged<double>(fields, config::kMinP));
  put("presence_penalty", ranged<double>(fields, config::kPresencePenalty));
  put("frequency_penalty", ranged<double>(fields, config::kFrequencyPenalty));
  put("repetition_penalty", ranged<double>(fields, config::kRepetitionPenalty));
  put("seed", fields.integer("seed"));
  put("min_tokens", ranged<int64_t>(fields, config::kMinTokens));
  put("stop", read_stop(body, fields));
  put("stop_token_ids", fields.integers("stop_token_ids"));
  put("ignore_eos", fields.boolean("ignore_eos"));
  put("include_stop_str_in_output", fields.boolean("include_stop_str_in_output"));
  put("skip_special_tokens", fields.boolean("skip_special_tokens"));
  // Read for their type only: the detokenizer keeps the spaces a byte-level vocabulary spells out,
  // and length_penalty only shapes beam search, which vLLM's sampling ignores it for too.
  fields.boolean("spaces_between_special_tokens");
  fields.number("length_penalty", -kInf, kInf);
  if (const Json* bias = fields.object("logit_bias")) {
    for (const auto& [token, value] : bias->items()) {
      if (!value.is_number()) {
        throw_invalid_field("logit_bias", "'logit_bias' values must be numbers, got {} for token {}", brief(value),
                            token);
      }
    }
    params["logit_bias"] = *bias;
  }
  // vLLM fields the engine does not implement: refused by name rather than silently ignored,
  // because each changes which tokens a client gets.
  for (const char* name : {"bad_words", "allowed_token_ids", "prompt_logprobs", "structured_outputs", "guided_json",
                           "guided_regex", "guided_choice", "guided_grammar"}) {
    if (fields.has(name)) throw_invalid_field(name, "'{}' is not supported by this server", name);
  }
  if (const Json* format = fields.object("response_format");
      format && FieldReader(*format, "response_format.").string("type") != "text") {
    throw_invalid_field("response_format", "'response_format' other than {{\"type\": \"text\"}} is not supported");
  }

  if (endpoint == SamplingEndpoint::kCompletions) {
    params["max_tokens"] = ranged<int64_t>(fields, config::kMaxTokens).value_or(kDefaultCompletionMaxTokens);
    put("logprobs", ranged<int64_t>(fields, config::kLogprobs));
  } else {
    auto max_tokens = ranged<int64_t>(fields, config::kMaxTokens, "max_completion_tokens");
    if (!max_tokens) max_tokens = ranged<int64_t>(fields, config::kMaxTokens);
    put("max_tokens", max_tokens);
    auto logprobs = fields.boolean("logprobs");
    auto top_logprobs = ranged<int64_t>(fields, config::kLogprobs, "top_logprobs");
    if (top_logprobs && !logprobs.value_or(false)) {
      throw_invalid_field("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    }
    if (logprobs.value_or(false)) params["logprobs"] = top_logprobs.value_or(0);
  }
  if (auto best_of = fields.integer("best_of", 1); best_of && *best_of != params.value("n", int64_t{1})) {
    // As in vLLM's V1 engine: no hidden extra sequences to rank.
    throw_invalid_field("best_of", "'best_of' ({}) must equal 'n' ({}): ranking extra sequences is not supported",
                        *best_of, params.value("n", int64_t{1}));
  }
  return params;
}

std::optional<int64_t> max_tokens_of(const Json& sampling_params) {
  auto it = sampling_params.find("max_tokens");
  if (it == sampling_params.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

void apply_truncate_prompt_tokens(const Json& body, std::vector<int32_t>& prompt_token_ids) {
  auto keep = FieldReader(body).integer("truncate_prompt_tokens", 1);
  if (keep && prompt_token_ids.size() > static_cast<size_t>(*keep)) {
    prompt_token_ids.erase(prompt_token_ids.begin(), prompt_token_ids.end() - *keep);
  }
}

}  // namespace omni::server
