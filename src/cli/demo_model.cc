#include "cli/demo_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "base/error.h"
#include "model/qwen3_omni/random_checkpoint.h"
#include "model/qwen3_tts/random_checkpoint.h"
#include "model/qwen3_tts/random_codec.h"
#include "model/qwen3_tts/random_speech_encoder.h"
#include "model/random_checkpoint.h"
#include "model/z_image/random_checkpoint.h"

namespace omni::cli {

namespace {

namespace fs = std::filesystem;

struct DemoModelOptions {
  std::string arch = "qwen3";
  std::string out;
  std::string tokenizer_dir = OMNI_QWEN3_TOKENIZER_DIR;
  uint64_t seed = 0;
  std::string shape = "demo";         // qwen3_tts talker: demo, 0.6b, 1.7b
  std::string codec_shape = "small";  // qwen3_tts codec decoder: small, released
  std::string task = "custom_voice";  // qwen3_tts: custom_voice, base (voice cloning)
};

// Qwen3's real vocabulary (the tokenizer's ids must all be valid) with a tiny body: the tied
// embedding dominates (151936 x 128 bf16 = 39 MB), and a step costs about one 128 x 151936
// matrix-vector product, so it serves quickly on a couple of CPU cores.
model::TextModelConfig demo_qwen3_shapes() {
  model::TextModelConfig c = model::qwen3_0_6b_shapes();
  c.hidden_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.intermediate_size = 384;
  c.eos_token_ids = {151645, 151643};  // <|im_end|>, <|endoftext|>, as Qwen3's generation_config.json
  return c;
}

void require_tokenizer_files(const fs::path& tokenizer_dir) {
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    if (!fs::is_regular_file(tokenizer_dir / file)) {
      throw_error(ErrorCode::kNotFound,
                  "--tokenizer-from {}: no {} (run scripts/install-deps, which installs the Qwen3 tokenizer "
                  "files, or point --tokenizer-from at a Qwen3 checkpoint)",
                  tokenizer_dir.string(), file);
    }
  }
}

void write_demo_qwen3(const fs::path& out, const DemoModelOptions& options) {
  const fs::path tokenizer_dir(options.tokenizer_dir);
  model::write_random_qwen3_checkpoint(out, demo_qwen3_shapes(), options.seed, tensor::DType::kBF16);
  for (const char* file : {"tokenizer.json", "tokenizer_config.json"}) {
    std::error_code ec;
    fs::copy_file(tokenizer_dir / file, out / file, fs::copy_options::overwrite_existing, ec);
    if (ec)
      throw_error(ErrorCode::kInternal, "cannot copy {} to {}: {}", (tokenizer_dir / file).string(), out.string(),
                  ec.message());
  }
}

// Qwen3-TTS-12Hz CustomVoice in its released layout: a small talker (real text and codec
// vocabularies, a few real speakers) at the root and a small codec decoder (real frame geometry,
// 1920 samples per frame at 24 kHz) in speech_tokenizer/. The codec's seed differs from the
// talker's so the two weight sets are not drawn from the same stream.
// --shape picks the talker's dims (the released 0.6B and 1.7B ones for benchmarks) and
// --codec-shape the decoder's.
void write_demo_qwen3_tts(const fs::path& out, const DemoModelOptions& options) {
  model::qwen3_tts::RandomTalkerShapes talker = options.shape == "1.7b"   ? model::qwen3_tts::qwen3_tts_1_7b_shapes()
                                                : options.shape == "0.6b" ? model::qwen3_tts::qwen3_tts_0_6b_shapes()
                                                                          : model::qwen3_tts::qwen3_tts_demo_shapes();
  if (options.task == "base") {
    const int hidden = talker.talker.hidden_size;
    talker.speaker_encoder = options.shape == "demo" ? model::qwen3_tts::demo_speaker_encoder(hidden)
                                                     : model::qwen3_tts::released_speaker_encoder(hidden);
  }
  model::qwen3_tts::write_random_talker_checkpoint(out, talker, options.seed, tensor::DType::kBF16,
                                                   options.tokenizer_dir);
  const model::qwen3_tts::CodecDecoderConfig codec = options.codec_shape == "released"
                                                         ? model::qwen3_tts::CodecDecoderConfig{}
                                                         : model::qwen3_tts::small_codec_shapes();
  // A Base checkpoint clones in context too: its speech tokenizer gets an encoder, whose codes fit
  // both the codec's and the talker's codebooks.
  std::optional<model::qwen3_tts::SpeechEncoderConfig> encoder;
  if (options.task == "base") {
    encoder = options.codec_shape == "released" ? model::qwen3_tts::SpeechEncoderConfig{}
                                                : model::qwen3_tts::small_speech_encoder_shapes(
                                                      std::min(codec.codebook_size, talker.code_predictor.vocab_size));
  }
  model::qwen3_tts::write_random_codec_checkpoint(out / "speech_tokenizer", codec, options.seed + 1,
                                                  encoder ? &*encoder : nullptr);
}

int run_demo_model(const DemoModelOptions& options) {
  require_tokenizer_files(options.tokenizer_dir);
  const fs::path out(options.out);
  if (options.arch == "z_image" && options.shape != "demo" && options.shape != "released") {
    throw_error(ErrorCode::kInvalidArgument, "--shape {} with --arch z_image: demo or released", options.shape);
  }
  if (options.arch != "qwen3_tts" && ((options.arch != "z_image" && options.shape != "demo") ||
                                      options.codec_shape != "small" || options.task != "custom_voice")) {
    throw_error(ErrorCode::kInvalidArgument,
                "--shape is for --arch qwen3_tts and z_image, --codec-shape and --task for qwen3_tts");
  }
  if (options.arch == "qwen3") {
    write_demo_qwen3(out, options);
  } else if (options.arch == "qwen3_tts") {
    write_demo_qwen3_tts(out, options);
  } else if (options.arch == "qwen3_omni") {
    // The Instruct layout (enable_audio_output: its pipeline has the talker and code2wav stages).
    model::qwen3_omni::write_random_checkpoint(out, model::qwen3_omni::demo_thinker_shapes(), options.seed,
                                               tensor::DType::kBF16, options.tokenizer_dir, true);
  } else if (options.arch == "z_image") {
    model::z_image::write_random_checkpoint(out, options.seed, options.tokenizer_dir, options.shape == "released");
  } else {
    throw_error(ErrorCode::kInvalidArgument,
                "--arch {}: the demo model exists for qwen3, qwen3_tts, qwen3_omni and z_image", options.arch);
  }
  spdlog::info("wrote a random-weight {} checkpoint (its output is noise) to {}", options.arch, out.string());
  return 0;
}

}  // namespace

Command demo_model_command() {
  return {
      "demo-model", "Write a small random-weight checkpoint (real tokenizer, noise output) to try serve on",
      [](CLI::App& sub) -> std::function<int()> {
        auto options = std::make_shared<DemoModelOptions>();
        sub.add_option("--arch", options->arch, "Model architecture family")
            ->check(CLI::IsMember({"qwen3", "qwen3_tts", "qwen3_omni", "z_image"}));
        sub.add_option("--out", options->out, "Output directory (created; files in it are overwritten)")->required();
        sub.add_option("--tokenizer-from", options->tokenizer_dir,
                       "Directory with the Qwen3 tokenizer.json and tokenizer_config.json")
            ->capture_default_str();
        sub.add_option("--seed", options->seed, "Seed of the random weights")->capture_default_str();
        sub.add_option("--shape", options->shape,
                       "Dims: demo (tiny, fast on a CPU); qwen3_tts talker: the released 0.6b / 1.7b ones; "
                       "z_image: released (the 6B DiT, Qwen3-4B, the FLUX.1 VAE; about 20 GB)")
            ->check(CLI::IsMember({"demo", "0.6b", "1.7b", "released"}))
            ->capture_default_str();
        sub.add_option("--codec-shape", options->codec_shape,
                       "qwen3_tts codec decoder dims: small (real frame geometry) or released")
            ->check(CLI::IsMember({"small", "released"}))
            ->capture_default_str();
        sub.add_option("--task", options->task,
                       "qwen3_tts checkpoint type: custom_voice (built-in speakers) or base (voice cloning, with a "
                       "speaker encoder)")
            ->check(CLI::IsMember({"custom_voice", "base"}))
            ->capture_default_str();
        return [options] { return run_demo_model(*options); };
      }};
}

}  // namespace omni::cli
