// The C API's prompt input: a prompt string or an array of C chat messages (exactly one, the
// other NULL) becomes the input of a runtime request (runtime/request.h), with the C API's
// wording for the errors whose remedy is one of its fields. The tokens themselves, the chat
// template and the parse_special rule for chats are the runtime's (EncodeRequestPrompt), shared
// with the CLI.
#pragma once

#include <cstddef>

#include "base/status.h"
#include "model/model.h"
#include "pocket/pocket.h"
#include "runtime/request.h"

namespace pocket::capi {

// The C API's wording: "<path> has no tokenizer; load it with pocket_model_params.tokenizer_path"
// and "<path> has no chat template, so it cannot format messages: ...".
RequestWording Wording(const Model& model);

// Sets request's input (prompt or messages), parse_special, enable_thinking and wording. Exactly
// one of prompt and messages (InvalidArgument naming "neither" or "both"); a message with a NULL
// role or content is InvalidArgument naming it; NULL messages with a count, or none, are an empty
// chat (EncodeRequestPrompt's "the chat has no messages").
Status SetInput(const Model& model, const char* prompt, const pocket_chat_message* messages,
                size_t n_messages, bool enable_thinking, bool parse_special,
                PromptRequest* request);

// The prompt's tokens for `prompt` or `messages`, as pocket_generate evaluates them.
StatusOr<PromptTokens> EncodeInput(const Model& model, const char* prompt,
                                   const pocket_chat_message* messages, size_t n_messages,
                                   bool enable_thinking, bool parse_special);

}  // namespace pocket::capi
