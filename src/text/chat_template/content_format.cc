#include "text/chat_template/content_format.h"

#include <set>
#include <string>

namespace omni::text {
namespace {

// x.content or x['content'].
bool is_content_access(const jinja::Expr& e) {
  if (e.kind == jinja::Expr::Kind::kAttribute) return e.name == "content";
  if (e.kind == jinja::Expr::Kind::kSubscript && !e.slice && !e.items.empty() && e.items[0] &&
      e.items[0]->kind == jinja::Expr::Kind::kLiteral) {
    return e.items[0]->value.is_string() && e.items[0]->value.as_string() == "content";
  }
  return false;
}

// Whether `e` is a content access or a name bound to one (through filters such as `| trim` too).
bool names_content(const jinja::Expr* e, const std::set<std::string>& content_names) {
  if (e == nullptr) return false;
  if (is_content_access(*e)) return true;
  if (e->kind == jinja::Expr::Kind::kName) return content_names.count(e->name) > 0;
  if (e->kind == jinja::Expr::Kind::kFilter) return names_content(e->object.get(), content_names);
  return false;
}

bool loops_over_content(const jinja::Body& body, std::set<std::string>& content_names) {
  for (const jinja::NodePtr& node : body) {
    if (!node) continue;
    if (node->kind == jinja::Node::Kind::kSet && node->targets.size() == 1 && node->attribute.empty() &&
        names_content(node->expr.get(), content_names)) {
      content_names.insert(node->targets[0]);
    }
    if (node->kind == jinja::Node::Kind::kFor && names_content(node->expr.get(), content_names)) return true;
    if (loops_over_content(node->body, content_names) || loops_over_content(node->else_body, content_names)) {
      return true;
    }
    for (const auto& [condition, branch] : node->branches) {
      if (loops_over_content(branch, content_names)) return true;
    }
  }
  return false;
}

}  // namespace

ContentFormat content_format_from_name(std::string_view name) {
  return name == "openai" ? ContentFormat::kOpenai : ContentFormat::kString;
}

std::string_view content_format_name(ContentFormat format) {
  return format == ContentFormat::kOpenai ? "openai" : "string";
}

ContentFormat detect_content_format(const jinja::Template& chat_template) {
  std::set<std::string> content_names;
  return loops_over_content(chat_template.body(), content_names) ? ContentFormat::kOpenai : ContentFormat::kString;
}

}  // namespace omni::text
