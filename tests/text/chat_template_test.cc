// Chat templates rendered by omnistage against Python's jinja2 (Debian's python3-jinja2, with
// the environment transformers' apply_chat_template uses: tests/model/jinja_reference.py).
#include "text/chat_template/chat_template.h"

#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "support/subprocess.h"
#include "tokenizer_test_support.h"

namespace omni::text {
namespace {

using testing::qwen3_dir;
using testing::TempDir;

// Renders every {"template", "variables"} case with jinja2.
std::vector<OrderedJson> render_with_jinja2(const OrderedJson& cases) {
  TempDir dir;
  const auto in = dir.path() / "cases.json";
  const auto out = dir.path() / "out.json";
  std::ofstream(in) << cases.dump();
  const auto r =
      testing::run_process({"/usr/bin/python3", std::string(OMNI_SOURCE_DIR) + "/tests/model/jinja_reference.py",
                            in.string(), out.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::ifstream result(out);
  return OrderedJson::parse(result).get<std::vector<OrderedJson>>();
}

std::string qwen3_template_source() {
  return OrderedJson::parse(read_text_file(qwen3_dir() / "tokenizer_config.json"))["chat_template"].get<std::string>();
}

struct Conversation {
  std::string title;
  OrderedJson messages;
  OrderedJson tools;
  bool add_generation_prompt;
  OrderedJson kwargs;
};

OrderedJson j(std::string_view text) { return OrderedJson::parse(text); }

std::vector<Conversation> conversations() {
  const OrderedJson weather_tool = j(R"({"type": "function", "function": {"name": "get_weather",
      "description": "Weather for a city — \"quoted\", 天气, emoji 🌦", "parameters": {"type": "object",
      "properties": {"city": {"type": "string", "description": "City name"}, "unit": {"type": "string",
      "enum": ["celsius", "fahrenheit"], "default": "celsius"}, "days": {"type": "integer", "minimum": 1,
      "maximum": 7.5}, "verbose": {"type": "boolean", "default": false}, "extra": {"type": "null"}},
      "required": ["city"]}}})");
  const OrderedJson search_tool = j(R"({"type": "function", "function": {"name": "search", "description": "Search",
      "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "top_k": {"type": "integer"}},
      "required": ["query"]}}})");
  const OrderedJson tools = OrderedJson::array({weather_tool, search_tool});
  const OrderedJson none;
  const OrderedJson no_kwargs = OrderedJson::object();
  const OrderedJson no_thinking = j(R"({"enable_thinking": false})");
  const OrderedJson thinking = j(R"({"enable_thinking": true})");
  return {
      {"single user turn", j(R"([{"role": "user", "content": "Hello!"}])"), none, true, no_kwargs},
      {"system and user", j(R"([{"role": "system", "content": "You are a helpful assistant."},
          {"role": "user", "content": "What is 2+2?"}])"),
       none, true, no_kwargs},
      {"thinking disabled", j(R"([{"role": "system", "content": "Be brief."},
          {"role": "user", "content": "Hi"}])"),
       none, true, no_thinking},
      {"thinking enabled explicitly", j(R"([{"role": "user", "content": "Hi"}])"), none, true, thinking},
      {"no generation prompt", j(R"([{"role": "user", "content": "Hi"}])"), none, false, no_kwargs},
      {"multi-turn",
       j(R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
          {"role": "user", "content": "Tell me a joke."}])"),
       none, true, no_kwargs},
      {"history with think blocks", j(R"([{"role": "user", "content": "2+2?"},
          {"role": "assistant", "content": "<think>\nSimple arithmetic.\n</think>\n\n4"},
          {"role": "user", "content": "And 3+3?"},
          {"role": "assistant", "content": "<think>\nAgain easy.\n</think>\n\n6"}])"),
       none, false, no_kwargs},
      {"reasoning_content field", j(R"([{"role": "user", "content": "Why is the sky blue?"},
          {"role": "assistant", "content": "Rayleigh scattering.", "reasoning_content": "\nShort wavelengths scatter more.\n"}])"),
       none, false, no_kwargs},
      {"reasoning in history before the last query", j(R"([{"role": "user", "content": "Q1"},
          {"role": "assistant", "content": "A1", "reasoning_content": "R1"}, {"role": "user", "content": "Q2"}])"),
       none, true, no_thinking},
      {"tools without system", j(R"([{"role": "user", "content": "Weather in Paris?"}])"), tools, true, no_kwargs},
      {"tools with system", j(R"([{"role": "system", "content": "You can call tools."},
          {"role": "user", "content": "Weather in Paris?"}])"),
       tools, true, no_thinking},
      {"tool call and result", j(R"([{"role": "user", "content": "Weather in Paris?"},
          {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather",
           "arguments": {"city": "Paris", "days": 3, "ratio": 0.5, "flags": [true, null]}}}]},
          {"role": "tool", "content": "{\"temperature\": 21}"}])"),
       tools, true, no_kwargs},
      {"string arguments and content before the call", j(R"([{"role": "user", "content": "Search cats"},
          {"role": "assistant", "content": "Let me search.", "tool_calls": [{"function": {"name": "search",
           "arguments": "{\"query\": \"cats\"}"}}]},
          {"role": "tool", "content": "Cats are mammals."},
          {"role": "assistant", "content": "Cats are mammals."}])"),
       tools, false, no_kwargs},
      {"parallel calls and consecutive tool results", j(R"([{"role": "system", "content": "sys"},
          {"role": "user", "content": "Weather in Paris and Rome?"},
          {"role": "assistant", "content": "<think>\nTwo calls.\n</think>\n\n", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"name": "get_weather", "arguments": {"city": "Rome"}}]},
          {"role": "tool", "content": "sunny"}, {"role": "tool", "content": "rainy"},
          {"role": "assistant", "content": "Paris is sunny, Rome rainy."},
          {"role": "user", "content": "Thanks"}])"),
       tools, true, no_thinking},
      {"tool_response as user content", j(R"([{"role": "user", "content": "Start"},
          {"role": "assistant", "content": "<think>plan</think>call", "tool_calls": [{"function": {"name": "search",
           "arguments": {"query": "x"}}}]},
          {"role": "user", "content": "<tool_response>\nresult\n</tool_response>"},
          {"role": "assistant", "content": "<think>\nfinal thoughts\n</think>\n\nDone."}])"),
       tools, false, no_kwargs},
      {"system message later in the conversation", j(R"([{"role": "user", "content": "Hi"},
          {"role": "system", "content": "Switch to French."}, {"role": "user", "content": "Bonjour"}])"),
       none, true, no_kwargs},
      {"unicode and whitespace in content", j(R"([{"role": "system", "content": "  spaced \t system  \n"},
          {"role": "user", "content": "日本語 😀 \"quotes\" 'single' \\ backslash\n\nnew paragraph"},
          {"role": "assistant", "content": "\n\nLeading newlines kept?"}])"),
       none, true, no_kwargs},
      {"empty tools list counts as no tools", j(R"([{"role": "user", "content": "Hi"}])"), OrderedJson::array(), true,
       no_kwargs},
  };
}

TEST(ChatTemplateTest, Qwen3TemplateMatchesJinja2) {
  const auto chat = ChatTemplate::load(qwen3_dir());
  ASSERT_TRUE(chat.has_value());
  const std::string source = qwen3_template_source();
  const auto convs = conversations();
  ASSERT_GE(convs.size(), 15u);
  OrderedJson cases = OrderedJson::array();
  for (const Conversation& c : convs) {
    // The variables transformers passes: special tokens, messages, tools, documents,
    // add_generation_prompt, then the template kwargs.
    OrderedJson variables = {{"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}};
    variables["messages"] = c.messages;
    variables["tools"] = c.tools;
    variables["documents"] = nullptr;
    variables["add_generation_prompt"] = c.add_generation_prompt;
    for (const auto& [k, v] : c.kwargs.items()) variables[k] = v;
    cases.push_back({{"template", source}, {"variables", variables}});
  }
  const auto expected = render_with_jinja2(cases);
  ASSERT_EQ(expected.size(), convs.size());
  for (size_t i = 0; i < convs.size(); ++i) {
    ASSERT_TRUE(expected[i].contains("text")) << convs[i].title << ": jinja2 failed: " << expected[i].dump();
    EXPECT_EQ(chat->apply(convs[i].messages, convs[i].tools, convs[i].add_generation_prompt, convs[i].kwargs),
              expected[i]["text"].get<std::string>())
        << convs[i].title;
  }
  // Spot checks that the comparison covers what matters.
  EXPECT_EQ(chat->apply(convs[2].messages, nullptr, true, convs[2].kwargs),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\n");
}

// Small templates exercising the engine: each is rendered by both and must match exactly.
TEST(ChatTemplateTest, EngineMatchesJinja2OnLanguageFeatures) {
  const OrderedJson vars = j(R"({"items": [3, 1, 2], "words": ["b", "A", "c"], "name": "World", "n": 7, "x": 2.5,
      "msgs": [{"role": "user", "content": "  hi  "}, {"role": "assistant", "content": "yo", "extra": null},
               {"role": "user", "content": "bye"}],
      "d": {"z": 1, "a": [1, 2], "m": {"k": "v"}}, "s": "Hello, World", "empty": "", "none": null, "t": true})");
  const std::vector<std::string> templates = {
      "{{ name }} {{ n }} {{ x }} {{ none }} {{ t }} {{ items }} {{ d }} {{ words }}",
      "{% for i in items %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.length }}"
      "{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %},{% endfor %}",
      "{% for m in msgs[::-1] %}{{ m.role }}{% if not loop.last %}|{% endif %}{% endfor %} {{ msgs[-1].content }} "
      "{{ items[1:] }} {{ items[:-1] }} {{ items[::2] }} {{ s[7:] }} {{ s[-5:-1] }} {{ s[::-1] }}",
      "{%- set ns = namespace(count=0, names=[]) -%}\n{%- for m in msgs -%}\n  {%- if m.role == 'user' -%}\n"
      "    {%- set ns.count = ns.count + 1 -%}\n  {%- endif -%}\n{%- endfor -%}\ncount={{ ns.count }}",
      "{{ msgs[0].content | trim }}|{{ msgs | length }}|{{ n | string }}|{{ name | lower }}{{ name | upper }}|"
      "{{ missing | default('dflt') }}|{{ empty | default('e', true) }}|{{ words | join('-') }}|{{ words | sort }}|"
      "{{ items | sum }}|{{ items | max }}{{ items | min }}|{{ words | first }}{{ words | last }}|{{ items | reverse | "
      "list }}",
      "{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|"
      "{% for k, v in d.items() %}{{ k }}{% endfor %}|{{ d.keys() | list }}|{{ d.get('zz', 'no') }}|{{ d.m.k }}",
      "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(',') }}|"
      "{{ msgs | rejectattr('role', 'eq', 'user') | list | length }}|{{ items | select('odd') | list }}|"
      "{{ words | map('upper') | join }}|{{ msgs | map(attribute='role') | unique | list }}",
      "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ words | tojson(separators=(',', ':')) }}|"
      "{{ {'é': 'ü', 'q': \"\\\"\", 'n': none, 'f': 1.0, 'g': 1e-7, 'b': false} | tojson }}|"
      "{{ d | tojson(sort_keys=true) }}|{{ 'é' | tojson(ensure_ascii=true) }}",
      "{{ s.startswith('Hello') }} {{ s.endswith(('x', 'World')) }} {{ s.split(', ') }} {{ '  a b  '.split() }} "
      "{{ 'a,b,c'.split(',', 1) }} {{ '\\n\\nx\\n'.strip('\\n') }}|{{ '  y  '.lstrip() }}|{{ '  y  '.rstrip() }}| "
      "{{ s.replace('l', 'L') }} {{ s.upper() }} {{ s.find('World') }} {{ 'ab'.title() }}",
      "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} "
      "{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1 == 1.0 }} {{ 'b' > 'a' }} {{ 3 in items }} "
      "{{ 'ell' in s }} {{ 'q' not in s }} {{ 'z' in d }} {{ -x }} {{ 0.1 + 0.2 }} {{ 10 / 4 }}",
      "{{ none is none }} {{ n is defined }} {{ nope is defined }} {{ nope is undefined }} {{ s is string }} "
      "{{ d is mapping }} {{ items is iterable }} {{ n is number }} {{ n is integer }} {{ x is float }} "
      "{{ n is odd }} {{ n is even }} {{ n is divisibleby 7 }} {{ t is true }} {{ t is false }} {{ t is boolean }} "
      "{{ msgs[1].extra is none }} {{ msgs[1].extra is not none }} {{ 'x' if t else 'y' }} {{ 'x' if not t }}.",
      "a\n  {% if t %}\n    yes\n  {% endif %}\nb\n{# comment #}\nc {{- ' d ' -}} e\n  {%- if t %} f{% endif %}\n"
      "  {%+ if t %}g{% endif %}\n{% for i in items -%}\n  {{ i }}\n{%- endfor %}\nend\n",
      "{% set greeting %}Hi {{ name }}!{% endset %}{{ greeting }}|{% macro tag(x, y='d') %}<{{ x }}:{{ y }}>{% "
      "endmacro %}"
      "{{ tag(1) }}{{ tag(2, 'z') }}{{ tag(x=3, y='k') }}|{% for i in items if i > 1 %}{{ i }}{{ loop.length }}"
      "{% else %}none{% endfor %}|{% for i in [] %}x{% else %}empty{% endfor %}|"
      "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% "
      "endfor %}",
      "{% set a, b = [1, 2] %}{{ a }}{{ b }}|{{ range(3) | list }}|{{ dict(p=1, q='r') }}|{{ [1, 'a', none, true] }}|"
      "{{ 'it''s' }}|{{ \"it's\" }}|{{ 'mixed \\'\"' }}|{{ ['x\\ny'] }}|{{ (1, 2) | list }}|{{ 1e20 }} {{ 12345678.9 "
      "}} {{ 1/3 }}",
      "{% for m in msgs %}{{ loop.previtem.role if loop.previtem is defined else '-' }}>{{ m.role }}"
      "<{{ loop.nextitem.role if loop.nextitem is defined else '-' }} {{ loop.cycle('odd', 'even') }};{% endfor %}",
  };
  OrderedJson cases = OrderedJson::array();
  for (const std::string& t : templates) cases.push_back({{"template", t}, {"variables", vars}});
  const auto expected = render_with_jinja2(cases);
  ASSERT_EQ(expected.size(), templates.size());
  jinja::Dict variables = jinja::Value::from_json(vars).as_dict();
  for (size_t i = 0; i < templates.size(); ++i) {
    ASSERT_TRUE(expected[i].contains("text")) << "template " << i << ": jinja2 failed: " << expected[i].dump();
    try {
      EXPECT_EQ(jinja::Template(templates[i], "test").render(variables), expected[i]["text"].get<std::string>())
          << "template " << i << ": " << templates[i];
    } catch (const Error& e) {
      ADD_FAILURE() << "template " << i << " failed: " << e.what() << "\n" << templates[i];
    }
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.what()) + " [" + std::string(error_code_name(e.code())) + "]";
  }
  return "no error";
}

TEST(ChatTemplateTest, ErrorsNameTheTemplateLine) {
  EXPECT_EQ(error_of([] { jinja::Template("line1\n{{ x | nosuchfilter }}", "chat"); }),
            "chat line 2: no filter named 'nosuchfilter' [load_failed]");
  EXPECT_EQ(error_of([] { jinja::Template("a\nb\n{% if x %}\nunclosed", "chat"); }),
            "chat line 4: unexpected end of template, expected 'endif' [load_failed]");
  EXPECT_EQ(error_of([] { jinja::Template("{% frobnicate %}", "chat"); }),
            "chat line 1: unknown tag 'frobnicate' [load_failed]");
  EXPECT_EQ(error_of([] { jinja::Template("\n\n{{ 'unterminated }}", "chat"); }),
            "chat line 3: unterminated string literal [load_failed]");
  EXPECT_EQ(error_of([] { jinja::Template("{{ x is nosuchtest }}", "chat"); }),
            "chat line 1: no test named 'nosuchtest' [load_failed]");
  // Found by the chat_template fuzzer: trailing whitespace was stripped by walking code points
  // back over invalid UTF-8, past the start of the buffer.
  EXPECT_EQ(error_of([] { jinja::Template("ok\n{{- 'a' }}\xe2\x80 \n{%- if x %}{% endif %}", "chat"); }),
            "chat line 2: the template is not valid UTF-8 (byte 13) [load_failed]");
  EXPECT_EQ(error_of([] { jinja::Template("\x80", "chat"); }),
            "chat line 1: the template is not valid UTF-8 (byte 0) [load_failed]");
  // Found by the chat_template fuzzer: a \x escape without hex digits threw std::stoul's
  // invalid_argument instead of a template error; "\x-1" was read as a huge code point.
  EXPECT_EQ(error_of([] { jinja::Template("\n{{ 'a\\xZZ' }}", "chat"); }),
            "chat line 2: truncated \\x escape in string literal: it needs 2 hex digits [load_failed]");
  EXPECT_EQ(error_of([] { jinja::Template("{{ '\\x-1' }}", "chat"); }),
            "chat line 1: truncated \\x escape in string literal: it needs 2 hex digits [load_failed]");
  EXPECT_EQ(error_of([] { jinja::Template("{{ '\\u12' }}", "chat"); }),
            "chat line 1: truncated \\u escape in string literal: it needs 4 hex digits [load_failed]");
  EXPECT_EQ(error_of([] { jinja::Template("{{ '\\U00110000' }}", "chat"); }),
            "chat line 1: \\U escape in string literal is beyond U+10FFFF [load_failed]");
  EXPECT_EQ(jinja::Template("{{ '\\x41\\u00e9\\U0001F600\\101\\7' }}", "chat").render({}), "A\u00e9\U0001F600A\a");
  const jinja::Dict vars = jinja::Value::from_json(j(R"({"m": {"role": "user"}})")).as_dict();
  EXPECT_EQ(error_of([&] { jinja::Template("ok\n{{ m.content.strip() }}", "chat").render(vars); }),
            "chat line 2: 'dict object' has no attribute 'content' [invalid_argument]");
  EXPECT_EQ(error_of([&] { jinja::Template("\n{{ 1 + 'a' }}", "chat").render(vars); }),
            "chat line 2: unsupported operand type(s) for +: 'int object' and 'str object' [invalid_argument]");
}

// Hostile templates end with an error naming the line and the bound (template.h), never a stack
// overflow, a hang or unbounded memory (tests/fuzz/chat_template_fuzzer, seeds/chat_template).
TEST(ChatTemplateTest, HostileTemplatesAreBoundedWithClearErrors) {
  const jinja::Dict none;
  auto render = [&](const std::string& source) {
    return error_of([&] { jinja::Template(source, "chat").render(none); });
  };
  EXPECT_EQ(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}\n{{ f(0) }}"),
            "chat line 1: evaluation nested deeper than 1024 levels (a recursive macro?) [invalid_argument]");
  EXPECT_EQ(render("{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}"),
            "chat line 1: loops run more than 200000 iterations in one rendering (a huge or nested loop?) "
            "[invalid_argument]");
  EXPECT_EQ(render("{{ 'abcdefgh' * 1000000000 }}"),
            "chat line 1: '*' would repeat a string of 8 bytes 1000000000 times, over the limit of 67108864 bytes "
            "[invalid_argument]");
  EXPECT_EQ(render("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"),
            "chat line 1: a string of 134217728 bytes is over the limit of 67108864 bytes [invalid_argument]");
  EXPECT_EQ(render("{{ 9223372036854775807 + 1 }}"),
            "chat line 1: integer overflow in '+' (integers are 64-bit here) [invalid_argument]");
  EXPECT_EQ(render("{{ 2 ** 10000000000 }}"),
            "chat line 1: integer overflow in '**' (integers are 64-bit here) [invalid_argument]");
  EXPECT_EQ(render("{{ 1" + std::string() +
                   [] {
                     std::string s;
                     for (int i = 0; i < 5000; ++i) s += " + 1";
                     return s;
                   }() +
                   " }}"),
            "chat line 1: evaluation nested deeper than 1024 levels (a recursive macro?) [invalid_argument]");
  EXPECT_EQ(
      error_of([] { jinja::Template("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}", "chat"); }),
      "chat line 1: blocks or expressions nested deeper than 256 [load_failed]");
  EXPECT_EQ(error_of([] { jinja::Template("{{ 99999999999999999999 }}", "chat"); }),
            "chat line 1: integer literal 99999999999999999999 does not fit in 64 bits [load_failed]");
  // Found by the chat_template fuzzer: a namespace made to hold itself was printed by recursing
  // until the stack overflowed (and was never freed).
  EXPECT_EQ(render("{% set ns = namespace(s='x') %}\n{% set ns.s = ns, ns.s %}{{ ns }}"),
            "chat line 2: a value nested deeper than 512 levels (a namespace that holds itself?) [invalid_argument]");
  EXPECT_EQ(
      render("{% set a = namespace(v=1) %}{% set b = namespace(v=[a]) %}{% set a.v = b %}{{ a == b }}{{ a.v.v }}"),
      "chat line 1: a value nested deeper than 512 levels (a namespace that holds itself?) [invalid_argument]");
  EXPECT_EQ(render("{% set ns = namespace(x=[]) %}{% for i in range(100000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
            "chat line 1: a list or dict nested deeper than 512 levels [invalid_argument]");
  EXPECT_EQ(jinja::Template("{% set ns = namespace(x=[]) %}{% for i in range(511) %}{% set ns.x = [ns.x] %}"
                            "{% endfor %}{{ (ns.x | tojson)[:4] }}{{ (ns.x | string | length) }}",
                            "chat")
                .render(none),
            "[[[[1024");
  std::string deep_json;
  for (int i = 0; i < 100000; ++i) deep_json += "[";
  for (int i = 0; i < 100000; ++i) deep_json += "]";
  EXPECT_EQ(error_of([&] { jinja::Value::from_json(j(deep_json)); }),
            "a template variable is JSON nested deeper than 512 levels [invalid_argument]");
  // A template within the bounds still renders: 64 levels of blocks, a long loop.
  std::string deep;
  for (int i = 0; i < 64; ++i) deep += "{% if true %}";
  deep += "x";
  for (int i = 0; i < 64; ++i) deep += "{% endif %}";
  EXPECT_EQ(jinja::Template(deep, "chat").render(none), "x");
  EXPECT_EQ(jinja::Template("{% for i in range(10000) %}{% endfor %}{{ 'ok' }}", "chat").render(none), "ok");
}

TEST(ChatTemplateTest, RaiseExceptionSurfacesItsMessage) {
  const ChatTemplate chat(
      "{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
      "{{ raise_exception('Conversation roles must be user or assistant, got ' + m.role) }}{% endif %}{% endfor %}",
      "chat");
  EXPECT_EQ(error_of([&] { chat.apply(j(R"([{"role": "user", "content": "x"}, {"role": "robot"}])"), nullptr, true); }),
            "Conversation roles must be user or assistant, got robot [invalid_argument]");
  EXPECT_EQ(chat.apply(j(R"([{"role": "user", "content": "x"}])"), nullptr, true), "");
}

TEST(ChatTemplateTest, LoadsChatTemplateJinjaAndNamedTemplates) {
  TempDir dir;
  EXPECT_FALSE(ChatTemplate::load(dir.path()).has_value());
  std::ofstream(dir.path() / "tokenizer_config.json") << R"({"eos_token": {"content": "</s>"}, "chat_template": [
      {"name": "default", "template": "D{{ eos_token }}"}, {"name": "tool_use", "template": "T{{ tools | length }}"}]})";
  const auto named = ChatTemplate::load(dir.path());
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->apply(OrderedJson::array(), nullptr, false), "D</s>");
  EXPECT_EQ(named->apply(OrderedJson::array(), j(R"([{"a": 1}, {"b": 2}])"), false), "T2");
  // A chat_template.jinja file takes precedence; a single trailing newline is dropped as jinja2 does.
  std::ofstream(dir.path() / "chat_template.jinja") << "{% for m in messages %}[{{ m.content }}]{% endfor %}\n";
  EXPECT_EQ(ChatTemplate::load(dir.path())->apply(j(R"([{"content": "a"}, {"content": "b"}])"), nullptr, false),
            "[a][b]");
}

}  // namespace
}  // namespace omni::text
