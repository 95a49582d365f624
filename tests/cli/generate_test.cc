// `omnistage generate` end to end: the real binary on the tiny reference checkpoints.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/json.h"
#include "cli/generate_fixture.h"
#include "support/subprocess.h"
#include "tensor/backend.h"
#include "tensor/npy.h"

namespace omni {
namespace {

namespace fs = std::filesystem;
using testing::run_process;

const fs::path& kModel = testing::kGenerateModel;
using testing::join_ids;

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ref_ = read_json_file(kModel / "reference.json");
    prompt_ = ref_["prompts"][2].get<std::vector<int32_t>>();
    greedy_ = ref_["greedy_continuations"][2].get<std::vector<int32_t>>();
    tmp_ = fs::temp_directory_path() / ("omni_generate_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(tmp_);
  }
  void TearDown() override { fs::remove_all(tmp_); }

  testing::ProcessResult generate(const fs::path& model, std::vector<std::string> extra) {
    std::vector<std::string> argv = {OMNISTAGE_BINARY, "generate",           "--model",
                                     model.string(),   "--prompt-token-ids", join_ids(prompt_)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return run_process(argv);
  }

  Json ref_;
  std::vector<int32_t> prompt_, greedy_;
  fs::path tmp_;
};

TEST_F(GenerateTest, GreedyJsonOutputMatchesTransformersAndLogitsAreDumped) {
  const fs::path npy = tmp_ / "logits.npy";
  auto r = generate(kModel, {"--max-tokens", "24", "--temperature", "0", "--ignore-eos", "--output", "json",
                             "--dump-logits", npy.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json out = Json::parse(r.out);
  EXPECT_EQ(out["token_ids"].get<std::vector<int32_t>>(), greedy_);
  EXPECT_EQ(out["text"], "");
  EXPECT_EQ(out["finish_reason"], "length");
  EXPECT_EQ(r.out.rfind("{\"token_ids\":", 0), 0u) << r.out;
  tensor::Tensor got = tensor::load_npy(npy);
  tensor::Tensor want = tensor::load_npy(kModel / "logits_2.npy");
  ASSERT_EQ(got.shape(), want.shape());
  double err = 0, mag = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got.data<float>()[i]) - want.data<float>()[i]));
    mag = std::max(mag, std::abs(static_cast<double>(want.data<float>()[i])));
  }
  EXPECT_LE(err / mag, 1e-4);
  EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
}

TEST_F(GenerateTest, TextOutputWithoutTokenizerPrintsTheTokenIds) {
  auto r = generate(kModel, {"--max-tokens", "3", "--temperature", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            std::to_string(greedy_[0]) + " " + std::to_string(greedy_[1]) + " " + std::to_string(greedy_[2]) + "\n");
}

TEST_F(GenerateTest, StopsAtAnEosTokenFromGenerationConfig) {
  // A copy of the model whose generation_config makes the 4th greedy token an end of sequence.
  const fs::path model = tmp_ / "model";
  fs::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(kModel / f, model / f);
  const size_t stop_at = std::find(greedy_.begin(), greedy_.end(), greedy_[3]) - greedy_.begin();
  std::ofstream(model / "generation_config.json") << Json{{"eos_token_id", {greedy_[3]}}}.dump();
  auto r = generate(model, {"--max-tokens", "24", "--temperature", "0", "--output", "json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json out = Json::parse(r.out);
  EXPECT_EQ(out["finish_reason"], "stop");
  EXPECT_EQ(out["token_ids"].get<std::vector<int32_t>>(),
            std::vector<int32_t>(greedy_.begin(), greedy_.begin() + stop_at + 1));
  r = generate(model, {"--max-tokens", "24", "--temperature", "0", "--output", "json", "--ignore-eos"});
  EXPECT_EQ(Json::parse(r.out)["token_ids"].get<std::vector<int32_t>>(), greedy_);
}

TEST_F(GenerateTest, SamplingIsReproducibleWithASeedAndTopKOneIsGreedy) {
  std::vector<std::string> flags = {"--max-tokens", "12", "--temperature", "1.5",      "--top-p", "0.9",
                                    "--seed",       "42", "--ignore-eos",  "--output", "json"};
  auto a = generate(kModel, flags), b = generate(kModel, flags);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  auto top1 = generate(
      kModel, {"--max-tokens", "24", "--temperature", "0.8", "--top-k", "1", "--ignore-eos", "--output", "json"});
  EXPECT_EQ(Json::parse(top1.out)["token_ids"].get<std::vector<int32_t>>(), greedy_);
}

TEST_F(GenerateTest, AsyncSchedulingPrintsTheSynchronousOutput) {
  std::vector<std::string> seeded = {"--max-tokens", "12", "--temperature", "1.5",      "--top-p", "0.9",
                                     "--seed",       "42", "--ignore-eos",  "--output", "json"};
  auto sync = generate(kModel, seeded);
  seeded.push_back("--async-scheduling");
  auto async = generate(kModel, seeded);
  ASSERT_EQ(async.exit_code, 0) << async.err;
  EXPECT_EQ(async.out, sync.out);
  auto greedy = generate(
      kModel, {"--max-tokens", "24", "--temperature", "0", "--ignore-eos", "--output", "json", "--async-scheduling"});
  ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
  EXPECT_EQ(Json::parse(greedy.out)["token_ids"].get<std::vector<int32_t>>(), greedy_);
}

TEST_F(GenerateTest, BadArgumentsAreUsageErrorsNamingTheFlag) {
  auto r = run_process({OMNISTAGE_BINARY, "generate", "--model", kModel.string(), "--prompt-token-ids", "1,x,3"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.err.find("--prompt-token-ids: 'x' is not a token id"), std::string::npos) << r.err;
  r = generate(kModel, {"--top-p", "1.5"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.err.find("--top-p: sampling parameter 'top_p' must be in (0, 1], got 1.5"), std::string::npos) << r.err;
  r = generate(kModel, {"--device", "tpu"});
  EXPECT_NE(r.err.find("--device: unknown device 'tpu'"), std::string::npos) << r.err;
  r = generate(kModel, {"--device", "cuda:7"});
  if (tensor::cuda_device_count() < 8) {
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.err.find("--device cuda:7: no such CUDA device"), std::string::npos) << r.err;
  }
  r = generate(kModel, {"--max-tokens", "1000"});
  EXPECT_NE(r.err.find("--max-tokens: 37 prompt tokens + 1000 new tokens exceed max_model_len 128 (the model's "
                       "max_position_embeddings)"),
            std::string::npos)
      << r.err;
  r = run_process({OMNISTAGE_BINARY, "generate", "--model", kModel.string(), "--prompt-token-ids", "5,384"});
  EXPECT_EQ(r.exit_code, 64);
  EXPECT_NE(r.err.find("token id 384 at index 1 is outside the vocabulary [0, 384)"), std::string::npos) << r.err;
  r = run_process({OMNISTAGE_BINARY, "generate", "--model", "/no/such/model", "--prompt-token-ids", "1"});
  EXPECT_NE(r.err.find("model folder /no/such/model does not exist"), std::string::npos) << r.err;
}

// --dtype: vLLM's values; the CPU backend computes in float32 whatever is asked (with a warning),
// so the tokens do not change; a bad value names the flag and the allowed values.
TEST_F(GenerateTest, DtypeFlagIsCheckedAndTheCpuStaysFloat32) {
  const std::vector<std::string> flags = {"--max-tokens", "8",        "--temperature", "0",
                                          "--ignore-eos", "--output", "json"};
  auto plain = generate(kModel, flags);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  for (const char* dtype : {"auto", "bfloat16", "half", "float"}) {
    std::vector<std::string> with = flags;
    with.insert(with.end(), {"--device", "cpu", "--dtype", dtype});
    auto r = generate(kModel, with);
    ASSERT_EQ(r.exit_code, 0) << dtype << ": " << r.err;
    EXPECT_EQ(r.out, plain.out) << dtype;
    const bool warned = r.err.find("the CPU backend computes in float32 only") != std::string::npos;
    EXPECT_EQ(warned, std::string(dtype) == "bfloat16" || std::string(dtype) == "half") << dtype << ": " << r.err;
  }
  auto bad = generate(kModel, {"--dtype", "fp64"});
  EXPECT_EQ(bad.exit_code, 64);
  EXPECT_NE(bad.err.find("--dtype: 'fp64' is not a dtype (allowed: auto, bfloat16, float16 (half), float32 (float))"),
            std::string::npos)
      << bad.err;
}

}  // namespace
}  // namespace omni

namespace omni {
namespace {

// A 16-bit PCM WAV of one second of a 440 Hz tone at 16 kHz.
std::string wav_second() {
  const int rate = 16000, n = 16000;
  std::string out = "RIFF";
  const auto put32 = [&out](uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); };
  const auto put16 = [&out](uint16_t v) { out.append(reinterpret_cast<const char*>(&v), 2); };
  put32(36 + 2 * n);
  out += "WAVEfmt ";
  put32(16);
  put16(1);
  put16(1);
  put32(rate);
  put32(2 * rate);
  put16(2);
  put16(16);
  out += "data";
  put32(2 * n);
  for (int i = 0; i < n; ++i)
    put16(static_cast<uint16_t>(static_cast<int16_t>(8000 * std::sin(2 * M_PI * 440.0 * i / rate))));
  return out;
}

// --messages with audio parts on the Qwen3-Omni demo checkpoint: a plain file path and the same
// audio inline give the same answer, and the dumped logits are those of the expanded prompt
// (1 s: 13 audio rows where the template wrote one placeholder).
TEST(GenerateMessages, AudioPartsExpandThePromptAndPlainPathsWork) {
  const fs::path tmp = fs::temp_directory_path() / ("omni_generate_audio_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  auto made = run_process({OMNISTAGE_BINARY, "demo-model", "--arch", "qwen3_omni", "--out", (tmp / "model").string()});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string wav = wav_second();
  { std::ofstream(tmp / "tone.wav", std::ios::binary) << wav; }
  const auto run = [&](const std::string& part, const std::string& npy) {
    const std::string messages =
        R"([{"role": "user", "content": [)" + part + R"({"type": "text", "text": "What is it?"}]}])";
    return run_process({OMNISTAGE_BINARY, "generate", "--model", (tmp / "model").string(), "--messages", messages,
                        "--max-tokens", "4", "--temperature", "0", "--output", "json", "--dump-logits",
                        (tmp / npy).string()});
  };
  auto text_only = run("", "text.npy");
  ASSERT_EQ(text_only.exit_code, 0) << text_only.err;
  auto by_path =
      run(R"({"type": "audio_url", "audio_url": {"url": ")" + (tmp / "tone.wav").string() + R"("}},)", "path.npy");
  ASSERT_EQ(by_path.exit_code, 0) << by_path.err;
  std::string b64;
  {
    static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < wav.size(); i += 3) {
      uint32_t v = static_cast<uint8_t>(wav[i]) << 16;
      if (i + 1 < wav.size()) v |= static_cast<uint8_t>(wav[i + 1]) << 8;
      if (i + 2 < wav.size()) v |= static_cast<uint8_t>(wav[i + 2]);
      b64 += kAlphabet[(v >> 18) & 63];
      b64 += kAlphabet[(v >> 12) & 63];
      b64 += i + 1 < wav.size() ? kAlphabet[(v >> 6) & 63] : '=';
      b64 += i + 2 < wav.size() ? kAlphabet[v & 63] : '=';
    }
  }
  auto inline_audio =
      run(R"({"type": "input_audio", "input_audio": {"data": ")" + b64 + R"(", "format": "wav"}},)", "inline.npy");
  ASSERT_EQ(inline_audio.exit_code, 0) << inline_audio.err;
  EXPECT_EQ(Json::parse(by_path.out)["token_ids"], Json::parse(inline_audio.out)["token_ids"]);
  const int64_t text_rows = tensor::load_npy(tmp / "text.npy").dim(0);
  EXPECT_EQ(tensor::load_npy(tmp / "path.npy").dim(0), text_rows + 2 + 13);
  EXPECT_EQ(tensor::load_npy(tmp / "inline.npy").dim(0), text_rows + 2 + 13);

  auto bad = run(R"({"type": "input_audio", "input_audio": {"data": "bm90IGF1ZGlv", "format": "wav"}},)", "bad.npy");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--messages: 'messages[0].content[0]': not an audio file"), std::string::npos) << bad.err;
  fs::remove_all(tmp);
}

// A width x height 24-bit BMP of gradients (FFmpeg reads BMP like any image part).
std::string bmp_picture(int width, int height) {
  const int row = (3 * width + 3) / 4 * 4;
  const uint32_t size = 54 + static_cast<uint32_t>(row * height);
  std::string out(54, '\0');
  const auto put = [&](size_t at, uint32_t v, int bytes) {
    for (int b = 0; b < bytes; ++b) out[at + b] = static_cast<char>((v >> (8 * b)) & 0xff);
  };
  out[0] = 'B';
  out[1] = 'M';
  put(2, size, 4);
  put(10, 54, 4);
  put(14, 40, 4);
  put(18, static_cast<uint32_t>(width), 4);
  put(22, static_cast<uint32_t>(height), 4);
  put(26, 1, 2);
  put(28, 24, 2);
  put(34, static_cast<uint32_t>(row * height), 4);
  for (int y = height - 1; y >= 0; --y) {
    std::string line(static_cast<size_t>(row), '\0');
    for (int x = 0; x < width; ++x) {
      line[3 * x] = static_cast<char>(x * y % 256);      // blue
      line[3 * x + 1] = static_cast<char>(3 * y % 256);  // green
      line[3 * x + 2] = static_cast<char>(2 * x % 256);  // red
    }
    out += line;
  }
  return out;
}

// --messages with image parts on the Qwen3-Omni demo checkpoint: a plain file path and a file://
// URL give the same answer, and the dumped logits are those of the expanded prompt (100 x 70
// pixels resized to 96 x 64: 3 x 2 merged blocks = 6 rows where the template wrote one placeholder).
TEST(GenerateMessages, ImagePartsExpandThePromptAndPlainPathsWork) {
  const fs::path tmp = fs::temp_directory_path() / ("omni_generate_image_" + std::to_string(::getpid()));
  fs::create_directories(tmp);
  auto made = run_process({OMNISTAGE_BINARY, "demo-model", "--arch", "qwen3_omni", "--out", (tmp / "model").string()});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  { std::ofstream(tmp / "picture.bmp", std::ios::binary) << bmp_picture(100, 70); }
  { std::ofstream(tmp / "broken.bmp", std::ios::binary) << "BM but not a picture"; }
  const auto run = [&](const std::string& part, const std::string& npy) {
    const std::string messages =
        R"([{"role": "user", "content": [)" + part + R"({"type": "text", "text": "What is it?"}]}])";
    return run_process({OMNISTAGE_BINARY, "generate", "--model", (tmp / "model").string(), "--messages", messages,
                        "--max-tokens", "4", "--temperature", "0", "--output", "json", "--dump-logits",
                        (tmp / npy).string()});
  };
  auto text_only = run("", "text.npy");
  ASSERT_EQ(text_only.exit_code, 0) << text_only.err;
  const std::string picture = (tmp / "picture.bmp").string();
  auto by_path = run(R"({"type": "image_url", "image_url": {"url": ")" + picture + R"("}},)", "path.npy");
  ASSERT_EQ(by_path.exit_code, 0) << by_path.err;
  auto by_url = run(R"({"type": "image_url", "image_url": "file://)" + picture + R"("},)", "url.npy");
  ASSERT_EQ(by_url.exit_code, 0) << by_url.err;
  EXPECT_EQ(Json::parse(by_path.out)["token_ids"], Json::parse(by_url.out)["token_ids"]);
  const int64_t text_rows = tensor::load_npy(tmp / "text.npy").dim(0);
  EXPECT_EQ(tensor::load_npy(tmp / "path.npy").dim(0), text_rows + 2 + 6);

  auto bad =
      run(R"({"type": "image_url", "image_url": {"url": ")" + (tmp / "broken.bmp").string() + R"("}},)", "bad.npy");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--messages: 'messages[0].content[0]': not an image FFmpeg can read"), std::string::npos)
      << bad.err;
  fs::remove_all(tmp);
}

// `bench latency --messages` times a chat with media: every request of the batch is the chat, its
// prompt as long as the expanded one (1 s of audio: 2 markers + 13 rows; the 100 x 70 picture: 2
// markers + 6 rows, as above), on the demo's weights and on random ones (`--load-format dummy`
// over a folder of its JSON files alone, whose towers are random too).
TEST(BenchLatencyMessages, EveryRequestIsTheChatWithItsMediaExpanded) {
  const fs::path tmp = fs::temp_directory_path() / ("omni_bench_messages_" + std::to_string(::getpid()));
  fs::create_directories(tmp / "dummy");
  auto made = run_process({OMNISTAGE_BINARY, "demo-model", "--arch", "qwen3_omni", "--out", (tmp / "model").string()});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  for (const auto& entry : fs::directory_iterator(tmp / "model")) {
    if (entry.path().extension() == ".json") fs::copy_file(entry.path(), tmp / "dummy" / entry.path().filename());
  }
  { std::ofstream(tmp / "tone.wav", std::ios::binary) << wav_second(); }
  { std::ofstream(tmp / "picture.bmp", std::ios::binary) << bmp_picture(100, 70); }
  const auto bench = [&](const fs::path& model, const std::string& parts, const std::vector<std::string>& extra) {
    const std::string messages =
        R"([{"role": "user", "content": [)" + parts + R"({"type": "text", "text": "What is it?"}]}])";
    std::vector<std::string> args{OMNISTAGE_BINARY, "bench", "latency", "--model", model.string(), "--device", "cpu",
                                  "--output-len", "3", "--batch-size", "2", "--num-iters-warmup", "0",
                                  "--num-iters", "1", "--messages", messages, "--output-json",
                                  (tmp / "report.json").string()};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_process(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? read_json_file(tmp / "report.json")["results"][0] : Json();
  };
  const std::string media = R"({"type": "audio_url", "audio_url": ")" + (tmp / "tone.wav").string() +
                            R"("}, {"type": "image_url", "image_url": ")" + (tmp / "picture.bmp").string() + R"("},)";
  const Json text = bench(tmp / "model", "", {});
  const Json real = bench(tmp / "model", media, {});
  const Json dummy = bench(tmp / "dummy", media, {"--load-format", "dummy"});
  ASSERT_TRUE(text.is_object() && real.is_object() && dummy.is_object());
  EXPECT_EQ(text["chat"], true);
  EXPECT_EQ(real["input_len"].get<int>(), text["input_len"].get<int>() + 15 + 8);
  EXPECT_EQ(dummy["input_len"], real["input_len"]);
  EXPECT_EQ(real["batch_size"], 2);
  EXPECT_EQ(real["prefill_steps_per_iter"], 1);
  EXPECT_GT(real["media_ms"].get<double>(), 0.0);

  auto unpaired = run_process({OMNISTAGE_BINARY, "bench", "latency", "--model", (tmp / "model").string(), "--device",
                               "cpu", "--mm-processor-kwargs", R"({"fps": 1})"});
  EXPECT_NE(unpaired.exit_code, 0);
  EXPECT_NE(unpaired.err.find("--mm-processor-kwargs goes with --messages"), std::string::npos) << unpaired.err;
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace omni
