// EngineLoop — the loop driver and thread-safe front door of an ArEngine. It runs the engine on a
// thread of its own (the one owner of docs/design.md); any thread submits and aborts requests
// through its queue, and each request's outputs go to the callback given with it.
//
// Contract:
//  - submit() checks the request on the calling thread (ArEngine::check_request) and throws
//    omni::Error(kInvalidArgument) for a bad one; otherwise the request is queued and its callback
//    will receive every output of the request, the last one with `finished` set, exactly once.
//    A request the engine refuses later (an id already in use) gets one final output with `error`.
//  - Callbacks run on the loop thread, one at a time, in step order; they must be quick and must not
//    call stop() (submit() and abort() are fine).
//  - abort() ends a request (its last output has finish reason abort); unknown or finished ids are
//    ignored.
//  - If a step throws (a model failure), every unfinished request ends with `error` set and the loop
//    carries on with new requests.
//  - stop() (also the destructor) aborts everything unfinished, delivers those outputs and joins the
//    thread. After stop(), submit() throws omni::Error(kUnavailable).
// The ArEngine must outlive the loop, and nothing else may call it while the loop runs.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>

#include "engine/ar_engine.h"

namespace omni::engine {

class EngineLoop {
 public:
  using OutputCallback = std::function<void(RequestOutput)>;

  explicit EngineLoop(ArEngine& engine);
  ~EngineLoop();
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  void submit(EngineRequest request, OutputCallback on_output);
  void abort(std::string request_id);
  void stop();

 private:
  struct Submit {
    EngineRequest request;
    OutputCallback on_output;
  };
  struct Abort {
    std::string request_id;
  };
  using Command = std::variant<Submit, Abort>;

  void run();
  void deliver(RequestOutput output);

  ArEngine& engine_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Command> inbox_;                                  // guarded by mutex_
  bool stopping_ = false;                                      // guarded by mutex_
  std::unordered_map<std::string, OutputCallback> callbacks_;  // loop thread only
  std::thread thread_;
};

// A blocking reader of one request's outputs, for callers that prefer pulling to callbacks:
//   OutputStream stream; loop.submit(request, stream.writer());
//   while (auto out = stream.next()) { ... }
// next() may be called from any one thread; the writer may outlive the stream.
class OutputStream {
 public:
  OutputStream();
  EngineLoop::OutputCallback writer();
  // The next output, waiting for it; nullopt once the request's final output has been returned.
  std::optional<RequestOutput> next();

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<RequestOutput> outputs;
    bool final_read = false;
  };
  std::shared_ptr<State> state_;
};

}  // namespace omni::engine
