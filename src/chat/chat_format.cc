#include "chat/chat_format.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "base/json_nesting.h"
#include "base/str.h"

namespace pocket::chat {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::string_view kCallClose = "</tool_call>";
// Between two calls of one turn, and after the last one (optional: a one-call output the grammar
// ends at the JSON value is read the same).
constexpr std::string_view kCallSeparator = "\n</tool_call>\n<tool_call>\n";
constexpr std::string_view kCallEnd = "\n</tool_call>";

std::string PyJson(const ordered_json& j) {
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : j.items()) {
      if (!first) out += ", ";
      first = false;
      out += ordered_json(k).dump(-1, ' ', false, json::error_handler_t::replace);
      out += ": ";
      out += PyJson(v);
    }
    return out + "}";
  }
  if (j.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < j.size(); ++i) {
      if (i > 0) out += ", ";
      out += PyJson(j[i]);
    }
    return out + "]";
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// One call's JSON, {"name": ..., "arguments": {...}}; nullopt when it is not one.
std::optional<ToolCall> ParseCall(std::string_view json_text) {
  // The model's text: a schema with open values lets it nest as deep as its tokens go.
  if (JsonNestingDepth(json_text) > kMaxJsonNesting) return std::nullopt;
  const ordered_json j = ordered_json::parse(json_text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string() ||
      !j.contains("arguments") || !j["arguments"].is_object()) {
    return std::nullopt;
  }
  ToolCall c;
  c.name = j["name"].get<std::string>();
  // The arguments as the model wrote them (its key order), compact.
  c.arguments = j["arguments"].dump(-1, ' ', false, json::error_handler_t::replace);
  return c;
}

}  // namespace

std::string TemplateJson(std::string_view json_text) {
  const ordered_json j = ordered_json::parse(json_text, nullptr, false);
  return j.is_discarded() ? std::string(json_text) : PyJson(j);
}

ChatFormat ChatFormat::Of(ChatTemplate::Family family) {
  return ChatFormat(family);
}

void ChatFormat::AddTools(const std::vector<Tool>& tools,
                          std::vector<ChatMessage>* messages) const {
  // Qwen's template: the tools after the system prompt (or as the system prompt).
  std::string block =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
  for (const Tool& t : tools) block += StrCat("\n", TemplateJson(t.json));
  block +=
      "\n</tools>\n\nFor each function call, return a json object with function name and "
      "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
      "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  if (!messages->empty() && messages->front().role == "system") {
    messages->front().content += "\n\n" + block;
  } else {
    messages->insert(messages->begin(), ChatMessage{"system", std::move(block)});
  }
}

void ChatFormat::AppendCalls(const std::vector<ToolCall>& calls, std::string* content) const {
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0 || !content->empty()) content->append("\n");
    content->append(StrCat(kToolCallOpen, "\n{\"name\": \"", calls[i].name,
                           "\", \"arguments\": ", calls[i].arguments, "}\n", kCallClose));
  }
}

void ChatFormat::AddToolResponse(std::string_view content, bool after_tool,
                                 std::vector<ChatMessage>* messages) const {
  std::string response = StrCat("<tool_response>\n", content, "\n</tool_response>");
  if (after_tool && !messages->empty()) {
    messages->back().content += "\n" + response;
  } else {
    messages->push_back({"user", std::move(response)});
  }
}

std::string ChatFormat::CallSchema(const std::vector<Tool>& tools, const CallRule& rule) const {
  json alts = json::array();
  for (const Tool& t : tools) {
    if (!rule.only.empty() && t.name != rule.only) continue;
    alts.push_back(
        {{"type", "object"},
         {"properties", {{"name", {{"const", t.name}}}, {"arguments", json::parse(t.parameters)}}},
         {"required", {"name", "arguments"}},
         {"additionalProperties", false}});
  }
  return alts.size() == 1 ? alts[0].dump() : json{{"anyOf", std::move(alts)}}.dump();
}

ConstraintSpec ChatFormat::CallConstraint(const std::vector<Tool>& tools,
                                          const CallRule& rule) const {
  ConstraintSpec spec;
  spec.json_schema = CallSchema(tools, rule);
  if (rule.parallel) {
    spec.json_list.separator = std::string(kCallSeparator);
    spec.json_list.close = std::string(kCallEnd);
    spec.json_list.max_values = rule.max_calls;
  }
  return spec;
}

std::optional<std::vector<ToolCall>> ChatFormat::ParseCalls(std::string_view text) const {
  if (text.ends_with(kCallEnd)) text.remove_suffix(kCallEnd.size());
  std::vector<ToolCall> calls;
  // A raw newline is never inside a call's JSON (strings escape it; the grammar allows no other
  // whitespace), so the separators split the calls.
  while (true) {
    const size_t sep = text.find(kCallSeparator);
    std::optional<ToolCall> call = ParseCall(text.substr(0, sep));
    if (!call.has_value()) return std::nullopt;
    calls.push_back(std::move(*call));
    if (sep == std::string_view::npos) break;
    text.remove_prefix(sep + kCallSeparator.size());
  }
  return calls;
}

}  // namespace pocket::chat
