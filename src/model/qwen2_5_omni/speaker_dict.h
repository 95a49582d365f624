// The built-in voices of Qwen2.5-Omni: spk_dict.pt beside the checkpoint, a torch.save of
// {speaker name: {"cond": x-vector [enc_emb_dim], "ref_mel": [1, frames, mel_dim], "bos_token": id}}
// ("Chelsie", "Ethan" as released), read without Python (model/torch_pickle.h). The token2wav DiT
// conditions on cond and ref_mel; the talker starts its codes with bos_token.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace omni::model::qwen2_5_omni {

struct Speaker {
  std::vector<float> xvector;  // "cond"
  std::vector<float> ref_mel;  // "ref_mel" without its batch dimension, [ref_frames, mel_dim] row-major
  int64_t ref_frames = 0;
  int64_t bos_token = 0;
};

class SpeakerDict {
 public:
  // Reads `path`; each speaker's tensors must have the shapes enc_emb_dim and mel_dim give.
  // kNotFound for a missing file; kLoadFailed naming the file, the speaker and the field otherwise.
  static SpeakerDict load(const std::filesystem::path& path, int enc_emb_dim, int mel_dim);

  // Names as stored (case kept), sorted.
  std::vector<std::string> names() const;
  // The speaker `name` matched without regard to case; nullptr when there is none.
  const Speaker* find(const std::string& name) const;

 private:
  std::map<std::string, Speaker> speakers_;
};

}  // namespace omni::model::qwen2_5_omni
