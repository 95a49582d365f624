#include "model/qwen3_omni/thinker.h"

#include <array>
#include <cmath>
#include <cstring>
#include <string>

#include "base/base64.h"
#include "base/error.h"
#include "model/qwen3_omni/talker_config.h"
#include "model/thinker_payload.h"
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

// The processor kwargs of a request the stage applies (additional_information.mm_processor_kwargs,
// which the server checked): min_pixels and max_pixels, which count only together.
VisionPixelBudget pixel_budget_of(const Json& additional_information) {
  VisionPixelBudget budget;
  auto kwargs = additional_information.find(kMmProcessorKwargs);
  if (kwargs == additional_information.end() || kwargs->is_null()) return budget;
  if (!kwargs->is_object()) {
    throw_error(ErrorCode::kInvalidArgument, "additional_information.{} must be an object", kMmProcessorKwargs);
  }
  const auto read = [&](const char* key, int64_t& out) {
    auto it = kwargs->find(key);
    if (it == kwargs->end() || it->is_null()) return;
    if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
      throw_error(ErrorCode::kInvalidArgument, "{}.{} must be a positive integer, got {}", kMmProcessorKwargs, key,
                  it->dump());
    }
    out = it->get<int64_t>();
  };
  read("min_pixels", budget.min_pixels);
  read("max_pixels", budget.max_pixels);
  if (budget.min_pixels > 0 && budget.max_pixels > 0 && budget.min_pixels > budget.max_pixels) {
    throw_error(ErrorCode::kInvalidArgument, "{}: min_pixels {} exceeds max_pixels {}", kMmProcessorKwargs,
                budget.min_pixels, budget.max_pixels);
  }
  if (budget.min_pixels == 0 || budget.max_pixels == 0) budget = {};  // one alone: as transformers, none
  return budget;
}

// Whether `dir` has a processor config and a tower: `first_tensor` in its checkpoint, or, for a
// folder without weight files (random weights), `config_field` in config.json's thinker_config.
bool has_tower(const std::filesystem::path& dir, const std::string& config_field, const std::string& first_tensor) {
  if (!std::filesystem::exists(dir / "preprocessor_config.json") &&
      !std::filesystem::exists(dir / "processor_config.json")) {
    return false;
  }
  if (Checkpoint::has_files(dir)) return Checkpoint::open(dir).contains(first_tensor);
  if (!std::filesystem::exists(dir / "config.json")) return false;
  const Json config = read_json_file(dir / "config.json");
  const auto thinker = config.find("thinker_config");
  return thinker != config.end() && thinker->is_object() && thinker->contains(config_field);
}

}  // namespace

bool has_audio_input(const std::filesystem::path& dir) {
  return has_tower(dir, "audio_config", "thinker.audio_tower.conv2d1.weight");
}

bool has_vision_input(const std::filesystem::path& dir) {
  return has_tower(dir, "vision_config", "thinker.visual.patch_embed.proj.weight");
}

Thinker::Thinker(const std::filesystem::path& dir, const Json& config, const CausalLmLoadOptions& options)
    : DecoderLm(dir, parse_thinker_text_config(config, (dir / "config.json").string()),
                DecoderVariant{.qk_norm = true, .qkv_bias = false}, thinker_weights(), options),
      ids_(parse_thinker_token_ids(config, (dir / "config.json").string())) {
  read_end_token_ids(dir, ids_);
  const auto audio_output = config.find("enable_audio_output");
  if (config.contains("talker_config") &&
      (audio_output == config.end() || !audio_output->is_boolean() || audio_output->get<bool>())) {
    const TalkerConfig talker = parse_talker_config(config, (dir / "config.json").string());
    downstream_layer_ = talker.accept_hidden_layer;
    special_ids_ = {talker.talker.tts_bos_token_id, talker.talker.tts_eos_token_id, talker.talker.tts_pad_token_id};
  }
  // The towers run where the text model does, in its dtype; random weights make random towers.
  const bool audio = has_audio_input(dir), vision = has_vision_input(dir);
  if (!audio && !vision) return;
  const Checkpoint ckpt = options.random_weights ? Checkpoint::random(dir, 0) : Checkpoint::open(dir);
  const Placement towers{device(), dtype()};
  if (audio) audio_ = std::make_unique<ThinkerAudio>(dir, config, ckpt, towers);
  if (vision) vision_ = std::make_unique<ThinkerVision>(dir, config, ckpt, towers);
}

std::vector<uint8_t> Thinker::encode_downstream_rows(const DownstreamRows& rows) const {
  if (rows.first_position == 0 && specials_.empty()) specials_ = embed_on_host(special_ids_);
  return encode_thinker_payload(rows, specials_);
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
  const VisionPixelBudget budget = pixel_budget_of(additional_information);

  // Audio: the request's audios and the audio tracks of its videos (use_audio_in_video), in the
  // order their placeholders come in the prompt, as the processor takes them: their features
  // together (padded to the longest), then the tower.
  std::vector<std::vector<float>> standalone, tracks(video_entries.size());
  const auto read_audio = [&](const Json& entry, std::string where) {
    if (!audio_) {
      throw_error(ErrorCode::kInvalidArgument, "{}: the checkpoint reads no audio (no audio tower)", where);
    }
    std::vector<float> samples = entry_samples(entry, audio_->sample_rate(), where);
    const auto shortest = static_cast<size_t>(audio_->features().config().n_fft / 2 + 1);
    if (samples.size() < shortest) {
      throw_error(ErrorCode::kInvalidArgument, "{}: the audio is too short ({} samples at {} Hz; at least {})", where,
                  samples.size(), audio_->sample_rate(), shortest);
    }
    for (float x : samples) {
      if (!std::isfinite(x)) throw_error(ErrorCode::kInvalidArgument, "{}: the audio holds a non-finite sample", where);
    }
    return samples;
  };
  for (size_t i = 0; i < audio_entries.size(); ++i)
    standalone.push_back(read_audio(audio_entries[i], "multi_modal_data.audio[" + std::to_string(i) + "]"));
  for (size_t i = 0; i < video_entries.size(); ++i) {
    if (video_entries[i].is_object() && video_entries[i].contains("audio")) {
      tracks[i] = read_audio(video_entries[i]["audio"], "multi_modal_data.video[" + std::to_string(i) + "].audio");
    }
  }
  // (kind, index) of each audio in prompt order: 0 a standalone audio, 1 a video's track.
  std::vector<std::pair<int, size_t>> audio_order;
  {
    size_t next_audio = 0, next_video = 0;
    for (int32_t id : prompt) {
      if (id == ids_.audio_token && next_audio < standalone.size()) audio_order.emplace_back(0, next_audio++);
      if (id == ids_.video_token && next_video < tracks.size()) {
        if (!tracks[next_video].empty()) audio_order.emplace_back(1, next_video);
        ++next_video;
      }
    }
    // Entries without a placeholder still count (expand_placeholders names the mismatch below).
    for (; next_audio < standalone.size(); ++next_audio) audio_order.emplace_back(0, next_audio);
  }
  std::vector<int64_t> audio_counts(standalone.size(), 0), track_rows(tracks.size(), 0);
  tensor::Tensor audio_rows_values;
  if (!audio_order.empty()) {
    std::vector<std::span<const float>> views;
    for (auto [kind, i] : audio_order) views.emplace_back(kind == 0 ? standalone[i] : tracks[i]);
    EncodedAudio encoded = audio_->encode(views);
    for (size_t k = 0; k < audio_order.size(); ++k) {
      auto [kind, i] = audio_order[k];
      (kind == 0 ? audio_counts[i] : track_rows[i]) = encoded.rows_per_audio[k];
    }
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
    return vision_ ? vision_->encode(inputs, sources, budget) : EncodedVision{};
  };
  const EncodedVision images = encode_vision(image_entries, false);
  EncodedVision videos = encode_vision(video_entries, true);
  for (size_t i = 0; i < videos.segments.size(); ++i) videos.segments[i].audio_rows = track_rows[i];

  MultimodalPrompt out;
  out.token_ids = expand_placeholders(prompt, ids_.audio_token, audio_counts, "audio");
  out.token_ids = expand_vision_placeholders(out.token_ids, ids_, ids_.image_token, images.segments, "image");
  out.token_ids = expand_vision_placeholders(out.token_ids, ids_, ids_.video_token, videos.segments, "video");

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
