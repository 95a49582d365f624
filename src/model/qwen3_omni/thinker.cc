#include "model/qwen3_omni/thinker.h"

#include <array>
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

// One multi_modal_data image or video entry's frames (their bytes kept in `storage`).
VisionInput vision_entry(const Json& entry, bool video, std::string& storage, std::string& where) {
  const char* kind = video ? "video" : "image";
  if (!entry.is_object()) throw_error(ErrorCode::kInvalidArgument, "{}: an {} entry must be an object", where, kind);
  if (auto s = entry.find("source"); s != entry.end() && s->is_string()) where = "'" + s->get<std::string>() + "'";
  const auto integer = [&](const char* key) {
    auto it = entry.find(key);
    if (it == entry.end() || !it->is_number_integer() || it->get<int64_t>() <= 0 || it->get<int64_t>() > (1 << 16)) {
      throw_error(ErrorCode::kInvalidArgument, "{}: an {} entry needs a positive integer '{}'", where, kind, key);
    }
    return it->get<int64_t>();
  };
  auto data = entry.find("data");
  if (data == entry.end() || !data->is_string()) {
    throw_error(ErrorCode::kInvalidArgument, "{}: an {} entry needs 'data' (base64 RGB bytes)", where, kind);
  }
  VisionInput in;
  in.video = video;
  in.frames.width = integer("width");
  in.frames.height = integer("height");
  const int64_t frames = video ? integer("frames") : 1;
  if (video) {
    auto fps = entry.find("fps");
    if (fps == entry.end() || !fps->is_number() || !(fps->get<double>() > 0)) {
      throw_error(ErrorCode::kInvalidArgument, "{}: a video entry needs a positive 'fps'", where);
    }
    in.fps = fps->get<double>();
  }
  storage = base64_decode(data->get<std::string>());
  const auto frame_bytes = static_cast<size_t>(in.frames.width * in.frames.height * 3);
  if (storage.size() != frame_bytes * static_cast<size_t>(frames)) {
    throw_error(ErrorCode::kInvalidArgument, "{}: {} bytes are not {} frame{} of {} x {} RGB pixels", where,
                storage.size(), frames, frames == 1 ? "" : "s", in.frames.width, in.frames.height);
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(storage.data());
  for (int64_t f = 0; f < frames; ++f) in.frames.frames.emplace_back(bytes + f * frame_bytes, frame_bytes);
  return in;
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
  // Random weights (a benchmark of the text model) come without the towers.
  if (options.random_weights) return;
  if (has_audio_input(dir)) audio_ = std::make_unique<ThinkerAudio>(dir, config);
  if (has_vision_input(dir)) vision_ = std::make_unique<ThinkerVision>(dir, config);
}

std::optional<MultimodalPrompt> Thinker::prepare_multimodal_prompt(std::span<const int32_t> prompt,
                                                                   const Json& additional_information) {
  auto media = additional_information.find(kMultiModalData);
  if (media == additional_information.end() || media->is_null() || media->empty()) return std::nullopt;
  if (!media->is_object()) {
    throw_error(ErrorCode::kInvalidArgument, "additional_information.{} must be an object", kMultiModalData);
  }
  for (const auto& [kind, items] : media->items()) {
    if (kind != "audio" && kind != "image" && kind != "video") {
      return CausalLm::prepare_multimodal_prompt(prompt, Json{{kMultiModalData, {{kind, items}}}});
    }
    if (!items.is_array()) throw_error(ErrorCode::kInvalidArgument, "multi_modal_data.{} must be a list", kind);
    if ((kind == "audio" && !audio_) || (kind != "audio" && !vision_)) {
      return CausalLm::prepare_multimodal_prompt(prompt, Json{{kMultiModalData, {{kind, items}}}});
    }
  }
  const Json none = Json::array();
  const Json& audio_entries = media->contains("audio") ? (*media)["audio"] : none;
  const Json& image_entries = media->contains("image") ? (*media)["image"] : none;
  const Json& video_entries = media->contains("video") ? (*media)["video"] : none;

  // Audio: the features of all of the request's audios together, then the tower.
  std::vector<int64_t> audio_counts;
  tensor::Tensor audio_rows_values;
  if (!audio_entries.empty()) {
    std::vector<std::vector<float>> samples;
    const int64_t shortest = audio_->features().config().n_fft / 2 + 1;
    for (size_t i = 0; i < audio_entries.size(); ++i) {
      std::string where = "multi_modal_data.audio[" + std::to_string(i) + "]";
      samples.push_back(entry_samples(audio_entries[i], audio_->sample_rate(), where));
      if (static_cast<int64_t>(samples.back().size()) < shortest) {
        throw_error(ErrorCode::kInvalidArgument, "{}: the audio is too short ({} samples at {} Hz; at least {})", where,
                    samples.back().size(), audio_->sample_rate(), shortest);
      }
      for (float x : samples.back()) {
        if (!std::isfinite(x))
          throw_error(ErrorCode::kInvalidArgument, "{}: the audio holds a non-finite sample", where);
      }
    }
    std::vector<std::span<const float>> views(samples.begin(), samples.end());
    EncodedAudio encoded = audio_->encode(views);
    audio_counts = std::move(encoded.rows_per_audio);
    audio_rows_values = std::move(encoded.rows);
  }

  // Images, then videos: each processed alone, encoded together per kind.
  const auto encode_vision = [&](const Json& entries, bool video) {
    std::vector<std::string> storage(entries.size());
    std::vector<VisionInput> inputs;
    std::vector<std::string> sources;
    for (size_t i = 0; i < entries.size(); ++i) {
      std::string where = std::string("multi_modal_data.") + (video ? "video[" : "image[") + std::to_string(i) + "]";
      inputs.push_back(vision_entry(entries[i], video, storage[i], where));
      sources.push_back(where);
    }
    return vision_ ? vision_->encode(inputs, ids_.position_id_per_seconds, sources) : EncodedVision{};
  };
  const EncodedVision images = encode_vision(image_entries, false);
  const EncodedVision videos = encode_vision(video_entries, true);

  MultimodalPrompt out;
  std::vector<int64_t> image_counts, video_counts;
  for (const VisionSegment& s : images.segments) image_counts.push_back(s.rows());
  for (const VisionSegment& s : videos.segments) video_counts.push_back(s.rows());
  out.token_ids = expand_placeholders(prompt, ids_.audio_token, audio_counts, "audio");
  out.token_ids = expand_placeholders(out.token_ids, ids_.image_token, image_counts, "image");
  out.token_ids = expand_placeholders(out.token_ids, ids_.video_token, video_counts, "video");

  // The rows in prompt order: each placeholder takes its kind's next row.
  const int64_t hidden = config().hidden_size;
  const size_t layers =
      vision_ && (!images.segments.empty() || !videos.segments.empty()) ? vision_->deepstack_layers() : 0;
  out.deepstack.resize(layers);
  size_t next_audio = 0;
  std::array<size_t, 2> next_medium{0, 0}, next_row{0, 0};
  for (size_t i = 0; i < out.token_ids.size(); ++i) {
    const int32_t id = out.token_ids[i];
    const float* row = nullptr;
    const EncodedVision* kind = nullptr;
    int k = 0;
    if (id == ids_.audio_token && audio_rows_values.defined()) {
      row = audio_rows_values.data<float>() + next_audio++ * hidden;
    } else if (id == ids_.image_token && !images.segments.empty()) {
      kind = &images;
      k = 0;
    } else if (id == ids_.video_token && !videos.segments.empty()) {
      kind = &videos;
      k = 1;
    } else {
      continue;
    }
    out.rows.push_back(static_cast<int32_t>(i));
    if (kind != nullptr) {
      const size_t m = next_medium[k], r = next_row[k];
      row = kind->rows[m].data<float>() + r * hidden;
      for (size_t d = 0; d < layers; ++d) {
        const float* extra = kind->deepstack[m][d].data<float>() + r * hidden;
        out.deepstack[d].insert(out.deepstack[d].end(), extra, extra + hidden);
      }
      if (++next_row[k] == static_cast<size_t>(kind->segments[m].rows())) {
        next_row[k] = 0;
        ++next_medium[k];
      }
    } else {
      for (size_t d = 0; d < layers; ++d) out.deepstack[d].insert(out.deepstack[d].end(), hidden, 0.0f);
    }
    out.values.insert(out.values.end(), row, row + hidden);
  }
  if (!images.segments.empty() || !videos.segments.empty()) {
    ThinkerPositions positions = thinker_positions(out.token_ids, ids_, images.segments, videos.segments);
    out.mrope_positions = std::move(positions.streams);
    out.rope_delta = positions.rope_delta;
  }
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
