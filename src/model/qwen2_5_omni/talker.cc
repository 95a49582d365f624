#include "model/qwen2_5_omni/talker.h"

#include <algorithm>

#include "base/error.h"
#include "model/model_dtype.h"
#include "model/safetensors.h"
#include "tensor/dtype.h"
#include "tensor/ops.h"

namespace omni::model::qwen2_5_omni {

namespace {

using tensor::DType;
using tensor::Tensor;

}  // namespace

TalkerConfig parse_talker_config(const Json& config, const std::string& source) {
  auto talker = config.find("talker_config");
  if (talker == config.end() || !talker->is_object()) {
    throw_error(ErrorCode::kLoadFailed, "{}: missing field 'talker_config'", source);
  }
  TalkerConfig c;
  c.text = parse_text_model_config(*talker, source + ": talker_config");
  if (c.text.dtype.empty()) {
    for (const char* key : {"dtype", "torch_dtype"}) {
      if (config.contains(key) && config[key].is_string()) {
        c.text.dtype = config[key].get<std::string>();
        break;
      }
    }
  }
  auto embedding = talker->find("embedding_size");
  if (embedding == talker->end() || !embedding->is_number_integer() || embedding->get<int>() <= 0) {
    throw_error(ErrorCode::kLoadFailed, "{}: 'talker_config.embedding_size' must be a positive integer", source);
  }
  c.embedding_size = embedding->get<int>();
  const auto read = [&](const char* key, int32_t& out, bool codec) {
    auto it = talker->find(key);
    if (it == talker->end() || it->is_null()) return;
    if (!it->is_number_integer()) {
      throw_error(ErrorCode::kLoadFailed, "{}: 'talker_config.{}' must be a token id, got {}", source, key, it->dump());
    }
    out = it->get<int32_t>();
    if (codec && (out < 0 || out >= c.text.vocab_size)) {
      throw_error(ErrorCode::kLoadFailed, "{}: 'talker_config.{}' {} is outside the codec vocabulary of {}", source,
                  key, out, c.text.vocab_size);
    }
  };
  read("tts_codec_start_token_id", c.codec_bos, true);
  read("tts_codec_end_token_id", c.codec_eos, true);
  read("tts_codec_pad_token_id", c.codec_pad, true);
  read("tts_codec_mask_token_id", c.codec_mask, true);
  read("tts_text_start_token_id", c.text_bos, false);
  read("tts_text_end_token_id", c.text_eos, false);
  read("tts_text_pad_token_id", c.text_pad, false);
  // The talker stops at codec pad or end (generate's talker_eos_token_id).
  c.text.eos_token_ids = {c.codec_pad, c.codec_eos};
  return c;
}

Talker::Talker(const std::filesystem::path& dir, const TalkerConfig& config, tensor::Device device, bool random_weights,
               std::optional<tensor::DType> dtype)
    : config_(config) {
  DecoderWeights weights;
  weights.prefix = "talker.model.";
  weights.has_embedding_and_head = false;
  stack_ = std::make_unique<DecoderLm>(
      dir, config_.text, DecoderVariant{.qk_norm = false, .qkv_bias = true}, weights,
      CausalLmLoadOptions{.device = device, .dtype = dtype, .random_weights = random_weights});
  const Checkpoint ckpt = random_weights ? Checkpoint::random(dir, 0) : Checkpoint::open(dir);
  const int64_t v = config_.text.vocab_size, e = config_.embedding_size, h = config_.text.hidden_size;
  codec_embeddings_ = ckpt.load_f32("talker.model.embed_tokens.weight", {v, e});
  proj_w_ = stack_->place(ckpt.load_f32("talker.thinker_to_talker_proj.weight", {h, e}));
  proj_b_ = stack_->place(ckpt.load_f32("talker.thinker_to_talker_proj.bias", {h}));
  codec_head_ = stack_->place(ckpt.load_f32("talker.codec_head.weight", {v, h}));
}

void Talker::add_codec_embedding(int32_t id, float* row) const {
  if (id < 0 || id >= config_.text.vocab_size) {
    throw_error(ErrorCode::kInvalidArgument, "codec id {} is outside the talker's codec vocabulary of {}", id,
                config_.text.vocab_size);
  }
  const int64_t e = config_.embedding_size;
  const float* from = codec_embeddings_.data<float>() + id * e;
  for (int64_t i = 0; i < e; ++i) row[i] += from[i];
}

void Talker::forward(const ForwardBatch& batch, const Tensor& rows, std::vector<float>& logits) {
  const int64_t e = config_.embedding_size, h = config_.text.hidden_size;
  if (rows.rank() != 2 || rows.dim(1) != e || rows.dtype() != DType::kF32) {
    throw_error(ErrorCode::kInvalidArgument, "the talker takes float32 rows of {} values, not {}", e,
                tensor::shape_to_string(rows.shape()));
  }
  const Tensor placed = stack_->place(rows);
  Tensor projected = Tensor::empty({rows.dim(0), h}, stack_->dtype(), stack_->device());
  tensor::ops::linear(placed, proj_w_, proj_b_, projected);
  Tensor hidden;
  stack_->forward_embeds(batch, projected, hidden);
  Tensor out = Tensor::empty({hidden.dim(0), config_.text.vocab_size}, stack_->dtype(), stack_->device());
  tensor::ops::linear(hidden, codec_head_, Tensor(), out);
  const Tensor host = out.device().type == tensor::DeviceType::kCpu ? out : out.to(tensor::Device::cpu());
  logits.resize(static_cast<size_t>(host.numel()));
  if (!logits.empty()) tensor::convert_to_f32(host.dtype(), host.raw(), logits.data(), logits.size());
}

}  // namespace omni::model::qwen2_5_omni
