// The Qwen2.5-Omni thinker LM and talker against transformers 5.17 on the tiny checkpoint that
// scripts/reference/qwen2_5_omni_thinker_talker_reference.py writes (CPU float32): prompt
// positions, thinker prompt logits, greedy reply, talker prompt rows and prefill logits, greedy
// codes, and get_rope_index on synthetic media prompts. Skips while the files are absent.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "base/json.h"
#include "model/qwen2_5_omni/talker_prompt.h"
#include "model/qwen2_5_omni/thinker.h"
#include "tensor/npy.h"

namespace omni::model::qwen2_5_omni {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen2_5_omni/thinker_talker";

#define SKIP_WITHOUT_REFERENCE()                                                                           \
  if (!fs::exists(kDir / "reference.json"))                                                                \
  GTEST_SKIP() << "run scripts/reference/qwen2_5_omni_thinker_talker_reference.py --out " << kDir.string() \
               << " on the GPU machine"

void expect_close(std::span<const float> got, const tensor::Tensor& want, const char* what) {
  ASSERT_EQ(got.size(), static_cast<size_t>(want.numel())) << what;
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::abs(double(want.data<float>()[i])));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want.data<float>()[i], 1e-4 * std::max(scale, 1.0)) << what << " " << i;
}

TEST(Qwen25OmniReference, SyntheticMediaPositions) {
  SKIP_WITHOUT_REFERENCE();
  const Json ref = read_json_file(kDir / "reference.json");
  const ThinkerTokenIds ids = parse_thinker_token_ids(read_json_file(kDir / "config.json"), "config.json");
  for (const Json& c : ref["rope_cases"]) {
    PromptMedia media;
    for (const Json& g : c["image_grid_thw"]) media.images.push_back({g[0], g[1], g[2], 1.0});
    for (size_t i = 0; i < c["video_grid_thw"].size(); ++i) {
      const Json& g = c["video_grid_thw"][i];
      media.videos.push_back({g[0], g[1], g[2], c["video_second_per_grid"][i].get<double>()});
    }
    media.audio_rows = c["audio_rows"].get<std::vector<int64_t>>();
    media.use_audio_in_video = c["use_audio_in_video"];
    const std::vector<int32_t> expanded = c["input_ids"].get<std::vector<int32_t>>();
    const ThinkerPositions p = thinker_positions(expanded, ids, media);
    const std::vector<float> want = c["positions"].get<std::vector<float>>();
    EXPECT_EQ(p.streams, want) << c["name"];
    EXPECT_EQ(p.rope_delta, c["rope_delta"].get<float>()) << c["name"];
    if (c.contains("prompt_ids")) {
      EXPECT_EQ(expand_placeholders(c["prompt_ids"].get<std::vector<int32_t>>(), ids, media), expanded) << c["name"];
    }
  }
}

TEST(Qwen25OmniReference, TextChatThinkerAndTalker) {
  SKIP_WITHOUT_REFERENCE();
  const Json ref = read_json_file(kDir / "reference.json");
  const Json config = read_json_file(kDir / "config.json");
  Thinker thinker(kDir, config, {});
  const std::vector<int32_t> prompt = ref["input_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> reply = ref["reply"].get<std::vector<int32_t>>();
  const auto l = static_cast<int32_t>(prompt.size());
  // Plain positions for text (get_rope_index's).
  const ThinkerPositions positions = thinker_positions(prompt, thinker.token_ids(), {});
  EXPECT_EQ(positions.streams, ref["positions"].get<std::vector<float>>());
  // Prompt logits, then the reply greedily, capturing every row the talker reads.
  thinker.init_kv_cache(16);
  std::vector<int32_t> all = prompt;
  std::vector<float> embeddings, hidden;
  std::vector<int32_t> got;
  int32_t next = 0;
  for (size_t step = 0; step < reply.size(); ++step) {
    ForwardBatch b;
    const int32_t start = step == 0 ? 0 : l + static_cast<int32_t>(step) - 1;
    const int32_t len = step == 0 ? l : 1;
    b.token_ids.assign(all.begin() + start, all.begin() + start + len);
    for (int32_t i = 0; i < len; ++i) b.positions.push_back(start + i);
    b.seqs = {{.query_start = 0, .query_len = len, .context_len = start, .block_table = {0, 1, 2, 3, 4, 5, 6, 7}}};
    b.all_logits = step == 0;
    ForwardBatch::HiddenCapture capture{.layer = *thinker.downstream_layer()};
    b.capture = &capture;
    std::vector<float> logits;
    thinker.forward(b, logits);
    if (step == 0) expect_close(logits, tensor::load_npy(kDir / "thinker_prompt_logits.npy"), "thinker logits");
    const int64_t v = thinker.info().vocab_size;
    const float* last = logits.data() + (logits.size() / v - 1) * v;
    next = static_cast<int32_t>(std::max_element(last, last + v) - last);
    got.push_back(next);
    all.push_back(next);
    embeddings.insert(embeddings.end(), capture.embeddings.begin(), capture.embeddings.end());
    hidden.insert(hidden.end(), capture.hidden.begin(), capture.hidden.end());
  }
  EXPECT_EQ(got, reply);
  // The talker's prompt rows and prefill logits (the last reply token never ran).
  const TalkerConfig tc = parse_talker_config(config, "config.json");
  Talker talker(kDir, tc, tensor::Device::cpu());
  const int64_t w = tc.embedding_size;
  TalkerTextRows text;
  const std::vector<float> rows3 =
      thinker.embed_on_host(std::vector<int32_t>{ref["speaker_bos"].get<int32_t>(), tc.text_eos, tc.text_pad});
  text.speaker_bos.assign(rows3.begin(), rows3.begin() + w);
  text.text_eos.assign(rows3.begin() + w, rows3.begin() + 2 * w);
  text.text_pad.assign(rows3.begin() + 2 * w, rows3.end());
  std::vector<int32_t> ran(all.begin(), all.end() - 1);
  const TalkerPrompt p = build_talker_prompt(
      talker, {.ids = ran, .prompt_length = prompt.size(), .width = w, .embeddings = embeddings, .hidden = hidden},
      text);
  expect_close(std::span<const float>(p.rows.data<float>(), p.rows.numel()),
               tensor::load_npy(kDir / "talker_prompt_embeds.npy"), "talker prompt rows");
  talker.stack().init_kv_cache(64);
  const int32_t rows = static_cast<int32_t>(p.rows.dim(0));
  std::vector<int32_t> table;
  for (int32_t i = 0; i < 64; ++i) table.push_back(i);
  std::vector<int32_t> codes;
  int32_t code = 0;
  for (int step = 0; step < ref["codes"].size() + 1 && step < 512; ++step) {
    ForwardBatch b;
    tensor::Tensor input = p.rows;
    if (step == 0) {
      for (int32_t i = 0; i < rows; ++i) b.positions.push_back(i);
      b.seqs = {{.query_start = 0, .query_len = rows, .context_len = 0, .block_table = table}};
      b.all_logits = true;
    } else {
      input = tensor::Tensor::empty({1, w}, tensor::DType::kF32);
      std::copy_n(talker_text_row(p, text, step - 1), w, input.data<float>());
      talker.add_codec_embedding(code, input.data<float>());
      b.positions = {rows + step - 1};
      b.seqs = {{.query_start = 0, .query_len = 1, .context_len = rows + step - 1, .block_table = table}};
    }
    std::vector<float> logits;
    talker.forward(b, input, logits);
    if (step == 0) expect_close(logits, tensor::load_npy(kDir / "talker_prefill_logits.npy"), "talker logits");
    const int64_t v = tc.text.vocab_size;
    std::vector<float> last(logits.end() - v, logits.end());
    last[tc.codec_bos] = -INFINITY;
    code = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    if (code == tc.codec_eos || code == tc.codec_pad) break;
    codes.push_back(code);
  }
  EXPECT_EQ(codes, ref["codes"].get<std::vector<int32_t>>());
}

}  // namespace
}  // namespace omni::model::qwen2_5_omni
