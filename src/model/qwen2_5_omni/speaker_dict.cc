#include "model/qwen2_5_omni/speaker_dict.h"

#include <algorithm>
#include <cctype>

#include "base/error.h"
#include "model/torch_pickle.h"

namespace omni::model::qwen2_5_omni {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

SpeakerDict SpeakerDict::load(const std::filesystem::path& path, int enc_emb_dim, int mel_dim) {
  const PickleValue::Ptr root = load_torch_file(path);
  const std::string file = path.string();
  if (root->kind != PickleValue::Kind::kDict) {
    throw_error(ErrorCode::kLoadFailed, "{}: expected a dict of speakers, found a {}", file,
                PickleValue::kind_name(root->kind));
  }
  SpeakerDict dict;
  for (const auto& [key, value] : root->entries) {
    if (key->kind != PickleValue::Kind::kString || value->kind != PickleValue::Kind::kDict) {
      throw_error(ErrorCode::kLoadFailed, "{}: every entry must map a speaker name to a dict", file);
    }
    const std::string& name = key->text;
    auto field = [&](const char* f, PickleValue::Kind kind) -> const PickleValue& {
      const PickleValue* v = value->find(f);
      if (v == nullptr || v->kind != kind) {
        throw_error(ErrorCode::kLoadFailed, "{}: speaker '{}': field '{}' is {} (expected a {})", file, name, f,
                    v == nullptr ? "missing" : PickleValue::kind_name(v->kind), PickleValue::kind_name(kind));
      }
      return *v;
    };
    Speaker s;
    const tensor::Tensor& cond = field("cond", PickleValue::Kind::kTensor).tensor;
    if (cond.numel() != enc_emb_dim) {
      throw_error(ErrorCode::kLoadFailed, "{}: speaker '{}': 'cond' has shape {}, expected {} values", file, name,
                  tensor::shape_to_string(cond.shape()), enc_emb_dim);
    }
    s.xvector.assign(cond.data<float>(), cond.data<float>() + cond.numel());
    const tensor::Tensor& mel = field("ref_mel", PickleValue::Kind::kTensor).tensor;
    const bool batched = mel.rank() == 3 && mel.dim(0) == 1;
    if (!(batched || mel.rank() == 2) || mel.dim(-1) != mel_dim || mel.dim(-2) < 1) {
      throw_error(ErrorCode::kLoadFailed, "{}: speaker '{}': 'ref_mel' has shape {}, expected [1, frames, {}]", file,
                  name, tensor::shape_to_string(mel.shape()), mel_dim);
    }
    s.ref_frames = mel.dim(-2);
    s.ref_mel.assign(mel.data<float>(), mel.data<float>() + mel.numel());
    s.bos_token = field("bos_token", PickleValue::Kind::kInt).integer;
    if (dict.find(name) != nullptr) {
      throw_error(ErrorCode::kLoadFailed, "{}: two speakers are named '{}' (names match without case)", file, name);
    }
    dict.speakers_[name] = std::move(s);
  }
  if (dict.speakers_.empty()) throw_error(ErrorCode::kLoadFailed, "{}: the speaker dict is empty", file);
  return dict;
}

std::vector<std::string> SpeakerDict::names() const {
  std::vector<std::string> names;
  for (const auto& [name, speaker] : speakers_) names.push_back(name);
  return names;
}

const Speaker* SpeakerDict::find(const std::string& name) const {
  const std::string wanted = lower(name);
  for (const auto& [n, speaker] : speakers_) {
    if (lower(n) == wanted) return &speaker;
  }
  return nullptr;
}

}  // namespace omni::model::qwen2_5_omni
