// What a served checkpoint tells the API about itself (voices, task types, sample rate), as its
// model family describes it (model/stage_model_registry.h's ModelDescriber), so that the server
// never reads checkpoint files. A plain value.
#pragma once

#include <string>
#include <vector>

namespace omni::model {

struct ModelFacts {
  std::vector<std::string> voices;      // built-in speakers, as the checkpoint spells them, sorted
  std::vector<std::string> task_types;  // the speech tasks it serves (e.g. "CustomVoice"), sorted
  int audio_sample_rate = 0;            // of its audio output; 0: no audio output, or unknown
  int audio_input_sample_rate = 0;      // of the audio it reads (chat audio parts); 0: it reads none

  // Adds `other` in: voices and task types unioned (sorted, once each), the first sample rate kept.
  void merge(const ModelFacts& other);

  bool operator==(const ModelFacts&) const = default;
};

}  // namespace omni::model
