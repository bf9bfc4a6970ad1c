// Chat formats: everything a chat template family says about tools, in one place (as llama.cpp's
// common/chat does): the prompt that offers the tools, how past calls and their responses are
// written into the conversation, the grammar that constrains a call the model makes, and the
// parser that turns its output back into calls. The template itself (turns, thinking) is
// tokenizer/chat_template.h; serve/openai.cc maps OpenAI's JSON onto what is here.
//
// Every family pocket recognises (ChatML, Qwen2, Qwen2.5, Qwen3) calls tools in Qwen's (Hermes)
// format: the tools as JSON lines inside <tools></tools> in the system prompt, and each call
//   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
// with several calls of one turn (parallel tool calls) joined by "\n". A tool's response is
// <tool_response>\nCONTENT\n</tool_response> in a user turn; consecutive responses share one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "generate/constraint.h"
#include "tokenizer/chat_template.h"

namespace pocket::chat {

// A function the model may call.
struct Tool {
  std::string name;
  std::string parameters;  // JSON Schema text of its arguments
  // The tool as the client wrote it ({"type": "function", "function": {...}}), JSON text with
  // its keys in the client's order: what the prompt shows the model.
  std::string json;
};

// A call: one the model made (parsed from its output) or one of the conversation's past turns.
struct ToolCall {
  std::string id;  // the API's (call_...); the format itself carries none
  std::string name;
  std::string arguments;  // JSON text of an object
};

// Which calls a constrained output may hold.
struct CallRule {
  std::string only;       // the one tool that may be called (empty: any of them)
  bool parallel = false;  // one or more calls in a row; false: exactly one
  int32_t max_calls = 0;  // with parallel: at most this many (0: no limit)
};

// The text that opens a call in the model's output (Qwen's format).
inline constexpr std::string_view kToolCallOpen = "<tool_call>";

class ChatFormat {
 public:
  // The tool format of a template family (Hermes for all of them).
  static ChatFormat Of(ChatTemplate::Family family);
  // The format a request is read with before the model's template is known: the one every
  // recognised family shares.
  static ChatFormat Default() { return Of(ChatTemplate::Family::kQwen3); }
  ChatTemplate::Family family() const { return family_; }

  // Prompt side.
  // The tools offered: appended to the system message (or, without one, a system message of
  // their own in front).
  void AddTools(const std::vector<Tool>& tools, std::vector<ChatMessage>* messages) const;
  // An assistant message's calls, written after its content as the model writes them. Each call's
  // arguments are written as they are given (TemplateJson gives the template's spelling of a JSON
  // value).
  void AppendCalls(const std::vector<ToolCall>& calls, std::string* content) const;
  // A tool's response to a call: a user turn of its own, or, when the message before was a tool
  // response too (`after_tool`), joined to that turn.
  void AddToolResponse(std::string_view content, bool after_tool,
                       std::vector<ChatMessage>* messages) const;

  // Output side.
  // The text the model writes to open a call ("<tool_call>\n"): a turn forced to call starts with
  // it, and a call the model opens continues after it. CallConstraint constrains what follows,
  // ParseCalls reads it.
  std::string_view CallPrefix() const { return "<tool_call>\n"; }
  // The JSON Schema of one call: {"name": const, "arguments": the tool's parameters} for each tool
  // the rule allows (anyOf when several).
  std::string CallSchema(const std::vector<Tool>& tools, const CallRule& rule) const;
  // The constraint on the text after CallPrefix: one call, or (parallel) several in a row, the
  // last one optionally closed.
  ConstraintSpec CallConstraint(const std::vector<Tool>& tools, const CallRule& rule) const;
  // The calls in `text`, the output after CallPrefix (ids empty); nullopt when it is not one or
  // more whole calls (a budget that ran out inside one).
  std::optional<std::vector<ToolCall>> ParseCalls(std::string_view text) const;

 private:
  explicit ChatFormat(ChatTemplate::Family family) : family_(family) {}
  ChatTemplate::Family family_;
};

// A JSON value as the chat templates' `tojson` writes it (Python's json.dumps: ", " and ": "
// separators, keys in the order given, non-ASCII as it is); `json_text` as it is when it does not
// parse.
std::string TemplateJson(std::string_view json_text);

}  // namespace pocket::chat
