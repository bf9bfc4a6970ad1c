// The response half of serve/openai.h: OpenAI's error bodies, completion objects and stream
// chunks (openai.cc parses the requests).
#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/str.h"
#include "serve/openai.h"

namespace pocket::serve {

using nlohmann::json;

namespace {

// Invalid UTF-8 (a model's partial character, a client's bytes echoed in a message) becomes U+FFFD
// rather than an exception.
std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string ErrorJson(const ApiError& e) {
  json err = {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}};
  return Dump(json{{"error", std::move(err)}});
}

std::string_view FinishReason(StopReason reason) {
  switch (reason) {
    case StopReason::kMaxTokens:
    case StopReason::kContextFull:
    case StopReason::kCancelled:  // cut short (a drain's timeout): never "stop"
      return "length";
    default:
      return "stop";
  }
}

Usage UsageOf(const GenerateResult& r, size_t prompt_tokens) {
  Usage u;
  u.prompt_tokens = static_cast<int32_t>(prompt_tokens);
  u.completion_tokens = static_cast<int32_t>(r.tokens.size());
  u.cached_tokens = r.n_reused_tokens;
  return u;
}

namespace {

json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json Head(Endpoint endpoint, const ResponseIds& ids, bool chunk) {
  std::string object = endpoint == Endpoint::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return {{"id", ids.id}, {"object", object}, {"created", ids.created}, {"model", ids.model}};
}

std::string Event(const json& j) {
  return StrCat("data: ", Dump(j), "\n\n");
}

// A token's bytes as OpenAI gives them: "bytes" (the UTF-8 bytes as integers) beside the text.
json Bytes(std::string_view token) {
  json b = json::array();
  for (char c : token) b.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return b;
}

// OpenAI writes -9999 for a probability that underflows.
double Finite(float lp) {
  return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0;
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}], "refusal": null}.
// Completions: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}.
json LogprobsJson(Endpoint endpoint, const std::vector<TokenLogprob>& lps, size_t text_offset) {
  if (endpoint == Endpoint::kChat) {
    json content = json::array();
    for (const TokenLogprob& t : lps) {
      json top = json::array();
      for (const auto& [tok, lp] : t.top) {
        top.push_back({{"token", tok}, {"logprob", Finite(lp)}, {"bytes", Bytes(tok)}});
      }
      content.push_back({{"token", t.token},
                         {"logprob", Finite(t.logprob)},
                         {"bytes", Bytes(t.token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  size_t offset = text_offset;
  for (const TokenLogprob& t : lps) {
    tokens.push_back(t.token);
    token_logprobs.push_back(Finite(t.logprob));
    json alts = json::object();
    for (const auto& [tok, lp] : t.top) alts[tok] = Finite(lp);
    top.push_back(std::move(alts));
    offsets.push_back(offset);
    offset += t.token.size();
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top)},
          {"text_offset", std::move(offsets)}};
}

json ToolCallsJson(const std::vector<ToolCall>& calls, bool with_index) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c = {{"id", calls[i].id},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = i;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

std::string CompletionJson(Endpoint endpoint, const ResponseIds& ids,
                           const std::vector<Choice>& choices, const Usage& usage) {
  json j = Head(endpoint, ids, false);
  json out = json::array();
  for (const Choice& c : choices) {
    json choice = {{"index", c.index},
                   {"logprobs", c.with_logprobs ? LogprobsJson(endpoint, c.logprobs, 0) : json()},
                   {"finish_reason", c.finish_reason}};
    if (endpoint == Endpoint::kChat) {
      json message = {{"role", "assistant"},
                      {"content", c.null_content ? json() : json(c.text)},
                      {"refusal", nullptr}};
      if (!c.tool_calls.empty()) message["tool_calls"] = ToolCallsJson(c.tool_calls, false);
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c.text;
    }
    out.push_back(std::move(choice));
  }
  j["choices"] = std::move(out);
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string StreamRoleEvent(const ResponseIds& ids, int32_t index) {
  json j = Head(Endpoint::kChat, ids, true);
  j["choices"] = json::array({{{"index", index},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return Event(j);
}

std::string StreamTextEvent(Endpoint endpoint, const ResponseIds& ids, int32_t index,
                            std::string_view text, const std::vector<TokenLogprob>* logprobs) {
  json j = Head(endpoint, ids, true);
  json choice = {{"index", index},
                 {"logprobs", logprobs != nullptr ? LogprobsJson(endpoint, *logprobs, 0) : json()},
                 {"finish_reason", nullptr}};
  if (endpoint == Endpoint::kChat) {
    choice["delta"] = {{"content", std::string(text)}};
  } else {
    choice["text"] = std::string(text);
  }
  j["choices"] = json::array({std::move(choice)});
  return Event(j);
}

std::string StreamToolCallsEvent(const ResponseIds& ids, int32_t index,
                                 const std::vector<ToolCall>& calls) {
  json j = Head(Endpoint::kChat, ids, true);
  j["choices"] = json::array({{{"index", index},
                               {"delta", {{"tool_calls", ToolCallsJson(calls, true)}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return Event(j);
}

std::string StreamFinishEvent(Endpoint endpoint, const ResponseIds& ids, int32_t index,
                              std::string_view finish_reason) {
  json j = Head(endpoint, ids, true);
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", finish_reason}};
  if (endpoint == Endpoint::kChat) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  j["choices"] = json::array({std::move(choice)});
  return Event(j);
}

std::string StreamUsageEvent(Endpoint endpoint, const ResponseIds& ids, const Usage& usage) {
  json j = Head(endpoint, ids, true);
  j["choices"] = json::array();
  j["usage"] = UsageJson(usage);
  return Event(j);
}

}  // namespace pocket::serve
