// Chat formatting. We do not run Jinja: we recognise the template families we implement exactly
// (ChatML as used by Qwen2/Qwen2.5/Qwen3) and refuse anything else with a clear error, so a prompt
// is never silently mis-formatted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace pocket {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = true;  // Qwen3: false appends an empty <think></think> block
};

class ChatTemplate {
 public:
  enum class Family {
    kChatMl,  // plain ChatML: <|im_start|>role\ncontent<|im_end|>\n
    kQwen2,   // ChatML with Qwen2's default system prompt ("You are a helpful assistant.")
    kQwen25,  // ChatML with Qwen2.5's default system prompt ("You are Qwen, created by ...")
    kQwen3,   // ChatML with thinking control and reasoning stripped from past turns
  };

  // Recognises the family from the model's Jinja source: Qwen3 by <|im_start|>/<|im_end|> with
  // enable_thinking or <think>; Qwen2.5 and Qwen2 by their default system prompts; plain ChatML by
  // <|im_start|>/<|im_end|> alone. Empty or unknown source (including ChatML that writes a system
  // prompt we do not know) is an error that says which families are supported.
  static StatusOr<ChatTemplate> Detect(std::string_view jinja_source);
  static ChatTemplate Of(Family family) { return ChatTemplate(family); }

  Family family() const { return family_; }
  std::string_view name() const;
  // Formats the conversation. Roles other than system/user/assistant are an error.
  StatusOr<std::string> Apply(const std::vector<ChatMessage>& messages,
                              const ChatOptions& options = {}) const;

 private:
  explicit ChatTemplate(Family family) : family_(family) {}
  Family family_;
};

}  // namespace pocket
