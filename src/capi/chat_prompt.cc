#include "capi/chat_prompt.h"

#include <utility>
#include <vector>

namespace pocket::capi {

RequestWording Wording(const Model& model) {
  RequestWording w;
  w.no_tokenizer =
      model.source().path() + " has no tokenizer; load it with pocket_model_params.tokenizer_path";
  w.no_chat_template =
      model.source().path() +
      " has no chat template, so it cannot format messages: pass a prompt instead, or load the "
      "model with a tokenizer that has one (tokenizer_path: a tokenizer.json with "
      "tokenizer_config.json beside it)";
  return w;
}

Status SetInput(const Model& model, const char* prompt, const pocket_chat_message* messages,
                size_t n_messages, bool enable_thinking, bool parse_special,
                PromptRequest* request) {
  const bool has_messages = messages != nullptr || n_messages > 0;
  if ((prompt == nullptr) == !has_messages) {
    return InvalidArgumentError("pass exactly one of a prompt and messages (the other NULL), got ",
                                prompt == nullptr ? "neither" : "both");
  }
  request->parse_special = parse_special;
  request->chat.enable_thinking = enable_thinking;
  request->wording = Wording(model);
  if (prompt != nullptr) {
    request->prompt = prompt;
    return Status::Ok();
  }
  std::vector<ChatMessage> chat;
  for (size_t i = 0; messages != nullptr && i < n_messages; ++i) {
    if (messages[i].role == nullptr || messages[i].content == nullptr) {
      return InvalidArgumentError("message ", i, " has a NULL role or content");
    }
    chat.push_back({messages[i].role, messages[i].content});
  }
  request->messages = std::move(chat);
  return Status::Ok();
}

StatusOr<PromptTokens> EncodeInput(const Model& model, const char* prompt,
                                   const pocket_chat_message* messages, size_t n_messages,
                                   bool enable_thinking, bool parse_special) {
  PromptRequest request;
  POCKET_RETURN_IF_ERROR(
      SetInput(model, prompt, messages, n_messages, enable_thinking, parse_special, &request));
  return EncodeRequestPrompt(model, request);
}

}  // namespace pocket::capi
