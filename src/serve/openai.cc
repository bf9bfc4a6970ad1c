#include "serve/openai.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/str.h"

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

ApiError ErrorFromStatus(const Status& status, std::string_view param) {
  ApiError e;
  e.message = std::string(status.message());
  e.param = std::string(param);
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kFailedPrecondition:  // what the model cannot do (no chat template)
      e.http_status = 400;
      break;
    case StatusCode::kResourceExhausted:
      e.http_status = 503;
      e.type = "server_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

namespace {

ApiError Bad(std::string param, std::string message) {
  ApiError e;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

// Reads an optional number field into *out within [lo, hi].
std::optional<ApiError> Number(const json& body, const char* name, double lo, double hi,
                               float* out) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return Bad(name, StrCat("'", name, "' must be a number"));
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) {
    return Bad(name, StrCat("'", name, "' must be between ", lo, " and ", hi, ", got ", v));
  }
  *out = static_cast<float>(v);
  return std::nullopt;
}

// Reads an optional integer field into *out within [lo, hi]; *given says whether it was there.
std::optional<ApiError> Integer(const json& body, const char* name, int64_t lo, int64_t hi,
                                int64_t* out, bool* given = nullptr) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return Bad(name, StrCat("'", name, "' must be an integer"));
  const int64_t v =
      it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX ? INT64_MAX : it->get<int64_t>();
  if (v < lo || v > hi) {
    return Bad(name, StrCat("'", name, "' must be between ", lo, " and ", hi, ", got ", v));
  }
  *out = v;
  if (given != nullptr) *given = true;
  return std::nullopt;
}

std::optional<ApiError> Boolean(const json& body, const char* name, bool* out) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return Bad(name, StrCat("'", name, "' must be a boolean"));
  *out = it->get<bool>();
  return std::nullopt;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts.
std::optional<ApiError> Content(const json& c, const std::string& param, std::string* out) {
  if (c.is_string()) {
    *out = c.get<std::string>();
    return std::nullopt;
  }
  if (c.is_null()) {
    out->clear();
    return std::nullopt;
  }
  if (!c.is_array()) return Bad(param, StrCat("'", param, "' must be a string or an array"));
  out->clear();
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    const std::string p = StrCat(param, "[", i, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return Bad(p, StrCat("'", p, "' must be an object with a 'type'"));
    }
    if (part["type"] != "text") {
      return Bad(p + ".type", StrCat("content parts of type '", part["type"].get<std::string>(),
                                     "' are not supported (only 'text')"));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return Bad(p + ".text", StrCat("'", p, ".text' must be a string"));
    }
    *out += part["text"].get<std::string>();
  }
  return std::nullopt;
}

std::optional<ApiError> ResponseFormat(const json& body, ConstraintSpec* spec) {
  const auto it = body.find("response_format");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object() || !it->contains("type") || !(*it)["type"].is_string()) {
    return Bad("response_format", "'response_format' must be an object with a 'type'");
  }
  const std::string type = (*it)["type"].get<std::string>();
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    spec->json_schema = R"({"type": "object"})";
    return std::nullopt;
  }
  if (type != "json_schema") {
    return Bad(
        "response_format.type",
        StrCat("'response_format.type' must be 'text', 'json_object' or 'json_schema', got '", type,
               "'"));
  }
  const auto js = it->find("json_schema");
  if (js == it->end() || !js->is_object()) {
    return Bad("response_format.json_schema", "'response_format.json_schema' must be an object");
  }
  if (js->contains("strict") && !(*js)["strict"].is_boolean() && !(*js)["strict"].is_null()) {
    return Bad("response_format.json_schema.strict",
               "'response_format.json_schema.strict' must be a boolean");
  }
  const auto schema = js->find("schema");
  if (schema == js->end() || schema->is_null()) {
    spec->json_schema = "{}";  // any JSON value (OpenAI allows a schema-less json_schema)
    return std::nullopt;
  }
  if (!schema->is_object() && !schema->is_boolean()) {
    return Bad("response_format.json_schema.schema",
               "'response_format.json_schema.schema' must be a JSON Schema object");
  }
  spec->json_schema = schema->dump();
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body_text,
                                     std::string_view served_model, const ApiLimits& limits,
                                     ApiRequest* out) {
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Bad("", "the request body is not valid JSON");
  if (!body.is_object()) return Bad("", "the request body must be a JSON object");
  ApiRequest r;
  r.endpoint = endpoint;
  GenerateRequest& g = r.generate;
  // OpenAI's defaults: temperature 1, top_p 1, no top_k or min_p.
  g.sampling.temperature = 1.0f;
  g.sampling.top_p = 1.0f;
  g.sampling.top_k = 0;
  g.sampling.min_p = 0.0f;
  g.parse_special = false;  // user text is text
  g.seed_bits = SeedBits::k32;

  const auto model = body.find("model");
  if (model == body.end() || !model->is_string()) {
    return Bad("model", "'model' is required and must be a string");
  }
  r.model = model->get<std::string>();
  if (r.model != served_model) {
    ApiError e = Bad("model", StrCat("The model '", r.model, "' does not exist (this server has '",
                                     served_model, "')"));
    e.http_status = 404;
    e.code = "model_not_found";
    return e;
  }

  if (endpoint == Endpoint::kChat) {
    const auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array() || messages->empty()) {
      return Bad("messages", "'messages' is required and must be a non-empty array");
    }
    std::vector<ChatMessage> ms;
    for (size_t i = 0; i < messages->size(); ++i) {
      const json& m = (*messages)[i];
      const std::string p = StrCat("messages[", i, "]");
      if (!m.is_object()) return Bad(p, StrCat("'", p, "' must be an object"));
      if (!m.contains("role") || !m["role"].is_string()) {
        return Bad(p + ".role", StrCat("'", p, ".role' must be a string"));
      }
      ChatMessage cm;
      cm.role = m["role"].get<std::string>();
      if (cm.role == "developer") cm.role = "system";
      if (cm.role != "system" && cm.role != "user" && cm.role != "assistant") {
        return Bad(p + ".role", StrCat("'", p, ".role' is '", cm.role,
                                       "'; supported: system, developer, user, assistant"));
      }
      if (auto e = Content(m.contains("content") ? m["content"] : json(nullptr), p + ".content",
                           &cm.content)) {
        return e;
      }
      ms.push_back(std::move(cm));
    }
    g.messages = std::move(ms);
    const auto kwargs = body.find("chat_template_kwargs");
    if (kwargs != body.end() && !kwargs->is_null()) {
      if (!kwargs->is_object()) {
        return Bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
      }
      if (auto e = Boolean(*kwargs, "enable_thinking", &g.chat.enable_thinking)) {
        e->param = "chat_template_kwargs.enable_thinking";
        return e;
      }
    }
  } else {
    const auto prompt = body.find("prompt");
    if (prompt == body.end() || prompt->is_null()) {
      return Bad("prompt", "'prompt' is required");
    }
    if (prompt->is_string()) {
      g.prompt = prompt->get<std::string>();
    } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
      std::vector<int32_t> ids;
      for (size_t i = 0; i < prompt->size(); ++i) {
        const json& t = (*prompt)[i];
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX) {
          return Bad("prompt", StrCat("'prompt[", i, "]' must be a token id"));
        }
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      g.prompt_tokens = std::move(ids);
    } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
      g.prompt = (*prompt)[0].get<std::string>();
    } else {
      return Bad("prompt",
                 "'prompt' must be a string or an array of token ids (one prompt per request)");
    }
  }

  if (auto e = Boolean(body, "stream", &r.stream)) return e;
  if (auto e = Boolean(body, "ignore_eos", &r.ignore_eos)) return e;
  const auto so = body.find("stream_options");
  if (so != body.end() && !so->is_null()) {
    if (!so->is_object()) return Bad("stream_options", "'stream_options' must be an object");
    if (auto e = Boolean(*so, "include_usage", &r.include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  int64_t max_tokens = endpoint == Endpoint::kChat ? limits.max_tokens : 16;
  bool given = false;
  if (auto e = Integer(body, "max_tokens", 0, INT32_MAX, &max_tokens, &given)) return e;
  if (auto e = Integer(body, "max_completion_tokens", 0, INT32_MAX, &max_tokens, &given)) return e;
  if (max_tokens > limits.max_tokens) {
    return Bad(body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens",
               StrCat("max_tokens is ", max_tokens, ", more than this server's limit of ",
                      limits.max_tokens));
  }
  r.max_tokens_given = given;
  g.max_tokens = static_cast<int32_t>(max_tokens);
  if (auto e = Number(body, "temperature", 0.0, 2.0, &g.sampling.temperature)) return e;
  if (auto e = Number(body, "top_p", 0.0, 1.0, &g.sampling.top_p)) return e;
  if (body.contains("top_p") && g.sampling.top_p <= 0.0f) {
    return Bad("top_p", "'top_p' must be greater than 0");
  }
  if (auto e = Number(body, "min_p", 0.0, 1.0, &g.sampling.min_p)) return e;
  int64_t top_k = 0;
  if (auto e = Integer(body, "top_k", 0, INT32_MAX, &top_k)) return e;
  g.sampling.top_k = static_cast<int32_t>(top_k);
  if (auto e = Number(body, "presence_penalty", -2.0, 2.0, &g.sampling.presence_penalty)) return e;
  if (auto e = Number(body, "frequency_penalty", -2.0, 2.0, &g.sampling.frequency_penalty)) {
    return e;
  }
  int64_t seed = 0;
  bool seeded = false;
  if (auto e = Integer(body, "seed", INT64_MIN, INT64_MAX, &seed, &seeded)) return e;
  g.random_seed = !seeded;
  g.sampling.seed = static_cast<uint64_t>(seed);
  int64_t n = 1;
  if (auto e = Integer(body, "n", 1, 128, &n)) return e;
  if (n != 1) return Bad("n", "'n' greater than 1 is not supported yet");
  const auto stop = body.find("stop");
  if (stop != body.end() && !stop->is_null()) {
    if (stop->is_string()) {
      if (!stop->get<std::string>().empty()) g.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > 16) return Bad("stop", "'stop' holds at most 16 strings");
      for (size_t i = 0; i < stop->size(); ++i) {
        if (!(*stop)[i].is_string()) return Bad("stop", StrCat("'stop[", i, "]' must be a string"));
        if (!(*stop)[i].get<std::string>().empty()) g.stop.push_back((*stop)[i].get<std::string>());
      }
    } else {
      return Bad("stop", "'stop' must be a string or an array of strings");
    }
  }
  if (auto e = ResponseFormat(body, &g.constraint)) return e;
  const auto user = body.find("user");
  if (user != body.end() && !user->is_null() && !user->is_string()) {
    return Bad("user", "'user' must be a string");
  }
  for (const char* unsupported : {"tools", "logprobs", "top_logprobs"}) {
    const auto it = body.find(unsupported);
    if (it == body.end() || it->is_null() || (it->is_boolean() && !it->get<bool>())) continue;
    if (it->is_array() && it->empty()) continue;
    return Bad(unsupported, StrCat("'", unsupported, "' is not supported yet"));
  }
  *out = std::move(r);
  return std::nullopt;
}

std::string_view FinishReason(StopReason reason) {
  switch (reason) {
    case StopReason::kMaxTokens:
    case StopReason::kContextFull:
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

}  // namespace

std::string CompletionJson(Endpoint endpoint, const ResponseIds& ids, const GenerateResult& r,
                           const Usage& usage) {
  json j = Head(endpoint, ids, false);
  json choice = {
      {"index", 0}, {"logprobs", nullptr}, {"finish_reason", FinishReason(r.stop_reason)}};
  if (endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", r.text}, {"refusal", nullptr}};
  } else {
    choice["text"] = r.text;
  }
  j["choices"] = json::array({std::move(choice)});
  j["usage"] = UsageJson(usage);
  return Dump(j);
}

std::string StreamRoleEvent(const ResponseIds& ids) {
  json j = Head(Endpoint::kChat, ids, true);
  j["choices"] = json::array({{{"index", 0},
                               {"delta", {{"role", "assistant"}, {"content", ""}}},
                               {"logprobs", nullptr},
                               {"finish_reason", nullptr}}});
  return Event(j);
}

std::string StreamTextEvent(Endpoint endpoint, const ResponseIds& ids, std::string_view text) {
  json j = Head(endpoint, ids, true);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
  if (endpoint == Endpoint::kChat) {
    choice["delta"] = {{"content", std::string(text)}};
  } else {
    choice["text"] = std::string(text);
  }
  j["choices"] = json::array({std::move(choice)});
  return Event(j);
}

std::string StreamFinishEvent(Endpoint endpoint, const ResponseIds& ids, StopReason reason) {
  json j = Head(endpoint, ids, true);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", FinishReason(reason)}};
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
