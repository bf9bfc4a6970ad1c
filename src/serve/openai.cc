#include "serve/openai.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <utility>

#include "base/json_nesting.h"
#include "base/str.h"
#include "generate/json_schema.h"

namespace pocket::serve {

using nlohmann::json;

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

// "model": the served name, or "NAME:ADAPTER" with an adapter of the server's; "lora": an adapter's
// name (the same as the model's suffix when both are given).
std::optional<ApiError> ModelAndAdapter(const json& body, std::string_view served_model,
                                        const ApiLimits& limits, std::string* model,
                                        std::string* adapter) {
  const auto m = body.find("model");
  if (m == body.end() || !m->is_string()) {
    return Bad("model", "'model' is required and must be a string");
  }
  *model = m->get<std::string>();
  std::string suffix;
  std::string_view base = *model;
  if (base != served_model && base.size() > served_model.size() &&
      base.substr(0, served_model.size()) == served_model && base[served_model.size()] == ':') {
    suffix = std::string(base.substr(served_model.size() + 1));
    base = base.substr(0, served_model.size());
  }
  if (base != served_model) {
    ApiError e = Bad("model", StrCat("The model '", *model, "' does not exist (this server has '",
                                     served_model, "')"));
    e.http_status = 404;
    e.code = "model_not_found";
    return e;
  }
  const auto lora = body.find("lora");
  if (lora != body.end() && !lora->is_null()) {
    if (!lora->is_string()) return Bad("lora", "'lora' must be the name of an adapter");
    if (!suffix.empty() && suffix != lora->get<std::string>()) {
      return Bad("lora", StrCat("'lora' is '", lora->get<std::string>(), "' but 'model' names '",
                                suffix, "'"));
    }
    suffix = lora->get<std::string>();
  }
  if (!suffix.empty()) {
    bool found = false;
    for (const std::string& a : limits.adapters) found = found || a == suffix;
    if (!found) {
      std::string names;
      for (const std::string& a : limits.adapters) names += StrCat(names.empty() ? "" : ", ", a);
      ApiError e = Bad(lora != body.end() && !lora->is_null() ? "lora" : "model",
                       StrCat("The adapter '", suffix, "' does not exist (this server has ",
                              names.empty() ? std::string("none") : names, ")"));
      e.http_status = 404;
      e.code = "model_not_found";
      return e;
    }
  }
  *adapter = std::move(suffix);
  return std::nullopt;
}

// "tools": [{"type": "function", "function": {"name", "description"?, "parameters"?}}], each
// with its JSON as the client wrote it (for the prompt).
std::optional<ApiError> Tools(const json& body, std::string_view body_text,
                              std::vector<Tool>* out) {
  const auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) return Bad("tools", "'tools' must be an array");
  if (it->size() > 128) return Bad("tools", "'tools' holds at most 128 tools");
  // The tools again with their keys in the order the client wrote them (json sorts them).
  const auto ordered = nlohmann::ordered_json::parse(body_text, nullptr, false);
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    const std::string p = StrCat("tools[", i, "]");
    if (!t.is_object() || !t.contains("type") || t["type"] != "function") {
      return Bad(p + ".type", StrCat("'", p, ".type' must be 'function'"));
    }
    const auto f = t.find("function");
    if (f == t.end() || !f->is_object()) {
      return Bad(p + ".function", StrCat("'", p, ".function' must be an object"));
    }
    const auto name = f->find("name");
    if (name == f->end() || !name->is_string() || name->get<std::string>().empty() ||
        name->get<std::string>().size() > 64) {
      return Bad(p + ".function.name",
                 StrCat("'", p, ".function.name' must be a string of 1 to 64 characters"));
    }
    for (const Tool& seen : *out) {
      if (seen.name == name->get<std::string>()) {
        return Bad(p + ".function.name", StrCat("two tools are named '", seen.name, "'"));
      }
    }
    Tool tool;
    tool.name = name->get<std::string>();
    const auto params = f->find("parameters");
    if (params == f->end() || params->is_null()) {
      tool.parameters = R"({"type": "object", "properties": {}, "additionalProperties": false})";
    } else if (!params->is_object()) {
      return Bad(p + ".function.parameters",
                 StrCat("'", p, ".function.parameters' must be a JSON Schema object"));
    } else {
      tool.parameters = params->dump();
      StatusOr<std::unique_ptr<Grammar>> compiled = CompileJsonSchema(tool.parameters);
      if (!compiled.ok()) {
        return Bad(p + ".function.parameters",
                   StrCat("'", p, ".function.parameters': ", compiled.status().message()));
      }
    }
    tool.json = ordered.is_object() ? ordered["tools"][i].dump() : t.dump();
    out->push_back(std::move(tool));
  }
  return std::nullopt;
}

// "tool_choice": "none" | "auto" | "required" | {"type": "function", "function": {"name"}} (its
// name in *only); "parallel_tool_calls": a boolean.
std::optional<ApiError> ToolChoiceOf(const json& body, ApiRequest* r, std::string* only) {
  if (auto e = Boolean(body, "parallel_tool_calls", &r->parallel_tool_calls)) return e;
  const auto it = body.find("tool_choice");
  std::string& name = *only;
  if (it == body.end() || it->is_null()) {
    r->tool_choice = r->tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
    return std::nullopt;
  }
  if (it->is_string()) {
    const std::string c = it->get<std::string>();
    if (c == "none") {
      r->tool_choice = ToolChoice::kNone;
      return std::nullopt;
    }
    if (c == "auto") {
      r->tool_choice = r->tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
      return std::nullopt;
    }
    if (c != "required") {
      return Bad("tool_choice", StrCat("'tool_choice' must be 'none', 'auto', 'required' or a "
                                       "function, got '",
                                       c, "'"));
    }
    r->tool_choice = ToolChoice::kRequired;
  } else if (it->is_object() && it->contains("function") && (*it)["function"].is_object() &&
             (*it)["function"].contains("name") && (*it)["function"]["name"].is_string()) {
    name = (*it)["function"]["name"].get<std::string>();
    r->tool_choice = ToolChoice::kFunction;
  } else {
    return Bad("tool_choice",
               "'tool_choice' must be a string or {\"type\": \"function\", \"function\": "
               "{\"name\": ...}}");
  }
  if (r->tools.empty()) return Bad("tool_choice", "'tool_choice' asks for a call but no 'tools'");
  if (!name.empty()) {
    bool found = false;
    for (const Tool& t : r->tools) found = found || t.name == name;
    if (!found) {
      return Bad("tool_choice",
                 StrCat("'tool_choice' names '", name, "', which is not in 'tools'"));
    }
  }
  return std::nullopt;
}

// An assistant message's "tool_calls", appended to its content as the chat format writes them.
// `ordered`: the same message with its keys in the client's order (object arguments are written
// so).
std::optional<ApiError> AssistantToolCalls(const json& m, const nlohmann::ordered_json& ordered,
                                           const std::string& p, std::string* content) {
  std::vector<ToolCall> past;
  const auto calls = m.find("tool_calls");
  if (calls == m.end() || calls->is_null()) return std::nullopt;
  if (!calls->is_array())
    return Bad(p + ".tool_calls", StrCat("'", p, ".tool_calls' must be an array"));
  for (size_t i = 0; i < calls->size(); ++i) {
    const json& c = (*calls)[i];
    const std::string q = StrCat(p, ".tool_calls[", i, "]");
    const json* f = c.is_object() && c.contains("function") ? &c["function"] : nullptr;
    if (f == nullptr || !f->is_object() || !f->contains("name") || !(*f)["name"].is_string()) {
      return Bad(q + ".function", StrCat("'", q, ".function' must be an object with a 'name'"));
    }
    std::string arguments = "{}";
    if (f->contains("arguments")) {
      const json& a = (*f)["arguments"];
      if (a.is_string()) {
        arguments = a.get<std::string>();
      } else if (a.is_object()) {
        const nlohmann::ordered_json* oa = nullptr;
        if (ordered.is_object() && ordered.contains("tool_calls") &&
            ordered["tool_calls"].is_array() && i < ordered["tool_calls"].size()) {
          const auto& c2 = ordered["tool_calls"][i];
          if (c2.is_object() && c2.contains("function") && c2["function"].is_object() &&
              c2["function"].contains("arguments") && c2["function"]["arguments"].is_object()) {
            oa = &c2["function"]["arguments"];
          }
        }
        arguments = chat::TemplateJson(oa != nullptr ? oa->dump() : a.dump());
      } else if (!a.is_null()) {
        return Bad(q + ".function.arguments",
                   StrCat("'", q, ".function.arguments' must be a string of JSON"));
      }
    }
    past.push_back({"", (*f)["name"].get<std::string>(), std::move(arguments)});
  }
  chat::ChatFormat::Default().AppendCalls(past, content);
  return std::nullopt;
}

// Reads an optional logprobs request: chat "logprobs" (bool) + "top_logprobs" (0-20); completions
// "logprobs" (null or 0-5, the number of alternatives).
std::optional<ApiError> Logprobs(Endpoint endpoint, const json& body, ApiRequest* r) {
  if (endpoint == Endpoint::kChat) {
    if (auto e = Boolean(body, "logprobs", &r->logprobs)) return e;
    int64_t top = 0;
    bool given = false;
    if (auto e = Integer(body, "top_logprobs", 0, 20, &top, &given)) return e;
    if (given && !r->logprobs && top > 0) {
      return Bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    }
    r->top_logprobs = static_cast<int32_t>(top);
    return std::nullopt;
  }
  int64_t top = 0;
  bool given = false;
  if (auto e = Integer(body, "logprobs", 0, 5, &top, &given)) return e;
  r->logprobs = given;
  r->top_logprobs = static_cast<int32_t>(top);
  return std::nullopt;
}

}  // namespace

namespace {

std::optional<ApiError> NestingError(std::string_view body_text) {
  // Before the parse: copying or compiling a parsed value recurses once per level.
  Status nesting = CheckJsonNesting(body_text, "the request body");
  if (nesting.ok()) return std::nullopt;
  return Bad("", nesting.message());
}

// "cache_salt" (vLLM's): a string of at most 256 bytes.
std::optional<ApiError> CacheSalt(const json& body, std::string* out) {
  const auto it = body.find("cache_salt");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return Bad("cache_salt", "'cache_salt' must be a string");
  if (it->get_ref<const std::string&>().size() > 256) {
    return Bad("cache_salt", "'cache_salt' holds at most 256 bytes");
  }
  *out = it->get<std::string>();
  return std::nullopt;
}

// "priority" (vLLM's): an integer, lower first, within +-1,000,000.
std::optional<ApiError> Priority(const json& body, int32_t* out) {
  const auto it = body.find("priority");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer() || it->get<int64_t>() < -1000000 || it->get<int64_t>() > 1000000) {
    return Bad("priority", "'priority' must be an integer from -1000000 to 1000000");
  }
  *out = static_cast<int32_t>(it->get<int64_t>());
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body_text,
                                     std::string_view served_model, const ApiLimits& limits,
                                     ApiRequest* out) {
  if (auto e = NestingError(body_text)) return e;
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

  if (auto e = ModelAndAdapter(body, served_model, limits, &r.model, &r.adapter)) return e;
  const chat::ChatFormat format = chat::ChatFormat::Default();

  if (endpoint == Endpoint::kChat) {
    const auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array() || messages->empty()) {
      return Bad("messages", "'messages' is required and must be a non-empty array");
    }
    if (auto e = Tools(body, body_text, &r.tools)) return e;
    std::string only;  // tool_choice's function
    if (auto e = ToolChoiceOf(body, &r, &only)) return e;
    if (r.tool_choice != ToolChoice::kNone) {
      chat::CallRule rule;
      rule.only = only;
      rule.parallel = r.parallel_tool_calls;
      rule.max_calls = limits.max_tool_calls;
      r.call_constraint = format.CallConstraint(r.tools, rule);
    }
    std::vector<ChatMessage> ms;
    bool after_tool = false;  // the last message was a tool's: its response joins that turn
    nlohmann::ordered_json ordered_messages;  // parsed when an assistant message has tool calls
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
      if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool") {
        return Bad(p + ".role", StrCat("'", p, ".role' is '", cm.role,
                                       "'; supported: system, developer, user, assistant, tool"));
      }
      if (auto e = Content(m.contains("content") ? m["content"] : json(nullptr), p + ".content",
                           &cm.content)) {
        return e;
      }
      if (cm.role == "assistant") {
        if (m.contains("tool_calls") && ordered_messages.is_null()) {
          const auto whole = nlohmann::ordered_json::parse(body_text, nullptr, false);
          ordered_messages = whole.is_object() ? whole["messages"] : nlohmann::ordered_json();
        }
        static const nlohmann::ordered_json kNone;
        const nlohmann::ordered_json& om =
            ordered_messages.is_array() && i < ordered_messages.size() ? ordered_messages[i]
                                                                       : kNone;
        if (auto e = AssistantToolCalls(m, om, p, &cm.content)) return e;
      }
      if (cm.role == "tool") {
        format.AddToolResponse(cm.content, after_tool, &ms);
        after_tool = true;
        continue;
      }
      after_tool = false;
      ms.push_back(std::move(cm));
    }
    if (r.tool_choice != ToolChoice::kNone) format.AddTools(r.tools, &ms);
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
  if (auto e = Integer(body, "n", 1, limits.max_n, &n)) return e;
  r.n = static_cast<int32_t>(n);
  if (auto e = Logprobs(endpoint, body, &r)) return e;
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
  const auto bias = body.find("logit_bias");
  if (bias != body.end() && !bias->is_null()) {
    if (!bias->is_object()) {
      return Bad("logit_bias", "'logit_bias' must be an object of token ids to numbers");
    }
    if (bias->size() > 1024) return Bad("logit_bias", "'logit_bias' holds at most 1024 tokens");
    for (const auto& [key, value] : bias->items()) {
      int64_t id = -1;
      const bool digits = !key.empty() && key.size() <= 10 &&
                          key.find_first_not_of("0123456789") == std::string::npos;
      if (digits) id = std::stoll(key);
      if (!digits || id >= limits.vocab_size) {
        return Bad("logit_bias", StrCat("'logit_bias' key '", key, "' is not a token id (0 to ",
                                        limits.vocab_size - 1, ")"));
      }
      if (!value.is_number() || !std::isfinite(value.get<double>()) ||
          value.get<double>() < -100.0 || value.get<double>() > 100.0) {
        return Bad("logit_bias",
                   StrCat("'logit_bias[\"", key, "\"]' must be a number from -100 to 100"));
      }
      for (const auto& [seen, b] : g.sampling.logit_bias) {
        if (seen == id) return Bad("logit_bias", StrCat("'logit_bias' names token ", id, " twice"));
      }
      g.sampling.logit_bias.emplace_back(static_cast<int32_t>(id),
                                         static_cast<float>(value.get<double>()));
    }
  }
  if (auto e = ResponseFormat(body, &g.constraint)) return e;
  if (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kFunction) {
    if (!g.constraint.empty()) {
      return Bad("response_format",
                 "'response_format' cannot be combined with a 'tool_choice' that forces a call");
    }
    // The turn starts the call (no thinking first); its JSON is constrained to the tools.
    g.constraint = r.call_constraint;
    g.stop.clear();  // a stop string must not cut the calls' JSON
    g.chat.enable_thinking = false;
    r.assistant_prefix = std::string(format.CallPrefix());
  }
  const auto user = body.find("user");
  if (user != body.end() && !user->is_null() && !user->is_string()) {
    return Bad("user", "'user' must be a string");
  }
  if (auto e = CacheSalt(body, &r.cache_salt)) return e;
  if (auto e = Priority(body, &r.priority)) return e;
  *out = std::move(r);
  return std::nullopt;
}

std::optional<ApiError> ParseScoreRequest(bool classify, std::string_view body_text,
                                          std::string_view served_model, const ApiLimits& limits,
                                          ScoreRequest* out) {
  if (auto e = NestingError(body_text)) return e;
  const json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return Bad("", "the request body is not valid JSON");
  if (!body.is_object()) return Bad("", "the request body must be a JSON object");
  ScoreRequest r;
  const bool chat = body.contains("messages");
  if (chat == (body.contains("prompt") || body.contains("input"))) {
    return Bad("prompt", "give either 'prompt' (text) or 'messages' (a chat)");
  }
  // The prompt as a generation request would have it (the same checks and messages).
  std::string reshaped;
  if (!chat && body.contains("input") && !body.contains("prompt")) {
    json copy = body;
    copy["prompt"] = copy["input"];
    reshaped = copy.dump();
  }
  ApiRequest g;
  if (auto e = ParseRequest(chat ? Endpoint::kChat : Endpoint::kCompletion,
                            reshaped.empty() ? body_text : std::string_view(reshaped), served_model,
                            limits, &g)) {
    return e;
  }
  r.model = g.model;
  r.adapter = g.adapter;
  r.prompt = g.generate;
  r.chat = chat;
  if (!classify) {
    const auto c = body.find("candidates");
    if (c == body.end() || !c->is_array() || c->empty() || c->size() > 64) {
      return Bad("candidates", "'candidates' must be an array of 1 to 64 strings");
    }
    for (size_t i = 0; i < c->size(); ++i) {
      if (!(*c)[i].is_string() || (*c)[i].get<std::string>().empty()) {
        return Bad("candidates", StrCat("'candidates[", i, "]' must be a non-empty string"));
      }
      r.candidates.push_back((*c)[i].get<std::string>());
    }
  }
  if (auto e = CacheSalt(body, &r.cache_salt)) return e;
  *out = std::move(r);
  return std::nullopt;
}

}  // namespace pocket::serve
