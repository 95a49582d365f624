// The control protocol between the head (Orchestrator) and a stage replica process (StageWorker).
// Each message is one ZeroMQ frame: a MessagePack map with the protocol version "v", the message
// type "type" and the fields below. Bulk payloads travel by reference (payload.h); only payloads
// under the inline threshold ride inside a message. The same bytes work over ipc:// and tcp://,
// so a stage on another host speaks it unchanged.
//
// Conversation: worker → Register; worker builds its runner; worker → Ready (or InitFailed and
// exit). Then head → Submit / InputChunk / Abort / Shutdown, worker → Output / Error / Heartbeat.
// Sleep mode: head → Sleep / WakeUp, worker → StageControlAck (one per Sleep or WakeUp).
//
// With several API frontends (serve --api-server-count N) a replica holds one channel to the
// process that started it (the launcher: Register, Ready, Heartbeat, Shutdown, FrontendReset) and
// one to each frontend (Register, Ready, then the request conversation above); each request's
// outputs go back on the channel of the frontend that submitted it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/error.h"
#include "base/json.h"
#include "runtime/generated_image.h"
#include "runtime/payload.h"
#include "runtime/step_timing.h"
#include "runtime/token_logprobs.h"

namespace omni::runtime {

// Bumped on any incompatible change; a peer speaking another version is refused with both named.
// (The distributed launch's fields and message types were added compatibly: a head's own replicas
// never send them, and an older peer refuses an unknown type by name.)
inline constexpr int kProtocolVersion = 3;

// worker → head, first message, before the runner is built.
struct RegisterMessage {
  int stage_id = 0;
  int replica = 0;  // -1 for a headless worker's replica: the head assigns one (JoinReply)
  int64_t pid = 0;
  std::string host;
  std::string devices;  // the CUDA_VISIBLE_DEVICES the process runs with; empty for none
  // A headless worker's replica only (serve --headless): the address it advertises
  // (--omni-replica-address or the routing probe) and the pipeline it resolved, which the head
  // compares with its own (distributed_launch.h). Null for a replica the head started.
  std::string address;
  Json pipeline;
};

// worker → head: the runner is built and the replica accepts requests.
struct ReadyMessage {
  int stage_id = 0;
  int replica = 0;
};

// worker → head: building the runner failed; the worker exits with `exit_code` right after.
struct InitFailedMessage {
  int stage_id = 0;
  int replica = 0;
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  int exit_code = 1;
};

// head → worker: run a request on this stage.
struct SubmitMessage {
  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  Json sampling_params = Json::object();
  std::vector<PayloadRef> inputs;  // payloads from upstream stages, in arrival order
  std::vector<int> output_stages;  // stages that consume this request's payloads from this stage
  // async_chunk: more input follows in InputChunk messages, the last one marked `last`.
  bool input_open = false;
  Json additional_information = Json::object();  // GenerationRequest::additional_information
};

// head → worker (async_chunk): the next piece of a request's input from its upstream stage.
struct InputChunkMessage {
  std::string request_id;
  std::vector<int32_t> token_ids;
  std::vector<PayloadRef> payloads;
  bool last = false;  // the upstream stage finished; no more input follows
};

// worker → head: new output of a request since the previous message for it.
struct OutputMessage {
  std::string request_id;
  std::vector<int32_t> token_ids;
  std::string text;
  // Set on a choice's last output at this stage; that is the request's last output there unless
  // more_choices is set (other choices of an n > 1 request still generate).
  std::optional<std::string> finish_reason;
  std::vector<PayloadRef> payloads;  // one per (chunk, consumer stage)
  // Audio for the client (StageOutput::audio); travels as little-endian float32 bytes.
  std::vector<float> audio;
  int audio_sample_rate = 0;
  // An image for the client (StageOutput::image); the pixels travel as bytes.
  std::optional<GeneratedImage> image;
  // On the request's first output at this stage only: seconds from the worker taking the request's
  // Submit to sending this message. The head subtracts it from its own Submit-to-output time to get
  // the hop (transport and queueing both ways) without comparing clocks of different hosts.
  std::optional<double> stage_seconds;
  // One per token_ids entry when the request asked for logprobs, else empty. On the wire: one
  // array [token_id, logprob, rank, [[token_id, logprob], ...]] per token.
  std::vector<GeneratedTokenLogprobs> logprobs;
  int index = 0;  // the choice (sampling parameter n); on the wire only when not 0
  bool more_choices = false;
  int prompt_tokens = 0;  // StageOutput::prompt_tokens; on the wire only when not 0
};

// head → worker: drop a request and everything it holds.
struct AbortMessage {
  std::string request_id;
};

// worker → head: a request failed (request_id set) or the stage cannot go on (fatal).
struct ErrorMessage {
  std::string request_id;  // empty for a stage-wide error
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
  bool fatal = false;
};

// worker → head, periodically: the replica is alive.
struct HeartbeatMessage {
  int stage_id = 0;
  int replica = 0;
  int64_t running_requests = 0;
  // The step timings since the previous heartbeat (the worker's "step" and the runner's parts);
  // on the wire as [[part, seconds], ...] only when not empty.
  std::vector<StepTiming> step_timings;
};

// head → worker: finish now (drop all requests) and exit 0.
struct ShutdownMessage {};

// launcher → worker: API frontend `frontend` ended. The worker drops that frontend's requests and
// opens a new channel to its endpoint (Register, Ready on it), for the frontend started in its place.
struct FrontendResetMessage {
  int frontend = 0;
};

// head → worker: put the stage to sleep. The replica's running requests end with an error;
// level 1 frees the KV cache (weights stay, on the host), level 2 frees the weights too (reloaded
// from the checkpoint on wake-up). Answered with a StageControlAck.
struct SleepMessage {
  int level = 1;
};

// head → worker: wake a sleeping stage up. Answered with a StageControlAck.
struct WakeUpMessage {};

// worker → head: the outcome of a Sleep or WakeUp.
struct StageControlAck {
  int stage_id = 0;
  int replica = 0;
  std::string operation;  // "sleep" or "wakeup"
  int level = 0;          // the level the replica sleeps at after the operation; 0 when awake
  // The process's resident memory before and after the operation, from /proc/self/statm.
  int64_t rss_before_bytes = 0;
  int64_t rss_after_bytes = 0;
  double seconds = 0;              // how long the operation took
  std::optional<ErrorCode> error;  // set when the operation failed (kUnsupported: not possible here)
  std::string message;             // the error's message
};

// head → a headless worker's replica: the answer to its Register. Accepted: the replica index it
// has in its stage's pool, the head's connector session, whether its outgoing payloads must
// travel inline (it is on another host than the head, where shared memory does not reach) and
// whether consumers keep the payloads they read until the head discards them (replay). Refused:
// `message` says why (a differing pipeline field); the worker exits.
struct JoinReplyMessage {
  bool accepted = false;
  int replica = 0;
  std::string session;
  bool inline_payloads = false;
  bool retain_inputs = false;
  std::string message;
};

// head → a peer it does not know (the head restarted): register again.
struct RejoinMessage {};

// worker → head: this replica stops (SIGTERM, shutdown); the head marks it DOWN at once.
struct LeaveMessage {
  int stage_id = 0;
  int replica = 0;
};

using StageMessage =
    std::variant<RegisterMessage, ReadyMessage, InitFailedMessage, SubmitMessage, OutputMessage, AbortMessage,
                 ErrorMessage, HeartbeatMessage, ShutdownMessage, InputChunkMessage, FrontendResetMessage, SleepMessage,
                 WakeUpMessage, StageControlAck, JoinReplyMessage, RejoinMessage, LeaveMessage>;

// The message's type name on the wire ("register", "submit"…), for logs and errors.
std::string_view message_type_name(const StageMessage& message);

std::string encode_message(const StageMessage& message);
// Throws omni::Error(kInternal) naming `peer` for bytes that are not a message of this protocol
// version (a different version is named in the message).
StageMessage decode_message(std::string_view bytes, std::string_view peer);

// The inverse of error_code_name(); unknown names map to kInternal.
ErrorCode error_code_from_name(std::string_view name);

}  // namespace omni::runtime
