// Prompt tokens for the C API: plain text or a chat rendered with the model's template, with
// special-token strings in the caller's text recognised only when asked (parse_special).
//
// A chat is rendered by ChatTemplate into one string, so the template's own control tokens
// (<|im_start|>, <|im_end|>) and any the messages contain are indistinguishable in it. Without
// parse_special we therefore render the messages with every control-token string in their content
// replaced by a placeholder (private-use characters, absent from the content), split the rendered
// text at the control tokens that remain (the template's), encode the text between them with
// parse_special off after putting the original strings back, and emit the template's control
// tokens by id. That is exactly Encode(rendered, parse_special = true) for content without control
// strings, because Encode also splits at special tokens first and encodes the pieces separately.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pocket::capi {

struct PromptTokens {
  std::vector<int32_t> ids;  // the prompt (BOS first when the tokenizer adds one)
  // The text a candidate continues, for TokenizeCandidates: the whole prompt text, or for a chat
  // encoded without parse_special the rendered text after the template's last control token
  // (a candidate's tokens depend only on the text after the last special token).
  std::string candidate_context;
};

// The model's chat template; FailedPrecondition naming `model_name` when it has none.
StatusOr<ChatTemplate> ModelChatTemplate(const Tokenizer& tokenizer, const std::string& model_name);

// Plain text: Encode(text) with the tokenizer's BOS rule.
StatusOr<PromptTokens> EncodePrompt(const Tokenizer& tokenizer, std::string_view text,
                                    bool parse_special);

// A chat rendered with `chat_template` (generation prompt appended), as described above.
StatusOr<PromptTokens> EncodeChat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                  const std::vector<ChatMessage>& messages,
                                  const ChatOptions& options, bool parse_special);

}  // namespace pocket::capi
