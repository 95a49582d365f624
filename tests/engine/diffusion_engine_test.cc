// engine::DiffusionEngine over a counting stand-in model: batches up to max_num_seqs, the wait for
// a partial batch, step execution (one denoising step per step(), requests joining between steps,
// aborts between steps) and whole-batch runs without it.
#include "engine/diffusion_engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace omni::engine {
namespace {

// Each job takes `steps` steps; step() records the batch sizes it saw.
class CountingModel : public model::DiffusionModel {
 public:
  struct Job : model::DenoiseJob {
    explicit Job(int steps) { total_steps_ = steps; }
    void advance() { ++steps_done_; }
  };
  const model::DiffusionDefaults& defaults() const override { return defaults_; }
  std::vector<int64_t> latent_shape(int, int) const override { return {1, 1, 1}; }
  std::unique_ptr<model::DenoiseJob> start(const model::ImageRequest& r) override {
    if (r.num_inference_steps < 0) throw_error(ErrorCode::kInvalidArgument, "bad steps");
    return std::make_unique<Job>(r.num_inference_steps > 0 ? r.num_inference_steps : 3);
  }
  tensor::Tensor latents(const model::DenoiseJob&) const override { return {}; }
  std::vector<int> batches;

 protected:
  void step_jobs(std::span<model::DenoiseJob* const> jobs) override {
    batches.push_back(static_cast<int>(jobs.size()));
    for (model::DenoiseJob* j : jobs) static_cast<Job*>(j)->advance();
  }
  model::RgbImage decode_job(const model::DenoiseJob& j) override {
    return model::RgbImage{1, 1, {static_cast<uint8_t>(j.total_steps()), 0, 0}};
  }

 private:
  model::DiffusionDefaults defaults_;
};

model::ImageRequest steps(int n) {
  model::ImageRequest r;
  r.prompt = "p";
  r.num_inference_steps = n;
  return r;
}

TEST(DiffusionEngineTest, StepExecutionJoinsAndAbortsBetweenSteps) {
  CountingModel model;
  DiffusionEngine engine(model, {.max_num_seqs = 2, .request_batch_max_wait_ms = 0, .step_execution = true});
  engine.add_request("a", steps(3));
  EXPECT_TRUE(engine.has_ready_work());
  EXPECT_TRUE(engine.step().empty());  // a: 1 of 3
  engine.add_request("b", steps(2));
  engine.add_request("c", steps(2));
  EXPECT_TRUE(engine.step().empty());                  // b joins (max 2); c waits
  const std::vector<ImageOutput> out = engine.step();  // a: 3 of 3, b: 2 of 2
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].request_id, "a");
  EXPECT_EQ(out[1].request_id, "b");
  EXPECT_EQ(out[0].image->pixels[0], 3);
  engine.abort("c");  // before it ran a step
  EXPECT_EQ(engine.num_requests(), 0u);
  EXPECT_EQ(model.batches, (std::vector<int>{1, 2, 2}));

  engine.add_request("d", steps(5));
  engine.step();
  engine.abort("d");
  EXPECT_EQ(engine.num_requests(), 0u);
  EXPECT_TRUE(engine.step().empty());
  EXPECT_THROW(engine.add_request("e", steps(-1)), Error);
  EXPECT_EQ(engine.num_requests(), 0u);
}

TEST(DiffusionEngineTest, WithoutStepExecutionABatchRunsToItsImages) {
  CountingModel model;
  DiffusionEngine engine(model, {.max_num_seqs = 4, .request_batch_max_wait_ms = 0, .step_execution = false});
  engine.add_request("a", steps(2));
  engine.add_request("b", steps(3));
  const std::vector<ImageOutput> out = engine.step();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].request_id, "a");  // finished after its 2 steps, b after 3
  EXPECT_EQ(model.batches, (std::vector<int>{2, 2, 1}));
  engine.add_request("x", steps(1));
  EXPECT_THROW(engine.add_request("x", steps(1)), Error);  // a queued id
}

TEST(DiffusionEngineTest, APartialBatchWaitsForMoreRequests) {
  CountingModel model;
  DiffusionEngine engine(model, {.max_num_seqs = 2, .request_batch_max_wait_ms = 200, .step_execution = false});
  engine.add_request("a", steps(1));
  EXPECT_FALSE(engine.has_ready_work());
  EXPECT_TRUE(engine.step().empty());
  engine.add_request("b", steps(1));
  EXPECT_TRUE(engine.has_ready_work());  // full
  EXPECT_EQ(engine.step().size(), 2u);
  EXPECT_EQ(model.batches, (std::vector<int>{2}));
  engine.add_request("c", steps(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_TRUE(engine.has_ready_work());  // waited long enough
  EXPECT_EQ(engine.step().size(), 1u);
  EXPECT_THROW(DiffusionEngine(model, {.max_num_seqs = 0}), Error);
}

}  // namespace
}  // namespace omni::engine
