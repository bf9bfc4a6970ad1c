#include "tokenizer/chat_template.h"

namespace pocket {
namespace {

constexpr std::string_view kQwen25DefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr std::string_view kQwen2DefaultSystem = "You are a helpful assistant.";
constexpr std::string_view kSupported =
    "supported: ChatML, Qwen2, Qwen2.5 and Qwen3 templates (<|im_start|>/<|im_end|>)";

bool Contains(std::string_view haystack, std::string_view needle) {
  return haystack.find(needle) != std::string_view::npos;
}

// Python's str.strip / lstrip / rstrip with a set of characters.
std::string_view LStrip(std::string_view s, std::string_view chars) {
  const size_t first = s.find_first_not_of(chars);
  return first == std::string_view::npos ? std::string_view() : s.substr(first);
}
std::string_view RStrip(std::string_view s, std::string_view chars) {
  const size_t last = s.find_last_not_of(chars);
  return last == std::string_view::npos ? std::string_view() : s.substr(0, last + 1);
}

void AppendTurn(std::string_view role, std::string_view content, std::string* out) {
  out->append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
}

// The Qwen3 template's handling of one assistant message: the reasoning is split off at the last
// "</think>"; it is shown (as <think>...</think>) only after the last user query.
void AppendQwen3Assistant(std::string_view content_in, bool after_last_query, bool is_last,
                          std::string* out) {
  std::string_view content = content_in;
  std::string_view reasoning;
  const size_t close = content_in.find("</think>");
  if (close != std::string_view::npos) {
    // content.split('</think>')[-1].lstrip('\n')
    content = LStrip(content_in.substr(content_in.rfind("</think>") + 8), "\n");
    // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
    std::string_view before = RStrip(content_in.substr(0, close), "\n");
    const size_t open = before.rfind("<think>");
    if (open != std::string_view::npos) before = before.substr(open + 7);
    reasoning = LStrip(before, "\n");
  }
  out->append("<|im_start|>assistant\n");
  if (after_last_query && (is_last || !reasoning.empty())) {
    out->append("<think>\n").append(RStrip(LStrip(reasoning, "\n"), "\n"));
    out->append("\n</think>\n\n").append(LStrip(content, "\n"));
  } else {
    out->append(content);
  }
  out->append("<|im_end|>\n");
}

}  // namespace

StatusOr<ChatTemplate> ChatTemplate::Detect(std::string_view source) {
  if (source.empty()) {
    return NotFoundError("the model has no chat template (", kSupported, ")");
  }
  const bool chatml = Contains(source, "<|im_start|>") && Contains(source, "<|im_end|>");
  if (!chatml) {
    return UnimplementedError("unrecognised chat template (", kSupported, ")");
  }
  if (Contains(source, "enable_thinking") || Contains(source, "<think>")) {
    return ChatTemplate(Family::kQwen3);
  }
  if (Contains(source, kQwen25DefaultSystem)) return ChatTemplate(Family::kQwen25);
  if (Contains(source, kQwen2DefaultSystem)) return ChatTemplate(Family::kQwen2);
  // A template that writes a system turn of its own has a default system prompt we do not know;
  // formatting without it would silently change the prompt.
  if (Contains(source, "<|im_start|>system")) {
    return UnimplementedError("ChatML template with an unrecognised default system prompt (",
                              kSupported, ")");
  }
  return ChatTemplate(Family::kChatMl);
}

std::string_view ChatTemplate::name() const {
  switch (family_) {
    case Family::kChatMl:
      return "chatml";
    case Family::kQwen2:
      return "qwen2";
    case Family::kQwen25:
      return "qwen2.5";
    case Family::kQwen3:
      return "qwen3";
  }
  return "unknown";
}

StatusOr<std::string> ChatTemplate::Apply(const std::vector<ChatMessage>& messages,
                                          const ChatOptions& options) const {
  if (messages.empty()) return InvalidArgumentError("chat has no messages");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      return InvalidArgumentError("message ", i, " has role \"", role,
                                  "\"; supported roles are system, user and assistant");
    }
  }
  std::string out;
  const bool has_system = messages[0].role == "system";
  if (family_ == Family::kQwen2 && !has_system) AppendTurn("system", kQwen2DefaultSystem, &out);
  if (family_ == Family::kQwen25 && !has_system) AppendTurn("system", kQwen25DefaultSystem, &out);
  if (family_ != Family::kQwen3) {
    for (const ChatMessage& message : messages) AppendTurn(message.role, message.content, &out);
  } else {
    // The last user message (tool responses aside, which we do not produce) is the query.
    size_t last_query = messages.size() - 1;
    for (size_t i = messages.size(); i-- > 0;) {
      const std::string& content = messages[i].content;
      const bool tool_response =
          content.starts_with("<tool_response>") && content.ends_with("</tool_response>");
      if (messages[i].role == "user" && !tool_response) {
        last_query = i;
        break;
      }
    }
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& message = messages[i];
      if (message.role == "assistant") {
        AppendQwen3Assistant(message.content, i > last_query, i + 1 == messages.size(), &out);
      } else {
        AppendTurn(message.role, message.content, &out);
      }
    }
  }
  if (options.add_generation_prompt) {
    out.append("<|im_start|>assistant\n");
    if (family_ == Family::kQwen3 && !options.enable_thinking)
      out.append("<think>\n\n</think>\n\n");
  }
  return out;
}

}  // namespace pocket
