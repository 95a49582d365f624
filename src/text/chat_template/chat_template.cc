#include "text/chat_template/chat_template.h"

#include "base/error.h"

namespace omni::text {
namespace fs = std::filesystem;

ChatTemplate::ChatTemplate(std::string_view source, std::string name, OrderedJson special_tokens)
    : special_tokens_(std::move(special_tokens)) {
  templates_.emplace_back("default", jinja::Template(source, std::move(name)));
}

std::optional<ChatTemplate> ChatTemplate::load(const fs::path& model_dir) {
  OrderedJson config = OrderedJson::object();
  const fs::path config_file = model_dir / "tokenizer_config.json";
  if (fs::exists(config_file)) {
    try {
      config = OrderedJson::parse(read_text_file(config_file));
    } catch (const OrderedJson::exception& e) {
      throw_error(ErrorCode::kLoadFailed, "{}: {}", config_file.string(), e.what());
    }
  }
  // The special tokens transformers passes to the template (special_tokens_map).
  OrderedJson special = OrderedJson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    const OrderedJson& v = config[key];
    if (v.is_string()) special[key] = v;
    if (v.is_object() && v.contains("content")) special[key] = v["content"];
  }
  if (config.contains("additional_special_tokens"))
    special["additional_special_tokens"] = config["additional_special_tokens"];

  ChatTemplate result;
  result.special_tokens_ = special;
  const fs::path jinja_file = model_dir / "chat_template.jinja";
  if (fs::exists(jinja_file)) {
    result.templates_.emplace_back("default", jinja::Template(read_text_file(jinja_file), jinja_file.string()));
    return result;
  }
  if (!config.contains("chat_template") || config["chat_template"].is_null()) return std::nullopt;
  const OrderedJson& spec = config["chat_template"];
  const std::string source = config_file.string() + " chat_template";
  if (spec.is_string()) {
    result.templates_.emplace_back("default", jinja::Template(spec.get<std::string>(), source));
  } else if (spec.is_array()) {
    for (const OrderedJson& entry : spec) {
      if (!entry.is_object() || !entry.contains("name") || !entry.contains("template")) {
        throw_error(ErrorCode::kLoadFailed, "{}: every entry needs \"name\" and \"template\"", source);
      }
      const std::string name = entry["name"].get<std::string>();
      jinja::Template t(entry["template"].get<std::string>(), fmt::format("{} '{}'", source, name));
      if (name == "default") {
        result.templates_.emplace(result.templates_.begin(), name, std::move(t));
      } else {
        result.templates_.emplace_back(name, std::move(t));
      }
    }
    if (result.templates_.empty() || result.templates_.front().first != "default") {
      throw_error(ErrorCode::kLoadFailed, "{}: no template named 'default'", source);
    }
  } else {
    throw_error(ErrorCode::kLoadFailed, "{}: must be a string or a list of named templates", source);
  }
  return result;
}

std::string ChatTemplate::apply(const OrderedJson& messages, const OrderedJson& tools, bool add_generation_prompt,
                                const OrderedJson& kwargs) const {
  const jinja::Template* chosen = &templates_.front().second;
  if (!tools.is_null()) {
    for (const auto& [name, t] : templates_) {
      if (name == "tool_use") chosen = &t;
    }
  }
  jinja::Dict variables;
  auto set = [&](const std::string& key, jinja::Value value) {
    for (auto& [k, v] : variables) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
    variables.emplace_back(key, std::move(value));
  };
  for (const auto& [k, v] : special_tokens_.items()) set(k, jinja::Value::from_json(v));
  set("messages", jinja::Value::from_json(messages));
  set("tools", jinja::Value::from_json(tools));
  set("documents", jinja::Value::none());
  set("add_generation_prompt", jinja::Value(add_generation_prompt));
  if (kwargs.is_object()) {
    for (const auto& [k, v] : kwargs.items()) set(k, jinja::Value::from_json(v));
  }
  return chosen->render(variables);
}

ContentFormat ChatTemplate::content_format() const { return detect_content_format(templates_.front().second); }

}  // namespace omni::text
