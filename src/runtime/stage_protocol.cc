#include "runtime/stage_protocol.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "base/json_dump.h"

namespace omni::runtime {

namespace {

constexpr std::array<std::string_view, 17> kTypeNames = {
    "register", "ready",       "init_failed", "submit",      "output",         "abort",
    "error",    "heartbeat",   "shutdown",    "input_chunk", "frontend_reset", "sleep",
    "wakeup",   "control_ack", "join_reply",  "rejoin",      "leave"};

Json to_wire(const PayloadRef& ref) {
  Json json = {{"connector", ref.connector},
               {"request_id", ref.address.request_id},
               {"from_stage", ref.address.from_stage},
               {"to_stage", ref.address.to_stage},
               {"chunk", ref.address.chunk},
               {"size", ref.size},
               {"location", ref.location}};
  if (ref.is_inline()) json["bytes"] = Json::binary(ref.inline_bytes);
  return json;
}

PayloadRef payload_from_wire(const Json& json) {
  PayloadRef ref;
  ref.connector = json.at("connector").get<std::string>();
  ref.address.request_id = json.at("request_id").get<std::string>();
  ref.address.from_stage = json.at("from_stage").get<int>();
  ref.address.to_stage = json.at("to_stage").get<int>();
  ref.address.chunk = json.at("chunk").get<int>();
  ref.size = json.at("size").get<uint64_t>();
  ref.location = json.at("location").get<std::string>();
  if (auto it = json.find("bytes"); it != json.end()) {
    const auto& bytes = it->get_binary();
    ref.inline_bytes.assign(bytes.begin(), bytes.end());
  }
  return ref;
}

Json payloads_to_wire(const std::vector<PayloadRef>& refs) {
  Json array = Json::array();
  for (const PayloadRef& ref : refs) array.push_back(to_wire(ref));
  return array;
}

std::vector<PayloadRef> payloads_from_wire(const Json& array) {
  std::vector<PayloadRef> refs;
  for (const Json& json : array) refs.push_back(payload_from_wire(json));
  return refs;
}

Json logprobs_to_wire(const std::vector<GeneratedTokenLogprobs>& logprobs) {
  Json array = Json::array();
  for (const GeneratedTokenLogprobs& entry : logprobs) {
    Json top = Json::array();
    for (const TokenLogprob& alternative : entry.top) top.push_back({alternative.token_id, alternative.logprob});
    array.push_back({entry.token.token_id, entry.token.logprob, entry.rank, std::move(top)});
  }
  return array;
}

std::vector<GeneratedTokenLogprobs> logprobs_from_wire(const Json& array) {
  std::vector<GeneratedTokenLogprobs> logprobs;
  logprobs.reserve(array.size());
  for (const Json& entry : array) {
    GeneratedTokenLogprobs& out = logprobs.emplace_back();
    out.token = {entry.at(0).get<int32_t>(), entry.at(1).get<float>()};
    out.rank = entry.at(2).get<int>();
    for (const Json& alternative : entry.at(3)) {
      out.top.push_back({alternative.at(0).get<int32_t>(), alternative.at(1).get<float>()});
    }
  }
  return logprobs;
}

// Audio crosses as raw float32 bytes; every platform we build for is little-endian, which is
// what the wire format says.
static_assert(std::endian::native == std::endian::little, "the wire's audio samples are little-endian float32");

std::vector<uint8_t> samples_to_bytes(const std::vector<float>& samples) {
  std::vector<uint8_t> bytes(samples.size() * sizeof(float));
  std::memcpy(bytes.data(), samples.data(), bytes.size());
  return bytes;
}

std::vector<float> samples_from_bytes(const std::vector<uint8_t>& bytes) {
  if (bytes.size() % sizeof(float) != 0) {
    throw_error(ErrorCode::kInternal, "output message: audio of {} bytes is not a whole number of float32 samples",
                bytes.size());
  }
  std::vector<float> samples(bytes.size() / sizeof(float));
  std::memcpy(samples.data(), bytes.data(), bytes.size());
  return samples;
}

struct Encoder {
  Json& out;
  void operator()(const RegisterMessage& m) {
    out.update(
        {{"stage_id", m.stage_id}, {"replica", m.replica}, {"pid", m.pid}, {"host", m.host}, {"devices", m.devices}});
    if (!m.pipeline.is_null()) out.update({{"address", m.address}, {"pipeline", m.pipeline}});
  }
  void operator()(const JoinReplyMessage& m) {
    out.update({{"accepted", m.accepted},
                {"replica", m.replica},
                {"session", m.session},
                {"inline_payloads", m.inline_payloads},
                {"retain_inputs", m.retain_inputs},
                {"message", m.message}});
  }
  void operator()(const RejoinMessage&) {}
  void operator()(const LeaveMessage& m) { out.update({{"stage_id", m.stage_id}, {"replica", m.replica}}); }
  void operator()(const ReadyMessage& m) { out.update({{"stage_id", m.stage_id}, {"replica", m.replica}}); }
  void operator()(const InitFailedMessage& m) {
    out.update({{"stage_id", m.stage_id},
                {"replica", m.replica},
                {"code", error_code_name(m.code)},
                {"message", m.message},
                {"exit_code", m.exit_code}});
  }
  void operator()(const SubmitMessage& m) {
    out.update({{"request_id", m.request_id},
                {"prompt_token_ids", m.prompt_token_ids},
                {"sampling_params", m.sampling_params},
                {"inputs", payloads_to_wire(m.inputs)},
                {"output_stages", m.output_stages},
                {"input_open", m.input_open},
                {"additional_information", m.additional_information}});
  }
  void operator()(const InputChunkMessage& m) {
    out.update({{"request_id", m.request_id},
                {"token_ids", m.token_ids},
                {"payloads", payloads_to_wire(m.payloads)},
                {"last", m.last}});
  }
  void operator()(const OutputMessage& m) {
    out.update({{"request_id", m.request_id},
                {"token_ids", m.token_ids},
                {"text", m.text},
                {"payloads", payloads_to_wire(m.payloads)}});
    if (m.finish_reason) out["finish_reason"] = *m.finish_reason;
    if (m.stage_seconds) out["stage_seconds"] = *m.stage_seconds;
    if (!m.logprobs.empty()) out["logprobs"] = logprobs_to_wire(m.logprobs);
    if (m.index != 0) out["index"] = m.index;
    if (m.more_choices) out["more_choices"] = true;
    if (m.prompt_tokens != 0) out["prompt_tokens"] = m.prompt_tokens;
    if (!m.audio.empty()) {
      out["audio"] = Json::binary(samples_to_bytes(m.audio));
      out["audio_sample_rate"] = m.audio_sample_rate;
    }
    if (m.image) {
      out["image"] = {{"width", m.image->width},
                      {"height", m.image->height},
                      {"rgb", Json::binary(m.image->rgb)},
                      {"steps", m.image->steps},
                      {"seconds", m.image->seconds}};
      if (!m.image->stage_durations.is_null()) out["image"]["stage_durations"] = m.image->stage_durations;
    }
  }
  void operator()(const AbortMessage& m) { out["request_id"] = m.request_id; }
  void operator()(const ErrorMessage& m) {
    out.update(
        {{"request_id", m.request_id}, {"code", error_code_name(m.code)}, {"message", m.message}, {"fatal", m.fatal}});
  }
  void operator()(const HeartbeatMessage& m) {
    out.update({{"stage_id", m.stage_id}, {"replica", m.replica}, {"running_requests", m.running_requests}});
    if (!m.step_timings.empty()) {
      Json timings = Json::array();
      for (const StepTiming& t : m.step_timings) timings.push_back(Json::array({t.part, t.seconds}));
      out["step_timings"] = std::move(timings);
    }
  }
  void operator()(const ShutdownMessage&) {}
  void operator()(const FrontendResetMessage& m) { out["frontend"] = m.frontend; }
  void operator()(const SleepMessage& m) { out["level"] = m.level; }
  void operator()(const WakeUpMessage&) {}
  void operator()(const StageControlAck& m) {
    out.update({{"stage_id", m.stage_id},
                {"replica", m.replica},
                {"operation", m.operation},
                {"level", m.level},
                {"rss_before_bytes", m.rss_before_bytes},
                {"rss_after_bytes", m.rss_after_bytes},
                {"seconds", m.seconds}});
    if (m.error) out.update({{"code", error_code_name(*m.error)}, {"message", m.message}});
  }
};

StageMessage decode_fields(std::string_view type, const Json& j) {
  if (type == "register") {
    RegisterMessage m{j.at("stage_id").get<int>(),
                      j.at("replica").get<int>(),
                      j.at("pid").get<int64_t>(),
                      j.at("host").get<std::string>(),
                      j.at("devices").get<std::string>(),
                      "",
                      nullptr};
    if (auto it = j.find("pipeline"); it != j.end()) {
      m.pipeline = *it;
      m.address = j.at("address").get<std::string>();
    }
    return m;
  }
  if (type == "join_reply") {
    return JoinReplyMessage{j.at("accepted").get<bool>(),       j.at("replica").get<int>(),
                            j.at("session").get<std::string>(), j.at("inline_payloads").get<bool>(),
                            j.at("retain_inputs").get<bool>(),  j.at("message").get<std::string>()};
  }
  if (type == "rejoin") return RejoinMessage{};
  if (type == "leave") return LeaveMessage{j.at("stage_id").get<int>(), j.at("replica").get<int>()};
  if (type == "ready") return ReadyMessage{j.at("stage_id").get<int>(), j.at("replica").get<int>()};
  if (type == "init_failed") {
    return InitFailedMessage{j.at("stage_id").get<int>(), j.at("replica").get<int>(),
                             error_code_from_name(j.at("code").get<std::string>()), j.at("message").get<std::string>(),
                             j.at("exit_code").get<int>()};
  }
  if (type == "submit") {
    return SubmitMessage{j.at("request_id").get<std::string>(),
                         j.at("prompt_token_ids").get<std::vector<int32_t>>(),
                         j.at("sampling_params"),
                         payloads_from_wire(j.at("inputs")),
                         j.at("output_stages").get<std::vector<int>>(),
                         j.at("input_open").get<bool>(),
                         j.at("additional_information")};
  }
  if (type == "input_chunk") {
    return InputChunkMessage{j.at("request_id").get<std::string>(), j.at("token_ids").get<std::vector<int32_t>>(),
                             payloads_from_wire(j.at("payloads")), j.at("last").get<bool>()};
  }
  if (type == "output") {
    OutputMessage m;
    m.request_id = j.at("request_id").get<std::string>();
    m.token_ids = j.at("token_ids").get<std::vector<int32_t>>();
    m.text = j.at("text").get<std::string>();
    m.payloads = payloads_from_wire(j.at("payloads"));
    if (auto it = j.find("finish_reason"); it != j.end()) m.finish_reason = it->get<std::string>();
    if (auto it = j.find("stage_seconds"); it != j.end()) m.stage_seconds = it->get<double>();
    if (auto it = j.find("logprobs"); it != j.end()) m.logprobs = logprobs_from_wire(*it);
    m.index = j.value("index", 0);
    m.more_choices = j.value("more_choices", false);
    m.prompt_tokens = j.value("prompt_tokens", 0);
    if (auto it = j.find("audio"); it != j.end()) {
      m.audio = samples_from_bytes(it->get_binary());
      m.audio_sample_rate = j.at("audio_sample_rate").get<int>();
    }
    if (auto it = j.find("image"); it != j.end()) {
      GeneratedImage image;
      image.width = it->at("width").get<int>();
      image.height = it->at("height").get<int>();
      image.rgb = it->at("rgb").get_binary();
      image.steps = it->at("steps").get<int>();
      image.seconds = it->at("seconds").get<double>();
      if (auto d = it->find("stage_durations"); d != it->end()) image.stage_durations = *d;
      m.image = std::move(image);
    }
    return m;
  }
  if (type == "abort") return AbortMessage{j.at("request_id").get<std::string>()};
  if (type == "error") {
    return ErrorMessage{j.at("request_id").get<std::string>(), error_code_from_name(j.at("code").get<std::string>()),
                        j.at("message").get<std::string>(), j.at("fatal").get<bool>()};
  }
  if (type == "heartbeat") {
    HeartbeatMessage m{
        j.at("stage_id").get<int>(), j.at("replica").get<int>(), j.at("running_requests").get<int64_t>(), {}};
    if (auto it = j.find("step_timings"); it != j.end()) {
      for (const Json& t : *it) m.step_timings.push_back({t.at(0).get<std::string>(), t.at(1).get<double>()});
    }
    return m;
  }
  if (type == "frontend_reset") return FrontendResetMessage{j.at("frontend").get<int>()};
  if (type == "sleep") return SleepMessage{j.at("level").get<int>()};
  if (type == "wakeup") return WakeUpMessage{};
  if (type == "control_ack") {
    StageControlAck m;
    m.stage_id = j.at("stage_id").get<int>();
    m.replica = j.at("replica").get<int>();
    m.operation = j.at("operation").get<std::string>();
    m.level = j.at("level").get<int>();
    m.rss_before_bytes = j.at("rss_before_bytes").get<int64_t>();
    m.rss_after_bytes = j.at("rss_after_bytes").get<int64_t>();
    m.seconds = j.at("seconds").get<double>();
    if (auto it = j.find("code"); it != j.end()) {
      m.error = error_code_from_name(it->get<std::string>());
      m.message = j.at("message").get<std::string>();
    }
    return m;
  }
  return ShutdownMessage{};
}

}  // namespace

std::string_view message_type_name(const StageMessage& message) { return kTypeNames[message.index()]; }

ErrorCode error_code_from_name(std::string_view name) {
  for (int i = static_cast<int>(ErrorCode::kInvalidArgument); i <= static_cast<int>(ErrorCode::kInternal); ++i) {
    if (error_code_name(static_cast<ErrorCode>(i)) == name) return static_cast<ErrorCode>(i);
  }
  return ErrorCode::kInternal;
}

std::string encode_message(const StageMessage& message) {
  Json json = {{"v", kProtocolVersion}, {"type", message_type_name(message)}};
  std::visit(Encoder{json}, message);
  std::string bytes;
  Json::to_msgpack(json, bytes);
  return bytes;
}

StageMessage decode_message(std::string_view bytes, std::string_view peer) {
  Json json;
  try {
    json = Json::from_msgpack(bytes.begin(), bytes.end());
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::kInternal, "control message from {} is not MessagePack: {}", peer, e.what());
  }
  if (!json.is_object() || !json.contains("v") || !json.contains("type")) {
    throw_error(ErrorCode::kInternal, "control message from {} has no protocol version or type", peer);
  }
  if (json["v"] != kProtocolVersion) {
    throw_error(ErrorCode::kInternal, "{} speaks control protocol version {}, this process speaks version {}", peer,
                dump_for_message(json["v"]), kProtocolVersion);
  }
  std::string type = json["type"].is_string() ? json["type"].get<std::string>() : dump_for_message(json["type"]);
  if (std::find(kTypeNames.begin(), kTypeNames.end(), type) == kTypeNames.end()) {
    throw_error(ErrorCode::kInternal, "control message from {} has the unknown type '{}'", peer, type);
  }
  try {
    return decode_fields(type, json);
  } catch (const Json::exception& e) {
    throw_error(ErrorCode::kInternal, "'{}' message from {} is malformed: {}", type, peer, e.what());
  }
}

}  // namespace omni::runtime
