// libFuzzer target for the Jinja chat-template engine (text/chat_template): the input is a
// template (a model's tokenizer_config.json is as untrusted as any request), rendered the way
// the server renders a chat request: a conversation with a system, user, assistant (with a tool
// call) and tool message, tools, add_generation_prompt and the special tokens.
//
// What must hold: a template that does not parse or fails to render is an omni::Error naming the
// template line; recursion, huge loops and huge strings end with such an error within the
// engine's bounds (template.h), never a stack overflow, a timeout or unbounded memory.
#include <cstdint>
#include <string>

#include "base/json.h"
#include "fuzz_guard.h"
#include "text/chat_template/chat_template.h"

namespace {

const omni::OrderedJson& messages() {
  static const omni::OrderedJson value = omni::OrderedJson::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "call_1",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "{\"temperature\": 21}", "tool_call_id": "call_1"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks"}, {"type": "image"}]}
  ])");
  return value;
}

const omni::OrderedJson& tools() {
  static const omni::OrderedJson value = omni::OrderedJson::parse(R"([{"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  return value;
}

void run(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  omni::text::ChatTemplate chat_template(source, "fuzz.jinja",
                                         omni::OrderedJson{{"bos_token", "<s>"}, {"eos_token", "</s>"}});
  chat_template.apply(messages(), tools(), true, omni::OrderedJson{{"enable_thinking", false}});
  (void)chat_template.content_format();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  omni::fuzz::expect_only_omni_errors("chat_template_fuzzer", [&] { run(data, size); });
  return 0;
}
