// DecoderLm and ArEngine on CUDA (bf16, f16 and f32 weights, activations and KV cache) against Hugging Face's
// logits and the CPU backend, on the tiny checkpoints of tests/data/tiny_qwen. Every test skips when
// no GPU is visible (CI builds the CUDA code but has no GPU); scripts/gpu/run_on_gpu.sh runs them
// on the GPU machine (ctest label gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/json.h"
#include "engine/ar_engine.h"
#include "model/decoder_lm.h"
#include "model/model_registry.h"
#include "tensor/backend.h"
#include "tensor/npy.h"
#include "tensor/ops.h"
#include "tensor/sample_row.h"

namespace omni::model {
namespace {

namespace fs = std::filesystem;

// OMNI_TINY_QWEN_DIR points elsewhere when the test binary runs away from its source tree (the
// GPU machine gets the checkpoints in its bundle).
fs::path data_dir() {
  const char* override_dir = std::getenv("OMNI_TINY_QWEN_DIR");
  return override_dir && *override_dir ? fs::path(override_dir) : fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen";
}

// bf16 weights and activations (8 significant bits) through a few layers. The tiny checkpoints
// have so few elements per row (hidden 48 to 64) that rounding does not average out: with a float32
// checkpoint rounded to bf16 the H200 reached 2.2e-2 on one position's largest element, where a
// numpy emulation of the same rounding gives 2.0e-2 on that element and 1.5e-2 in norm.
constexpr double kMaxRelativeError = 2e-2;
constexpr double kMaxElementError = 4e-2;
constexpr int kGreedyTokens = 24;

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(data_dir())) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// ||got - want|| / ||want|| over a row (the relative error issue 7 measures by).
double relative_error(const float* got, const float* want, int vocab) {
  double err = 0.0, mag = 0.0;
  for (int i = 0; i < vocab; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    err += d * d;
    mag += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(err / mag);
}

// max |got - want| / max |want| over a row: a guard against a few wrong logits that the norm
// would average away.
double max_element_error(const float* got, const float* want, int vocab) {
  double err = 0.0, mag = 0.0;
  for (int i = 0; i < vocab; ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    mag = std::max(mag, std::abs(static_cast<double>(want[i])));
  }
  return err / mag;
}

int32_t argmax(const float* row, int vocab) { return static_cast<int32_t>(std::max_element(row, row + vocab) - row); }

// Largest logit minus the second largest.
double top2_margin(const float* row, int vocab) {
  std::vector<float> sorted(row, row + vocab);
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  return static_cast<double>(sorted[0]) - sorted[1];
}

double max_abs(const float* row, int vocab) {
  double m = 0.0;
  for (int i = 0; i < vocab; ++i) m = std::max(m, std::abs(static_cast<double>(row[i])));
  return m;
}

ForwardBatch prefill_batch(const std::vector<int32_t>& prompt, const std::vector<int32_t>& table, bool all_logits) {
  const int n = static_cast<int>(prompt.size());
  ForwardBatch batch{prompt, std::vector<int32_t>(n), {SequenceSlice{0, n, 0, table, true}}, all_logits};
  std::iota(batch.positions.begin(), batch.positions.end(), 0);
  return batch;
}

class CudaModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
    dir_ = data_dir() / GetParam();
    const Json reference = read_json_file(dir_ / "reference.json");
    prompts_ = reference.at("prompts").get<std::vector<std::vector<int32_t>>>();
    for (const auto& file : reference.at("logits")) logits_.push_back(tensor::load_npy(dir_ / file.get<std::string>()));
  }

  // Prefills every prompt on `gpu` and checks each position's logits against transformers'. With
  // `scattered_blocks` the block table is the pool's last blocks in reverse, else 0, 1, 2, ...
  void expect_prompt_logits_match(CausalLm& gpu, bool scattered_blocks) {
    const int vocab = gpu.info().vocab_size;
    for (size_t p = 0; p < prompts_.size(); ++p) {
      SCOPED_TRACE("prompt " + std::to_string(p));
      const int n = static_cast<int>(prompts_[p].size());
      const int blocks = (n + kKvBlockSize - 1) / kKvBlockSize;
      gpu.init_kv_cache(scattered_blocks ? blocks + 3 : blocks);
      std::vector<int32_t> table(blocks);
      for (int b = 0; b < blocks; ++b) table[b] = scattered_blocks ? blocks + 2 - b : b;
      std::vector<float> logits;
      gpu.forward(prefill_batch(prompts_[p], table, true), logits);
      ASSERT_EQ(logits.size(), static_cast<size_t>(n) * static_cast<size_t>(vocab));
      for (int t = 0; t < n; ++t) {
        const int64_t row = static_cast<int64_t>(t) * vocab;
        const float* want = logits_[p].data<float>() + row;
        EXPECT_LE(relative_error(logits.data() + row, want, vocab), kMaxRelativeError) << "position " << t;
        EXPECT_LE(max_element_error(logits.data() + row, want, vocab), kMaxElementError) << "position " << t;
      }
    }
  }

  fs::path dir_;
  std::vector<std::vector<int32_t>> prompts_;
  std::vector<tensor::Tensor> logits_;  // Hugging Face's, [prompt_len, vocab] per prompt
};

TEST_P(CudaModelTest, PromptLogitsMatchTransformersWithinBf16Tolerance) {
  auto gpu = builtin_model_registry().create_causal_lm(dir_, {tensor::Device::cuda(0)});
  ASSERT_EQ(gpu->device(), tensor::Device::cuda(0));
  expect_prompt_logits_match(*gpu, /*scattered_blocks=*/true);
}

// Decodes 24 tokens one at a time on both backends, feeding both the CPU's token. Where the CPU's
// top-two margin exceeds what bf16 can move a logit (the tolerance times the row's largest
// magnitude), the GPU must pick the same token; and the GPU's on-device argmax (forward_greedy)
// must pick the argmax of its own logits rows exactly.
TEST_P(CudaModelTest, GreedyDecodeAgreesWithTheCpuWhereTheMarginAllows) {
  auto cpu = builtin_model_registry().create_causal_lm(dir_);
  auto gpu = builtin_model_registry().create_causal_lm(dir_, {tensor::Device::cuda(0)});
  const int vocab = cpu->info().vocab_size;
  int compared = 0, total = 0;
  for (size_t p = 0; p < prompts_.size(); ++p) {
    SCOPED_TRACE("prompt " + std::to_string(p));
    const auto& prompt = prompts_[p];
    const int n = static_cast<int>(prompt.size());
    const int blocks = (n + kGreedyTokens + kKvBlockSize - 1) / kKvBlockSize;
    if (n + kGreedyTokens > cpu->info().max_position_embeddings) continue;
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    cpu->init_kv_cache(blocks);
    gpu->init_kv_cache(blocks);
    ForwardBatch batch = prefill_batch(prompt, table, false);
    std::vector<float> cpu_logits, gpu_logits;
    std::vector<int32_t> gpu_greedy;
    for (int step = 0; step < kGreedyTokens; ++step) {
      cpu->forward(batch, cpu_logits);
      gpu->forward(batch, gpu_logits);
      ASSERT_EQ(cpu_logits.size(), static_cast<size_t>(vocab));
      ASSERT_EQ(gpu_logits.size(), static_cast<size_t>(vocab));
      const int32_t want = argmax(cpu_logits.data(), vocab);
      const int32_t got = argmax(gpu_logits.data(), vocab);
      ++total;
      if (top2_margin(cpu_logits.data(), vocab) > kMaxRelativeError * max_abs(cpu_logits.data(), vocab)) {
        ++compared;
        EXPECT_EQ(got, want) << "step " << step;
      }
      // The same step again through forward_greedy (it rewrites the same KV slots with the same values).
      gpu->forward_greedy(batch, gpu_greedy);
      ASSERT_EQ(gpu_greedy.size(), 1u);
      EXPECT_EQ(gpu_greedy[0], got) << "step " << step;
      const int pos = n + step;
      batch = ForwardBatch{{want}, {pos}, {SequenceSlice{0, 1, pos, table, true}}, false};
    }
  }
  // The margin rule must leave most steps compared, or the test says little.
  EXPECT_GE(compared, total / 2) << compared << " of " << total << " steps had a margin above the bf16 error";
}

// The engine on the GPU: the KV pool is sized from gpu_memory_utilization, and a greedy request's
// tokens are those of the model decoded step by step with the same shapes.
TEST_P(CudaModelTest, EngineSizesItsCacheFromGpuMemoryAndDecodesGreedily) {
  auto gpu = builtin_model_registry().create_causal_lm(dir_, {tensor::Device::cuda(0)});
  const auto& prompt = prompts_.back();
  const int n = static_cast<int>(prompt.size());
  const int new_tokens = std::min(kGreedyTokens, gpu->info().max_position_embeddings - n);
  ASSERT_GT(new_tokens, 1);

  engine::EngineConfig config;
  config.gpu_memory_utilization = 0.5;
  config.enable_prefix_caching = false;
  engine::ArEngine engine(*gpu, config);
  const tensor::DeviceMemory memory = tensor::cuda_memory_info(0);
  EXPECT_GT(engine.config().num_blocks, 0);
  EXPECT_LE(static_cast<double>(engine.config().num_blocks) * engine.config().kv_bytes_per_block,
            0.5 * static_cast<double>(memory.total_bytes));

  // The model alone, with decode steps padded to the engine's sizes as the engine's are.
  std::vector<int32_t> expected;
  {
    auto reference = builtin_model_registry().create_causal_lm(dir_, {tensor::Device::cuda(0)});
    const int blocks = (n + new_tokens + kKvBlockSize - 1) / kKvBlockSize;
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    reference->init_kv_cache(blocks);
    const int width = (engine.config().max_model_len + kKvBlockSize - 1) / kKvBlockSize;
    if (!engine.config().decode_batch_sizes.empty()) {
      ASSERT_TRUE(reference->prepare_decode_steps(engine.config().decode_batch_sizes, width, false));
    }
    ForwardBatch batch = prefill_batch(prompt, table, false);
    std::vector<int32_t> ids;
    for (int step = 0; step < new_tokens; ++step) {
      reference->forward_greedy(batch, ids);
      expected.push_back(ids[0]);
      const int pos = n + step;
      batch = ForwardBatch{{ids[0]}, {pos}, {SequenceSlice{0, 1, pos, table, true}}, false};
    }
  }

  engine::SamplingParams params;
  params.temperature = 0;
  params.ignore_eos = true;
  params.max_tokens = new_tokens;
  engine.add_request({"r", prompt, params});
  std::vector<int32_t> got;
  while (engine.has_unfinished_requests()) {
    for (const auto& out : engine.step()) {
      for (const auto& c : out.completions) got.insert(got.end(), c.token_ids.begin(), c.token_ids.end());
    }
  }
  EXPECT_EQ(got, expected);
}

// float16 weights and activations (--dtype float16): 11 significant bits, so the bf16 bounds hold.
TEST_P(CudaModelTest, Float16PromptLogitsMatchTransformers) {
  auto gpu = builtin_model_registry().create_causal_lm(
      dir_, {.device = tensor::Device::cuda(0), .dtype = tensor::DType::kF16});
  expect_prompt_logits_match(*gpu, /*scattered_blocks=*/false);
}

// Seeded sampling on the GPU (forward_sample: ops::sample where the logits are) against the CPU's
// host definition of the same draw (tensor::sample_row with the same seed and step), decoding 24
// tokens and feeding both the CPU's token. The device sampler must draw what the host definition
// draws from the GPU's own logits; and wherever the host definition draws the same token from the
// GPU's logits as from the CPU's (the dtype's rounding did not move the draw across a boundary),
// the GPU's token must be the CPU's. In float32 that must hold at (nearly) every step.
TEST_P(CudaModelTest, SeededSamplingAgreesWithTheCpuWhereTheMarginAllows) {
  auto cpu = builtin_model_registry().create_causal_lm(dir_);
  const auto& prompt = prompts_.back();
  const int n = static_cast<int>(prompt.size());
  const int steps = std::min(kGreedyTokens, cpu->info().max_position_embeddings - n);
  ASSERT_GT(steps, 1);
  const int blocks = (n + steps + kKvBlockSize - 1) / kKvBlockSize;
  std::vector<int32_t> table(blocks);
  std::iota(table.begin(), table.end(), 0);
  for (tensor::DType dtype : {tensor::DType::kBF16, tensor::DType::kF16, tensor::DType::kF32}) {
    SCOPED_TRACE(std::string(tensor::dtype_name(dtype)));
    auto gpu = builtin_model_registry().create_causal_lm(dir_, {.device = tensor::Device::cuda(0), .dtype = dtype});
    cpu->init_kv_cache(blocks);
    gpu->init_kv_cache(blocks);
    ForwardBatch batch = prefill_batch(prompt, table, false);
    std::vector<float> cpu_logits, gpu_logits;
    std::vector<int32_t> sampled;
    int agreed = 0;
    for (int step = 0; step < steps; ++step) {
      tensor::ops::SamplingParams params;
      params.temperature = 0.8f;
      params.top_p = 0.95f;
      params.top_k = 50;
      params.repetition_penalty = 1.0f;
      params.seed = 1234;
      params.step = static_cast<uint64_t>(step);
      cpu->forward(batch, cpu_logits);
      gpu->forward(batch, gpu_logits);
      gpu->forward_sample(batch, std::span(&params, 1), sampled);
      ASSERT_EQ(sampled.size(), 1u);
      const int32_t want = tensor::sample_row(cpu_logits, params);
      const int32_t from_gpu_logits = tensor::sample_row(gpu_logits, params);
      EXPECT_EQ(sampled[0], from_gpu_logits) << "step " << step << ": the device's draw is not the host's";
      if (from_gpu_logits == want) {
        ++agreed;
        EXPECT_EQ(sampled[0], want) << "step " << step;
      }
      const int pos = n + step;
      batch = ForwardBatch{{want}, {pos}, {SequenceSlice{0, 1, pos, table, true}}, false};
    }
    EXPECT_GE(agreed, dtype == tensor::DType::kF32 ? steps - 1 : steps / 2)
        << agreed << " of " << steps << " draws were the same on both backends' logits";
  }
}

// ops::sample on CUDA fed the CPU's float32 logits draws the CPU's ids (float sums in another
// order can only move a draw that lands within rounding of a boundary: allow one in 400).
TEST(CudaSamplerTest, DeviceSamplerGivesTheCpuIdsForTheCpuLogits) {
  if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const int rows = 400, vocab = 5000;
  tensor::Tensor logits = tensor::Tensor::empty({rows, vocab}, tensor::DType::kF32);
  uint64_t state = 88172645463325252ull;
  for (int64_t i = 0; i < logits.numel(); ++i) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    logits.data<float>()[i] = static_cast<float>(state % 10000) / 1000.0f - 5.0f;
  }
  std::vector<tensor::ops::SamplingParams> params(rows);
  for (int r = 0; r < rows; ++r) {
    params[r].temperature = 0.5f + 0.25f * static_cast<float>(r % 5);
    params[r].top_k = r % 3 == 0 ? 0 : 20 + r % 100;
    params[r].top_p = r % 2 == 0 ? 1.0f : 0.8f + 0.01f * static_cast<float>(r % 15);
    params[r].min_p = r % 7 == 0 ? 0.05f : 0.0f;
    params[r].seed = 1000 + static_cast<uint64_t>(r);
    params[r].step = static_cast<uint64_t>(r % 13);
  }
  tensor::Tensor on_gpu = logits.to(tensor::Device::cuda(0));
  tensor::Tensor cpu_ids = tensor::Tensor::empty({rows}, tensor::DType::kI32);
  tensor::Tensor gpu_ids = tensor::Tensor::empty({rows}, tensor::DType::kI32);
  tensor::ops::sample(logits, params, cpu_ids);
  tensor::ops::sample(on_gpu, params, gpu_ids);
  int differ = 0;
  for (int r = 0; r < rows; ++r) differ += cpu_ids.data<int32_t>()[r] != gpu_ids.data<int32_t>()[r];
  EXPECT_LE(differ, 1) << differ << " of " << rows << " rows drew another id on the GPU";
}

// Requests that join an engine at different steps with different lengths, so that decode steps
// see batch sizes across several padded sizes, sequences leave mid-run and decode steps alternate
// with steps that carry a prefill.
struct StaggeredRequest {
  int join_step = 0;
  std::vector<int32_t> prompt;
  int max_tokens = 0;
};

std::vector<StaggeredRequest> staggered_requests(int vocab, int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<StaggeredRequest> requests(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) {
    StaggeredRequest& r = requests[static_cast<size_t>(i)];
    r.join_step = i < 3 ? 0 : uniform(1, 40);
    r.prompt.resize(static_cast<size_t>(uniform(2, 40)));
    for (int32_t& id : r.prompt) id = uniform(0, vocab - 1);
    r.max_tokens = uniform(4, 48);
  }
  return requests;
}

struct EngineRunResult {
  std::map<std::string, std::vector<int32_t>> tokens;  // per request id
  engine::ResolvedEngineConfig config;
};

// `seeded`: sampled at temperature 0.8 with request i's seed i, else greedy.
EngineRunResult run_staggered(CausalLm& model, bool enforce_eager, const std::vector<StaggeredRequest>& requests,
                              bool async_scheduling = false, bool seeded = false) {
  engine::EngineConfig config;
  config.max_num_seqs = 24;
  config.num_gpu_blocks_override = 512;
  config.max_model_len = std::min(model.info().max_position_embeddings, 1024);
  config.enable_prefix_caching = false;
  config.enforce_eager = enforce_eager;
  config.async_scheduling = async_scheduling;
  engine::ArEngine engine(model, config);
  EngineRunResult result;
  result.config = engine.config();
  engine::SamplingParams params;
  params.temperature = 0;
  params.ignore_eos = true;
  size_t added = 0;
  for (int step = 0; added < requests.size() || engine.has_unfinished_requests(); ++step) {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (requests[i].join_step != step) continue;
      params.max_tokens = requests[i].max_tokens;
      if (seeded) {
        params.temperature = 0.8f;
        params.seed = static_cast<int64_t>(i);
      }
      engine.add_request({"r" + std::to_string(i), requests[i].prompt, params});
      ++added;
    }
    for (const auto& out : engine.step()) {
      auto& got = result.tokens[out.request_id];
      for (const auto& c : out.completions) got.insert(got.end(), c.token_ids.begin(), c.token_ids.end());
    }
  }
  return result;
}

// The same requests through CUDA graphs and through --enforce-eager (the same padded ops launched
// one by one) give the same tokens, every request its full length.
void expect_graphs_match_eager(const fs::path& dir, int count) {
  // ops::paged_decode_attention's CUDA head sizes; other models decode unpadded in both modes.
  const Json model_config = read_json_file(dir / "config.json");
  const int head_dim =
      model_config.contains("head_dim") && !model_config.at("head_dim").is_null()
          ? model_config.at("head_dim").get<int>()
          : model_config.at("hidden_size").get<int>() / model_config.at("num_attention_heads").get<int>();
  const bool fixed_size = head_dim == 16 || head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
  auto graph_model = builtin_model_registry().create_causal_lm(dir, {tensor::Device::cuda(0)});
  const std::vector<StaggeredRequest> requests = staggered_requests(graph_model->info().vocab_size, count, 7);
  const EngineRunResult graphs = run_staggered(*graph_model, false, requests);
  graph_model.reset();
  auto eager_model = builtin_model_registry().create_causal_lm(dir, {tensor::Device::cuda(0)});
  const EngineRunResult eager = run_staggered(*eager_model, true, requests);
  EXPECT_EQ(graphs.config.cuda_graphs, fixed_size) << "head_dim " << head_dim;
  EXPECT_FALSE(eager.config.cuda_graphs);
  const std::vector<int> padded_sizes = fixed_size ? std::vector<int>{1, 2, 4, 8, 16, 24} : std::vector<int>();
  EXPECT_EQ(graphs.config.decode_batch_sizes, padded_sizes);
  EXPECT_EQ(eager.config.decode_batch_sizes, graphs.config.decode_batch_sizes);
  ASSERT_EQ(graphs.tokens.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string id = "r" + std::to_string(i);
    SCOPED_TRACE(id);
    EXPECT_EQ(graphs.tokens.at(id).size(), static_cast<size_t>(requests[i].max_tokens));
    EXPECT_EQ(graphs.tokens.at(id), eager.tokens.at(id));
  }
}

TEST_P(CudaModelTest, GraphDecodeMatchesEagerWithRequestsJoiningAndFinishing) { expect_graphs_match_eager(dir_, 20); }

// The same on the shapes of Qwen3-0.6B (random weights, whose near-flat logits make any difference
// in arithmetic show up as a different token): OMNI_DECODE_GRAPH_CHECKPOINT names such a checkpoint
// (scripts/gpu/run_engine_on_gpu.sh writes one with make_random_checkpoint); skipped when unset.
TEST(CudaDecodeGraphTest, GraphDecodeMatchesEagerOnTheQwen3_0_6bShape) {
  if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const char* dir = std::getenv("OMNI_DECODE_GRAPH_CHECKPOINT");
  if (dir == nullptr || *dir == 0) GTEST_SKIP() << "OMNI_DECODE_GRAPH_CHECKPOINT is not set";
  expect_graphs_match_eager(dir, 40);
}

// Async scheduling (the next step scheduled while one runs, its placeholder inputs read from the
// previous step's ids) gives the synchronous engine's tokens, greedy and seeded.
TEST_P(CudaModelTest, AsyncSchedulingGivesTheSynchronousTokens) {
  auto model = builtin_model_registry().create_causal_lm(dir_, {tensor::Device::cuda(0)});
  const std::vector<StaggeredRequest> requests = staggered_requests(model->info().vocab_size, 20, 11);
  for (bool seeded : {false, true}) {
    SCOPED_TRACE(seeded ? "seeded" : "greedy");
    const EngineRunResult sync = run_staggered(*model, false, requests, false, seeded);
    auto* decoder = dynamic_cast<DecoderLm*>(model.get());
    ASSERT_NE(decoder, nullptr);
    const int64_t overlapped_before = decoder->overlapped_launches();
    const EngineRunResult async = run_staggered(*model, false, requests, true, seeded);
    // The steps ran on the device's stream behind one another, not through the synchronous default.
    EXPECT_GT(decoder->overlapped_launches(), overlapped_before);
    ASSERT_EQ(async.tokens.size(), requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const std::string id = "r" + std::to_string(i);
      SCOPED_TRACE(id);
      EXPECT_EQ(async.tokens.at(id).size(), static_cast<size_t>(requests[i].max_tokens));
      EXPECT_EQ(async.tokens.at(id), sync.tokens.at(id));
    }
  }
}

// The tiny Qwen3-Omni thinker (MoE layers, routed on the device): its decode steps are recorded
// into CUDA graphs like a dense model's, and graphs, --enforce-eager and async scheduling give the
// same tokens.
TEST(CudaMoeDecodeTest, ThinkerDecodesThroughGraphsAndAsyncStepsWithTheEagerTokens) {
  if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const fs::path dir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni/fused";
  auto model = builtin_model_registry().create_causal_lm(dir, {tensor::Device::cuda(0)});
  const std::vector<StaggeredRequest> requests = staggered_requests(model->info().vocab_size, 20, 5);
  const EngineRunResult graphs = run_staggered(*model, false, requests);
  EXPECT_TRUE(graphs.config.cuda_graphs);
  EXPECT_EQ(graphs.config.decode_batch_sizes, (std::vector<int>{1, 2, 4, 8, 16, 24}));
  auto* decoder = dynamic_cast<DecoderLm*>(model.get());
  ASSERT_NE(decoder, nullptr);
  const int64_t overlapped_before = decoder->overlapped_launches();
  const EngineRunResult async = run_staggered(*model, false, requests, true);
  EXPECT_GT(decoder->overlapped_launches(), overlapped_before);
  const EngineRunResult eager = run_staggered(*model, true, requests);
  EXPECT_FALSE(eager.config.cuda_graphs);
  ASSERT_EQ(graphs.tokens.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string id = "r" + std::to_string(i);
    SCOPED_TRACE(id);
    EXPECT_EQ(graphs.tokens.at(id).size(), static_cast<size_t>(requests[i].max_tokens));
    EXPECT_EQ(graphs.tokens.at(id), eager.tokens.at(id));
    EXPECT_EQ(async.tokens.at(id), eager.tokens.at(id));
  }
}

// A chat's decode after media: its three M-RoPE streams are each position plus the rope delta. The
// fixed-size decode steps (CUDA graphs) take such a batch and rotate by that one number: the tokens
// are those of the same steps given the shifted positions plainly, and differ from the unshifted
// ones. (That equal streams rotate as the plain position is ThinkerReferenceTest's
// EqualMropeStreamsThroughTheMultimodalRotationGiveTheSameLogits.)
TEST(CudaMoeDecodeTest, DecodeAfterMediaRunsAsGraphStepsAtThePositionPlusTheRopeDelta) {
  if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible";
  const fs::path dir = fs::path(OMNI_SOURCE_DIR) / "tests/data/tiny_qwen3_omni/fused";
  auto model = builtin_model_registry().create_causal_lm(dir, {tensor::Device::cuda(0)});
  auto* decoder = dynamic_cast<DecoderLm*>(model.get());
  ASSERT_NE(decoder, nullptr);
  const int n = 12, steps = 8, delta = -3;  // text after the 3 x 2 grid of tokens 2..7 resumes at 5, not 8
  const std::vector<int32_t> table = {0, 1};
  enum class Positions { kMropeStreams, kShifted, kUnshifted };
  const auto decode = [&](Positions how) {
    model->init_kv_cache(4);
    EXPECT_TRUE(model->prepare_decode_steps({1, 2}, 2, true));
    // The prefill: media-like streams (time, height and width apart) for tokens 2..7.
    ForwardBatch prefill{{}, {}, {SequenceSlice{0, n, 0, table, true}}, false};
    std::vector<float> streams(3 * n);
    for (int t = 0; t < n; ++t) {
      prefill.token_ids.push_back(7 + 3 * t);
      prefill.positions.push_back(t);
      const bool media = t >= 2 && t < 8;
      streams[t] = media ? 2.0f : static_cast<float>(t < 2 ? t : t + delta);
      streams[n + t] = media ? 2.0f + static_cast<float>((t - 2) / 2) : streams[t];
      streams[2 * n + t] = media ? 2.0f + static_cast<float>((t - 2) % 2) : streams[t];
    }
    prefill.mrope_positions = streams;
    std::vector<float> logits;
    model->forward(prefill, logits);
    int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    std::vector<int32_t> tokens;
    for (int i = 0; i < steps; ++i) {
      tokens.push_back(next);
      const int shifted = n + i + delta;
      ForwardBatch step{
          {next}, {how == Positions::kShifted ? shifted : n + i}, {SequenceSlice{0, 1, n + i, table, true}}, false};
      if (how == Positions::kMropeStreams) step.mrope_positions.assign(3, static_cast<float>(shifted));
      std::vector<int32_t> picked;
      model->forward_greedy(step, picked);
      EXPECT_EQ(picked.size(), 1u);
      next = picked.at(0);
    }
    return tokens;
  };
  const int64_t before = decoder->fixed_decode_steps();
  const std::vector<int32_t> streams = decode(Positions::kMropeStreams);
  EXPECT_EQ(decoder->fixed_decode_steps(), before + steps);  // every step took the fixed-size path
  EXPECT_EQ(streams, decode(Positions::kShifted));
  EXPECT_NE(streams, decode(Positions::kUnshifted));
}

INSTANTIATE_TEST_SUITE_P(TinyQwen, CudaModelTest, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace omni::model
