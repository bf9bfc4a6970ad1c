// The OpenAI-compatible request and response shapes (docs/architecture.md, "Server"): a request
// body becomes a GenerateRequest (runtime/request.h) or an ApiError naming the parameter at fault;
// a result becomes a completion object or the chunks of a stream. No HTTP here (server.cc), so the
// parser can be fuzzed and tested alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/chat_format.h"
#include "runtime/generate_types.h"
#include "runtime/request.h"

namespace pocket::serve {

// An OpenAI error object: {"error": {"message", "type", "param", "code"}} with its HTTP status.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // empty: null
  std::string code;   // empty: null
};
std::string ErrorJson(const ApiError& e);
// The error for a Status from the runtime (InvalidArgument and OutOfRange: 400; ResourceExhausted:
// 503; the rest 500), `param` when the request field is known.
ApiError ErrorFromStatus(const Status& status, std::string_view param = {});

enum class Endpoint { kChat, kCompletion };

struct ApiLimits {
  int32_t max_tokens = 4096;     // the most a request may ask for (and the default of chat)
  int32_t n_ctx = 4096;          // the sessions' context: a prompt + max_tokens beyond it is a 400
  int32_t max_n = 1;             // choices per request at most (the server's --parallel)
  int32_t vocab_size = 1 << 30;  // logit_bias keys are token ids below it
  std::vector<std::string> adapters;  // names a request may pick ("MODEL:NAME", "lora")
  int32_t max_tool_calls = 0;         // calls in one turn at most (0: no limit)
};

// A function the model may call (chat "tools"): its name, its parameters' JSON Schema ("{}" when
// the tool gives none) and its JSON as the prompt shows it.
using chat::Tool;

enum class ToolChoice {
  kNone,      // no tools offered to the model (none given, or tool_choice "none")
  kAuto,      // the model may answer or call: a call it starts is constrained to the tools
  kRequired,  // the model must call one of the tools
  kFunction,  // the model must call tool_choice.function.name
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;
  GenerateRequest generate;  // prompt or messages, sampling, seed, stop, max_tokens, constraint
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  // llama.cpp's server extension: generate through end-of-text tokens (benchmarks, tests).
  bool ignore_eos = false;
  // Tools, offered in the prompt in the chat format's way (chat/chat_format.h: Qwen's Hermes
  // format, a call is <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>).
  std::vector<Tool> tools;
  ToolChoice tool_choice = ToolChoice::kNone;
  // parallel_tool_calls: a turn may hold several calls. False unless the request says true (OpenAI
  // defaults to true; llama.cpp's server, like pocket, to false: a small model the grammar lets
  // call again tends to go on calling until its token budget runs out).
  bool parallel_tool_calls = false;
  // The constraint on the calls after the format's call prefix: each call's JSON matches one of
  // the tools the choice allows; one call, or several in a row. With kRequired / kFunction it is
  // generate.constraint.
  ConstraintSpec call_constraint;
  // Text the assistant's turn starts with, after the chat template's generation prompt (a forced
  // call: the call prefix "<tool_call>\n", control tokens recognised).
  std::string assistant_prefix;
  // logprobs / top_logprobs: the chosen tokens' log-probabilities and the top alternatives (0-20).
  bool logprobs = false;
  int32_t top_logprobs = 0;
  int32_t n = 1;        // choices (each its own request, seeds seed, seed + 1, ...)
  std::string adapter;  // the adapter picked (empty: the base model)
  // vLLM's cache_salt: the prefix cache's namespace for this request (at most 256 bytes); requests
  // reuse only contexts computed under the same salt (none: the shared one), so cached_tokens
  // cannot reveal another tenant's prompt.
  std::string cache_salt;
  // vLLM's priority: requests waiting for a slot are admitted lower values first, equal ones in
  // the order they came (default 0).
  int32_t priority = 0;
};

// The text that opens a tool call in the model's output (the chat format's).
using chat::kToolCallOpen;

// Parses a /v1/chat/completions or /v1/completions body. Unknown fields are ignored; a known field
// with a wrong type or value is a 400 naming it; a model other than `served_model` is a 404; a
// body that nests deeper than kMaxJsonNesting (64) levels is a 400 before it is parsed.
std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body,
                                     std::string_view served_model, const ApiLimits& limits,
                                     ApiRequest* out);

// pocket's /v1/score: candidate continuations of a prompt ("prompt" text or chat "messages"),
// ranked in one forward pass; and /v1/classify: the labels of the model's or the adapter's head.
struct ScoreRequest {
  std::string model;
  std::string adapter;
  PromptRequest prompt;
  bool chat = false;                    // "messages" (rendered with the generation prompt)
  std::vector<std::string> candidates;  // /v1/score: 1 to 64 non-empty strings
  std::string cache_salt;               // as ApiRequest::cache_salt
};
std::optional<ApiError> ParseScoreRequest(bool classify, std::string_view body,
                                          std::string_view served_model, const ApiLimits& limits,
                                          ScoreRequest* out);

// "stop" for an end of text or a stop string, "length" for a token budget or a full context.
std::string_view FinishReason(StopReason reason);

// A call of a response: id (call_...), name, arguments (JSON text of an object).
using chat::ToolCall;

// One token's log-probability and, with top_logprobs, the most likely alternatives at its step.
struct TokenLogprob {
  std::string token;  // the token's bytes (may be part of a UTF-8 character)
  float logprob = 0.0f;
  std::vector<std::pair<std::string, float>> top;
};

// One choice of a response.
struct Choice {
  int32_t index = 0;
  std::string text;
  bool null_content = false;  // chat: "content": null (a message of tool calls)
  std::vector<ToolCall> tool_calls;
  std::string_view finish_reason = "stop";
  bool with_logprobs = false;
  std::vector<TokenLogprob> logprobs;
};

struct ResponseIds {
  std::string id;  // chatcmpl-... or cmpl-...
  int64_t created = 0;
  std::string model;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_tokens = 0;
};
Usage UsageOf(const GenerateResult& r, size_t prompt_tokens);

// A whole (non-streamed) response.
std::string CompletionJson(Endpoint endpoint, const ResponseIds& ids,
                           const std::vector<Choice>& choices, const Usage& usage);
// One "data: {...}\n\n" event of a stream, for choice `index`: the first (chat: the role), a piece
// of text (with its tokens' log-probabilities when asked), a message's tool calls, the last (its
// finish reason), and the usage (empty choices).
std::string StreamRoleEvent(const ResponseIds& ids, int32_t index);
std::string StreamTextEvent(Endpoint endpoint, const ResponseIds& ids, int32_t index,
                            std::string_view text, const std::vector<TokenLogprob>* logprobs);
std::string StreamToolCallsEvent(const ResponseIds& ids, int32_t index,
                                 const std::vector<ToolCall>& calls);
std::string StreamFinishEvent(Endpoint endpoint, const ResponseIds& ids, int32_t index,
                              std::string_view finish_reason);
std::string StreamUsageEvent(Endpoint endpoint, const ResponseIds& ids, const Usage& usage);
inline constexpr std::string_view kStreamDone = "data: [DONE]\n\n";

}  // namespace pocket::serve
