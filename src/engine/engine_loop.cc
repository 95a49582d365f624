#include "engine/engine_loop.h"

#include "base/error.h"
#include "base/log.h"

namespace omni::engine {

EngineLoop::EngineLoop(ArEngine& engine) : engine_(engine), thread_([this] { run(); }) {}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::submit(EngineRequest request, OutputCallback on_output) {
  engine_.check_request(request);
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw_error(ErrorCode::kUnavailable, "request {}: the engine loop has stopped", request.request_id);
    inbox_.push_back(Submit{std::move(request), std::move(on_output)});
  }
  wake_.notify_one();
}

void EngineLoop::abort(std::string request_id) {
  {
    std::lock_guard lock(mutex_);
    inbox_.push_back(Abort{std::move(request_id)});
  }
  wake_.notify_one();
}

void EngineLoop::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::deliver(RequestOutput output) {
  auto it = callbacks_.find(output.request_id);
  if (it == callbacks_.end()) return;
  bool finished = output.finished;
  it->second(std::move(output));
  if (finished) callbacks_.erase(it);
}

void EngineLoop::run() {
  while (true) {
    std::deque<Command> commands;
    bool stopping;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !inbox_.empty() || engine_.has_unfinished_requests(); });
      commands.swap(inbox_);
      stopping = stopping_;
    }
    for (Command& command : commands) {
      if (auto* submit = std::get_if<Submit>(&command)) {
        std::string id = submit->request.request_id;
        try {
          engine_.add_request(std::move(submit->request));
          callbacks_[id] = std::move(submit->on_output);
        } catch (const Error& e) {
          RequestOutput refused;
          refused.request_id = id;
          refused.finished = true;
          refused.error = e.what();
          submit->on_output(std::move(refused));
        }
      } else if (auto out = engine_.abort(std::get<Abort>(command).request_id)) {
        deliver(std::move(*out));
      }
    }
    if (stopping) {
      for (RequestOutput& out : engine_.abort_all()) deliver(std::move(out));
      return;
    }
    if (!engine_.has_unfinished_requests()) continue;
    std::vector<RequestOutput> outputs;
    try {
      outputs = engine_.step();
    } catch (const std::exception& e) {
      spdlog::error("engine step failed, ending every unfinished request: {}", e.what());
      outputs = engine_.abort_all(e.what());
    }
    for (RequestOutput& out : outputs) deliver(std::move(out));
  }
}

OutputStream::OutputStream() : state_(std::make_shared<State>()) {}

EngineLoop::OutputCallback OutputStream::writer() {
  return [state = state_](RequestOutput output) {
    {
      std::lock_guard lock(state->mutex);
      state->outputs.push_back(std::move(output));
    }
    state->ready.notify_one();
  };
}

std::optional<RequestOutput> OutputStream::next() {
  std::unique_lock lock(state_->mutex);
  if (state_->final_read) return std::nullopt;
  state_->ready.wait(lock, [&] { return !state_->outputs.empty(); });
  RequestOutput output = std::move(state_->outputs.front());
  state_->outputs.pop_front();
  if (output.finished) state_->final_read = true;
  return output;
}

}  // namespace omni::engine
