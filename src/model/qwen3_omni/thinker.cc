#include "model/qwen3_omni/thinker.h"

#include <cmath>
#include <cstring>
#include <string>

#include "base/base64.h"
#include "base/error.h"
#include "model/safetensors.h"

namespace omni::model::qwen3_omni {

TextModelConfig parse_thinker_text_config(const Json& config, const std::string& source) {
  auto thinker = config.find("thinker_config");
  if (thinker == config.end() || !thinker->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing field 'thinker_config'", source);
  }
  auto text = thinker->find("text_config");
  if (text == thinker->end() || !text->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing field 'thinker_config.text_config'", source);
  }
  TextModelConfig c = parse_text_model_config(*text, source + ": thinker_config.text_config");
  if (c.architecture.empty()) c.architecture = "Qwen3OmniMoeForConditionalGeneration";
  if (c.dtype.empty()) {
    // The dtype is recorded at the top level (v4 torch_dtype, v5 dtype).
    for (const char* key : {"dtype", "torch_dtype"}) {
      if (config.contains(key) && config[key].is_string()) {
        c.dtype = config[key].get<std::string>();
        break;
      }
    }
  }
  if (c.eos_token_ids.empty()) {
    auto im_end = config.find("im_end_token_id");
    if (im_end != config.end()) c.eos_token_ids = parse_token_ids(*im_end, source + ": im_end_token_id");
  }
  return c;
}

namespace {

DecoderWeights thinker_weights() {
  DecoderWeights weights;
  weights.prefix = "thinker.model.";
  weights.lm_head = "thinker.lm_head.weight";
  return weights;
}

// One multi_modal_data.audio entry's samples; `where` names it in errors.
std::vector<float> entry_samples(const Json& entry, int sample_rate, std::string& where) {
  if (!entry.is_object()) throw_error(ErrorCode::kInvalidArgument, "{}: an audio entry must be an object", where);
  if (auto s = entry.find("source"); s != entry.end() && s->is_string()) where = "'" + s->get<std::string>() + "'";
  auto data = entry.find("data");
  auto rate = entry.find("sample_rate");
  if (data == entry.end() || !data->is_string() || rate == entry.end() || !rate->is_number_integer()) {
    throw_error(ErrorCode::kInvalidArgument, "{}: an audio entry needs 'data' (base64 float32) and 'sample_rate'",
                where);
  }
  if (rate->get<int>() != sample_rate) {
    throw_error(ErrorCode::kInvalidArgument, "{}: the audio is at {} Hz; the model takes {} Hz", where,
                rate->get<int>(), sample_rate);
  }
  const std::string bytes = base64_decode(data->get<std::string>());
  if (bytes.size() % sizeof(float) != 0) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} bytes of samples are not whole float32 values", where,
                bytes.size());
  }
  std::vector<float> samples(bytes.size() / sizeof(float));
  std::memcpy(samples.data(), bytes.data(), bytes.size());
  return samples;
}

}  // namespace

bool has_audio_input(const std::filesystem::path& dir) {
  if (!std::filesystem::exists(dir / "preprocessor_config.json") &&
      !std::filesystem::exists(dir / "processor_config.json")) {
    return false;
  }
  return Checkpoint::open(dir).contains("thinker.audio_tower.conv2d1.weight");
}

Thinker::Thinker(const std::filesystem::path& dir, const Json& config, const CausalLmLoadOptions& options)
    : DecoderLm(dir, parse_thinker_text_config(config, (dir / "config.json").string()),
                DecoderVariant{.qk_norm = true, .qkv_bias = false}, thinker_weights(), options),
      ids_(parse_thinker_token_ids(config, (dir / "config.json").string())) {
  if (has_audio_input(dir)) audio_ = std::make_unique<ThinkerAudio>(dir, config);
}

std::optional<MultimodalPrompt> Thinker::prepare_multimodal_prompt(std::span<const int32_t> prompt,
                                                                   const Json& additional_information) {
  auto media = additional_information.find(kMultiModalData);
  if (media == additional_information.end() || media->is_null() || media->empty()) return std::nullopt;
  if (!media->is_object()) {
    throw_error(ErrorCode::kInvalidArgument, "additional_information.{} must be an object", kMultiModalData);
  }
  for (const auto& [kind, items] : media->items()) {
    if (kind != "audio") return CausalLm::prepare_multimodal_prompt(prompt, Json{{kMultiModalData, {{kind, items}}}});
  }
  const Json& entries = (*media)["audio"];
  if (!entries.is_array()) throw_error(ErrorCode::kInvalidArgument, "multi_modal_data.audio must be a list");
  if (!audio_) return CausalLm::prepare_multimodal_prompt(prompt, additional_information);
  std::vector<std::vector<float>> samples;
  const int64_t shortest = audio_->features().config().n_fft / 2 + 1;
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string where = "multi_modal_data.audio[" + std::to_string(i) + "]";
    samples.push_back(entry_samples(entries[i], audio_->sample_rate(), where));
    if (static_cast<int64_t>(samples.back().size()) < shortest) {
      throw_error(ErrorCode::kInvalidArgument, "{}: the audio is too short ({} samples at {} Hz; at least {})", where,
                  samples.back().size(), audio_->sample_rate(), shortest);
    }
    for (float x : samples.back()) {
      if (!std::isfinite(x)) throw_error(ErrorCode::kInvalidArgument, "{}: the audio holds a non-finite sample", where);
    }
  }
  std::vector<std::span<const float>> views(samples.begin(), samples.end());
  const EncodedAudio encoded = audio_->encode(views);
  MultimodalPrompt out;
  out.token_ids = expand_audio_placeholders(prompt, ids_.audio_token, encoded.rows_per_audio);
  out.rows = audio_rows(out.token_ids, ids_.audio_token);
  out.values.assign(encoded.rows.data<float>(), encoded.rows.data<float>() + encoded.rows.numel());
  return out;
}

std::unique_ptr<DecoderLm> load_thinker(const std::filesystem::path& dir, const Json& config,
                                        const CausalLmLoadOptions& options) {
  return std::make_unique<Thinker>(dir, config, options);
}

void register_family(ModelRegistry& registry) {
  registry.add_causal_lm("Qwen3OmniMoeForConditionalGeneration", load_thinker);
}

}  // namespace omni::model::qwen3_omni
