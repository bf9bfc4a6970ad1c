#include "capi/chat_prompt.h"

#include <string_view>

#include "tokenizer/added_tokens.h"

namespace pocket::capi {
namespace {

// UTF-8 of a code point in the Basic Multilingual Plane above U+07FF (three bytes).
std::string Utf8Bmp(uint32_t cp) {
  std::string s;
  s += static_cast<char>(0xE0 | (cp >> 12));
  s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

// The control-token strings of the tokenizer: those Encode recognises only with parse_special.
struct ControlTokens {
  std::vector<std::string> texts;
  std::vector<int32_t> ids;
  AddedTokenMatcher matcher;  // its ids index `texts` and `ids`
};

ControlTokens FindControlTokens(const Tokenizer& tokenizer) {
  ControlTokens out;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    if (!tokenizer.IsSpecial(id)) continue;
    const std::string_view text = tokenizer.TokenBytes(id);
    if (text.empty()) continue;
    out.matcher.Add(text, static_cast<int32_t>(out.texts.size()), true);
    out.texts.emplace_back(text);
    out.ids.push_back(id);
  }
  out.matcher.Finalize();
  return out;
}

// A private-use character that occurs in none of the messages' content; it delimits placeholders.
StatusOr<std::string> PickMarker(const std::vector<ChatMessage>& messages) {
  for (uint32_t cp = 0xE000; cp <= 0xF8FF; ++cp) {
    const std::string marker = Utf8Bmp(cp);
    bool used = false;
    for (const ChatMessage& m : messages)
      used = used || m.content.find(marker) != std::string::npos;
    if (!used) return marker;
  }
  return InvalidArgumentError("the messages use every private-use character U+E000..U+F8FF");
}

// Each control-token string in `text` becomes marker + its index + marker.
std::string Hide(std::string_view text, const ControlTokens& controls, const std::string& marker) {
  std::string out;
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedTokenMatcher::Match m = controls.matcher.FindNext(text, pos, true);
    out.append(text.substr(pos, m.begin - pos));
    if (m.length == 0) break;
    out.append(marker).append(std::to_string(m.id)).append(marker);
    pos = m.begin + m.length;
  }
  return out;
}

// Undoes Hide.
std::string Restore(std::string_view text, const ControlTokens& controls,
                    const std::string& marker) {
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t open = text.find(marker, pos);
    if (open == std::string_view::npos) break;
    const size_t digits = open + marker.size();
    const size_t close = text.find(marker, digits);
    if (close == std::string_view::npos) break;  // not ours (cannot happen: see PickMarker)
    out.append(text.substr(pos, open - pos));
    out.append(controls.texts[std::stoul(std::string(text.substr(digits, close - digits)))]);
    pos = close + marker.size();
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace

StatusOr<ChatTemplate> ModelChatTemplate(const Tokenizer& tokenizer,
                                         const std::string& model_name) {
  if (tokenizer.spec().chat_template.empty()) {
    return FailedPreconditionError(
        model_name,
        " has no chat template, so it cannot format messages: pass a prompt instead, or load the "
        "model with a tokenizer that has one (tokenizer_path: a tokenizer.json with "
        "tokenizer_config.json beside it)");
  }
  return ChatTemplate::Detect(tokenizer.spec().chat_template);
}

StatusOr<PromptTokens> EncodePrompt(const Tokenizer& tokenizer, std::string_view text,
                                    bool parse_special) {
  EncodeOptions options;
  options.parse_special = parse_special;
  options.add_bos = tokenizer.spec().add_bos;
  PromptTokens out;
  POCKET_ASSIGN_OR_RETURN(out.ids, tokenizer.Encode(text, options));
  out.candidate_context = std::string(text);
  return out;
}

StatusOr<PromptTokens> EncodeChat(const Tokenizer& tokenizer, const ChatTemplate& chat_template,
                                  const std::vector<ChatMessage>& messages,
                                  const ChatOptions& options, bool parse_special) {
  if (parse_special) {
    POCKET_ASSIGN_OR_RETURN(std::string text, chat_template.Apply(messages, options));
    return EncodePrompt(tokenizer, text, true);
  }
  const ControlTokens controls = FindControlTokens(tokenizer);
  POCKET_ASSIGN_OR_RETURN(std::string marker, PickMarker(messages));
  std::vector<ChatMessage> hidden = messages;
  for (ChatMessage& m : hidden) m.content = Hide(m.content, controls, marker);
  // Control tokens left in the rendering are the template's own.
  POCKET_ASSIGN_OR_RETURN(std::string rendered, chat_template.Apply(hidden, options));
  PromptTokens out;
  if (tokenizer.spec().add_bos && tokenizer.spec().bos_id >= 0) {
    out.ids.push_back(tokenizer.spec().bos_id);
  }
  EncodeOptions plain;
  plain.parse_special = false;
  const std::string_view text = rendered;
  size_t pos = 0;
  while (true) {
    const AddedTokenMatcher::Match m = controls.matcher.FindNext(text, pos, true);
    std::string piece = Restore(text.substr(pos, m.begin - pos), controls, marker);
    POCKET_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer.Encode(piece, plain));
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    if (m.length == 0) {
      out.candidate_context = std::move(piece);
      break;
    }
    out.ids.push_back(controls.ids[static_cast<size_t>(m.id)]);
    pos = m.begin + m.length;
  }
  return out;
}

}  // namespace pocket::capi
