// Fuzzes pocket serve's request parsers (src/serve/openai.h): the input is an endpoint byte (bit 0:
// chat or completions; bit 1: scoring instead, bit 2: classify) and a request body. Parsing must
// give a request or an API error with a 4xx status and a message, never a crash, an exception or a
// hang; an accepted request's fields are within their ranges.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "serve/openai.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if ((data[0] & 2) != 0) {
    // /v1/score (bit 2 clear) or /v1/classify: the same contract.
    const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
    pocket::serve::ApiLimits limits;
    limits.adapters = {"a"};
    pocket::serve::ScoreRequest request;
    const std::optional<pocket::serve::ApiError> error =
        pocket::serve::ParseScoreRequest((data[0] & 4) != 0, body, "m", limits, &request);
    if (error.has_value()) {
      if (error->http_status < 400 || error->http_status >= 500 || error->message.empty()) abort();
      return 0;
    }
    if ((data[0] & 4) == 0 && (request.candidates.empty() || request.candidates.size() > 64)) {
      abort();
    }
    return 0;
  }
  const auto endpoint =
      (data[0] & 1) != 0 ? pocket::serve::Endpoint::kChat : pocket::serve::Endpoint::kCompletion;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  pocket::serve::ApiLimits limits;
  pocket::serve::ApiRequest request;
  const std::optional<pocket::serve::ApiError> error =
      pocket::serve::ParseRequest(endpoint, body, "m", limits, &request);
  if (error.has_value()) {
    if (error->http_status < 400 || error->http_status >= 500 || error->message.empty()) abort();
    if (pocket::serve::ErrorJson(*error).empty()) abort();
    return 0;
  }
  const pocket::GenerateRequest& g = request.generate;
  if (g.max_tokens < 0 || g.max_tokens > limits.max_tokens) abort();
  if (!(g.sampling.temperature >= 0.0f && g.sampling.temperature <= 2.0f)) abort();
  if (!(g.sampling.top_p > 0.0f && g.sampling.top_p <= 1.0f)) abort();
  return 0;
}
