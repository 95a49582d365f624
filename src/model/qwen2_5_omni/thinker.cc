#include "model/qwen2_5_omni/thinker.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "model/thinker_payload.h"

namespace omni::model::qwen2_5_omni {

namespace {

constexpr int32_t kImEndToken = 151645;

DecoderWeights thinker_weights() {
  DecoderWeights weights;
  weights.prefix = "thinker.model.";
  weights.lm_head = "thinker.lm_head.weight";
  return weights;
}

}  // namespace

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
  if (c.architecture.empty()) c.architecture = "Qwen2_5OmniForConditionalGeneration";
  if (c.dtype.empty()) {
    for (const char* key : {"dtype", "torch_dtype"}) {
      if (config.contains(key) && config[key].is_string()) {
        c.dtype = config[key].get<std::string>();
        break;
      }
    }
  }
  if (c.eos_token_ids.empty()) c.eos_token_ids = {kImEndToken};
  return c;
}

bool has_audio_output(const Json& config) {
  const auto audio_output = config.find("enable_audio_output");
  return config.contains("talker_config") &&
         (audio_output == config.end() || !audio_output->is_boolean() || audio_output->get<bool>());
}

Thinker::Thinker(const std::filesystem::path& dir, const Json& config, const CausalLmLoadOptions& options)
    : DecoderLm(dir, parse_thinker_text_config(config, (dir / "config.json").string()),
                DecoderVariant{.qk_norm = false, .qkv_bias = true}, thinker_weights(), options),
      ids_(parse_thinker_token_ids(config, (dir / "config.json").string())) {
  if (has_audio_output(config)) downstream_layer_ = this->config().num_hidden_layers + 1;
}

MultimodalPrompt Thinker::multimodal_prompt(std::span<const int32_t> prompt, const EncodedMedia& media) const {
  const int64_t hidden = config().hidden_size;
  const int merge = ids_.spatial_merge_size;
  const auto check = [&](const std::vector<tensor::Tensor>& rows, size_t expected, const char* kind,
                         const auto& rows_of) {
    if (rows.size() != expected) {
      throw_error(ErrorCode::kInvalidArgument, "{} {} row sets for {} {}s in the layout", rows.size(), kind, expected,
                  kind);
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      const tensor::Tensor& t = rows[i];
      if (t.dtype() != tensor::DType::kF32 || t.shape().size() != 2 || t.dim(0) != rows_of(i) || t.dim(1) != hidden) {
        throw_error(ErrorCode::kInvalidArgument, "{} {}: rows of shape {}, expected float32 [{}, {}]", kind, i,
                    tensor::shape_to_string(t.shape()), rows_of(i), hidden);
      }
    }
  };
  const PromptMedia& layout = media.layout;
  check(media.audios, layout.audio_rows.size(), "audio", [&](size_t i) { return layout.audio_rows[i]; });
  check(media.images, layout.images.size(), "image", [&](size_t i) { return layout.images[i].rows(merge); });
  check(media.videos, layout.videos.size(), "video", [&](size_t i) { return layout.videos[i].rows(merge); });

  MultimodalPrompt out;
  out.token_ids = expand_placeholders(prompt, ids_, layout);
  // Each placeholder takes its kind's next row (the rows of one kind concatenated in prompt order,
  // as the model's masked_scatter places them).
  struct Cursor {
    const std::vector<tensor::Tensor>* rows;
    size_t medium = 0;
    int64_t row = 0;
  };
  Cursor audio{&media.audios}, image{&media.images}, video{&media.videos};
  for (size_t i = 0; i < out.token_ids.size(); ++i) {
    const int32_t id = out.token_ids[i];
    Cursor* c = id == ids_.audio_token   ? &audio
                : id == ids_.image_token ? &image
                : id == ids_.video_token ? &video
                                         : nullptr;
    if (c == nullptr || c->medium >= c->rows->size()) continue;
    const tensor::Tensor& t = (*c->rows)[c->medium];
    const float* row = t.data<float>() + c->row * hidden;
    out.rows.push_back(static_cast<int32_t>(i));
    out.values.insert(out.values.end(), row, row + hidden);
    if (++c->row == t.dim(0)) {
      c->row = 0;
      ++c->medium;
    }
  }
  if (!layout.images.empty() || !layout.videos.empty()) {
    ThinkerPositions positions = thinker_positions(out.token_ids, ids_, layout);
    out.mrope_positions = std::move(positions.streams);
    out.rope_delta = positions.rope_delta;
  }
  return out;
}

std::vector<uint8_t> Thinker::encode_downstream_rows(const DownstreamRows& rows) const {
  // generate() hands the talker the prompt's embeddings with the media rows zeroed.
  std::vector<float> embeddings(rows.embeddings.begin(), rows.embeddings.end());
  const auto width = static_cast<size_t>(rows.hidden_size);
  for (size_t i = 0; i < rows.token_ids.size(); ++i) {
    const int32_t id = rows.token_ids[i];
    if (rows.first_position + static_cast<int>(i) < rows.prompt_length &&
        (id == ids_.audio_token || id == ids_.image_token || id == ids_.video_token)) {
      std::fill_n(embeddings.begin() + static_cast<int64_t>(i * width), width, 0.0f);
    }
  }
  DownstreamRows zeroed = rows;
  zeroed.embeddings = embeddings;
  return encode_thinker_payload(zeroed, {}, /*reply_hidden=*/true);
}

std::unique_ptr<DecoderLm> load_thinker(const std::filesystem::path& dir, const Json& config,
                                        const CausalLmLoadOptions& options) {
  return std::make_unique<Thinker>(dir, config, options);
}

void register_family(ModelRegistry& registry) {
  registry.add_causal_lm("Qwen2_5OmniForConditionalGeneration", load_thinker);
}

}  // namespace omni::model::qwen2_5_omni
