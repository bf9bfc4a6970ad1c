// The OpenAI-compatible request and response shapes (docs/architecture.md, "Server"): a request
// body becomes a GenerateRequest (runtime/request.h) or an ApiError naming the parameter at fault;
// a result becomes a completion object or the chunks of a stream. No HTTP here (server.cc), so the
// parser can be fuzzed and tested alone.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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
  int32_t max_tokens = 4096;  // the most a request may ask for (and the default of chat)
  int32_t n_ctx = 4096;       // the sessions' context: a prompt + max_tokens beyond it is a 400
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
};

// Parses a /v1/chat/completions or /v1/completions body. Unknown fields are ignored; a known field
// with a wrong type or value is a 400 naming it; a model other than `served_model` is a 404.
std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body,
                                     std::string_view served_model, const ApiLimits& limits,
                                     ApiRequest* out);

// "stop" for an end of text or a stop string, "length" for a token budget or a full context.
std::string_view FinishReason(StopReason reason);

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
std::string CompletionJson(Endpoint endpoint, const ResponseIds& ids, const GenerateResult& r,
                           const Usage& usage);
// One "data: {...}\n\n" event of a stream: the first (chat: the role), a piece of text, the last
// (its finish reason), and the usage (empty choices).
std::string StreamRoleEvent(const ResponseIds& ids);
std::string StreamTextEvent(Endpoint endpoint, const ResponseIds& ids, std::string_view text);
std::string StreamFinishEvent(Endpoint endpoint, const ResponseIds& ids, StopReason reason);
std::string StreamUsageEvent(Endpoint endpoint, const ResponseIds& ids, const Usage& usage);
inline constexpr std::string_view kStreamDone = "data: [DONE]\n\n";

}  // namespace pocket::serve
