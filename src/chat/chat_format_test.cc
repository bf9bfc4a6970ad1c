#include "chat/chat_format.h"

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "generate/grammar.h"
#include "generate/json_schema.h"

namespace pocket::chat {
namespace {

using nlohmann::json;

std::vector<Tool> WeatherAndAdd() {
  Tool weather;
  weather.name = "get_weather";
  weather.parameters =
      R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 16},
          "days": {"type": "integer", "minimum": 1, "maximum": 7}},
          "required": ["city", "days"], "additionalProperties": false})";
  weather.json = R"({"type":"function","function":{"name":"get_weather","parameters":{}}})";
  Tool add;
  add.name = "add";
  add.parameters =
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
          "required": ["a", "b"], "additionalProperties": false})";
  add.json = R"({"type":"function","function":{"name":"add","parameters":{}}})";
  return {weather, add};
}

// Whether the constraint `spec` (a JSON Schema, maybe a list) accepts `text` as a whole.
bool Accepts(const ConstraintSpec& spec, std::string_view text) {
  StatusOr<std::unique_ptr<Grammar>> grammar =
      CompileJsonSchemaList(spec.json_schema, spec.json_list);
  EXPECT_TRUE(grammar.ok()) << grammar.status().ToString();
  if (!grammar.ok()) return false;
  Recognizer r(grammar->get());
  StatusOr<bool> ok = r.Matches(text);
  EXPECT_TRUE(ok.ok()) << ok.status().ToString();
  return ok.ok() && *ok;
}

constexpr std::string_view kTwoCalls =
    R"({"name": "get_weather", "arguments": {"city": "Paris", "days": 2}})"
    "\n</tool_call>\n<tool_call>\n"
    R"({"name": "add", "arguments": {"a": 1, "b": -3}})";

TEST(ChatFormatTest, PastCallsRenderAsTheModelWritesThemAndParseBack) {
  const ChatFormat format = ChatFormat::Default();
  const std::vector<ToolCall> calls = {
      {"call_1", "get_weather", TemplateJson(R"({"city":"Paris","days":2})")},
      {"call_2", "add", R"({"a": 1, "b": -3})"}};
  std::string content;
  format.AppendCalls(calls, &content);
  EXPECT_EQ(content, std::string(format.CallPrefix()) + std::string(kTwoCalls) + "\n</tool_call>");
  // What follows the call prefix reads back as the same calls (compact arguments).
  std::optional<std::vector<ToolCall>> parsed =
      format.ParseCalls(std::string_view(content).substr(format.CallPrefix().size()));
  ASSERT_TRUE(parsed.has_value());
  ASSERT_EQ(parsed->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ((*parsed)[i].name, calls[i].name);
    EXPECT_EQ(json::parse((*parsed)[i].arguments), json::parse(calls[i].arguments));
    EXPECT_TRUE((*parsed)[i].id.empty());
  }
  EXPECT_EQ((*parsed)[0].arguments, R"({"city":"Paris","days":2})");
  // After text, the calls start on a line of their own.
  std::string with_text = "Let me check.";
  format.AppendCalls({calls[1]}, &with_text);
  EXPECT_EQ(with_text,
            "Let me check.\n<tool_call>\n{\"name\": \"add\", \"arguments\": "
            "{\"a\": 1, \"b\": -3}}\n</tool_call>");
}

TEST(ChatFormatTest, ParsesOneOrSeveralCallsAndRefusesPartialOnes) {
  const ChatFormat format = ChatFormat::Default();
  std::optional<std::vector<ToolCall>> two = format.ParseCalls(kTwoCalls);
  ASSERT_TRUE(two.has_value());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].name, "get_weather");
  EXPECT_EQ((*two)[0].arguments, R"({"city":"Paris","days":2})");
  EXPECT_EQ((*two)[1].name, "add");
  EXPECT_EQ((*two)[1].arguments, R"({"a":1,"b":-3})");
  // Closed, the same calls.
  std::optional<std::vector<ToolCall>> closed =
      format.ParseCalls(std::string(kTwoCalls) + "\n</tool_call>");
  ASSERT_TRUE(closed.has_value());
  EXPECT_EQ(closed->size(), 2u);
  // One call, as a non-parallel output ends (at its JSON value).
  std::optional<std::vector<ToolCall>> one =
      format.ParseCalls(R"({"name": "add", "arguments": {"a": 1, "b": 2}})");
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->size(), 1u);
  // A budget that ran out inside the second call, a call without arguments, not JSON.
  const std::string cut = std::string(kTwoCalls).substr(0, kTwoCalls.size() - 4);
  EXPECT_FALSE(format.ParseCalls(cut).has_value());
  EXPECT_FALSE(
      format.ParseCalls(std::string(kTwoCalls) + "\n</tool_call>\n<tool_call>\n").has_value());
  EXPECT_FALSE(format.ParseCalls(R"({"name": "add"})").has_value());
  EXPECT_FALSE(format.ParseCalls("I will not call").has_value());
  EXPECT_FALSE(format.ParseCalls("").has_value());
}

TEST(ChatFormatTest, ParallelGrammarAcceptsSeveralCallsEachValidAgainstItsSchema) {
  const ChatFormat format = ChatFormat::Default();
  const std::vector<Tool> tools = WeatherAndAdd();
  CallRule rule;
  rule.parallel = true;
  const ConstraintSpec parallel = format.CallConstraint(tools, rule);
  EXPECT_TRUE(Accepts(parallel, kTwoCalls));
  EXPECT_TRUE(Accepts(parallel, std::string(kTwoCalls) + "\n</tool_call>"));
  EXPECT_TRUE(Accepts(parallel, R"({"name": "add", "arguments": {"a": 1, "b": 2}})"));
  EXPECT_TRUE(Accepts(parallel, R"({"name": "add", "arguments": {"a": 1, "b": 2}})"
                                "\n</tool_call>"));
  // Each call is checked against its own tool: days beyond its maximum, a tool not offered.
  EXPECT_FALSE(Accepts(parallel,
                       R"({"name": "add", "arguments": {"a": 1, "b": 2}})"
                       "\n</tool_call>\n<tool_call>\n"
                       R"({"name": "get_weather", "arguments": {"city": "Rome", "days": 9}})"));
  EXPECT_FALSE(Accepts(parallel, R"({"name": "add", "arguments": {"a": 1, "b": 2}})"
                                 "\n</tool_call>\n<tool_call>\n"
                                 R"({"name": "mul", "arguments": {"a": 1, "b": 2}})"));
  // No call at all, a separator with no call after it, text after the calls.
  EXPECT_FALSE(Accepts(parallel, ""));
  EXPECT_FALSE(Accepts(parallel, std::string(kTwoCalls) + "\n</tool_call>\n<tool_call>\n"));
  EXPECT_FALSE(Accepts(parallel, std::string(kTwoCalls) + "\n</tool_call>\nDone."));
  // Every call the grammar accepts parses.
  EXPECT_TRUE(format.ParseCalls(std::string(kTwoCalls) + "\n</tool_call>").has_value());
}

TEST(ChatFormatTest, WithoutParallelCallsTheGrammarRefusesASecondCall) {
  const ChatFormat format = ChatFormat::Default();
  const ConstraintSpec one = format.CallConstraint(WeatherAndAdd(), CallRule{});  // the default
  EXPECT_TRUE(one.json_list.empty());
  EXPECT_TRUE(Accepts(one, R"({"name": "add", "arguments": {"a": 1, "b": 2}})"));
  EXPECT_FALSE(Accepts(one, kTwoCalls));
  EXPECT_FALSE(Accepts(one, R"({"name": "add", "arguments": {"a": 1, "b": 2}})"
                            "\n</tool_call>\n<tool_call>\n"));
}

TEST(ChatFormatTest, MaxCallsAndANamedToolBoundTheCalls) {
  const ChatFormat format = ChatFormat::Default();
  CallRule rule;
  rule.parallel = true;
  rule.max_calls = 2;
  const ConstraintSpec two = format.CallConstraint(WeatherAndAdd(), rule);
  EXPECT_TRUE(Accepts(two, kTwoCalls));
  EXPECT_FALSE(Accepts(two, std::string(kTwoCalls) + "\n</tool_call>\n<tool_call>\n" +
                                R"({"name": "add", "arguments": {"a": 5, "b": 6}})"));
  CallRule only;
  only.only = "add";
  only.parallel = true;
  const ConstraintSpec adds = format.CallConstraint(WeatherAndAdd(), only);
  EXPECT_FALSE(Accepts(adds, kTwoCalls));  // its first call is get_weather's
  EXPECT_TRUE(Accepts(adds, R"({"name": "add", "arguments": {"a": 1, "b": 2}})"
                            "\n</tool_call>\n<tool_call>\n"
                            R"({"name": "add", "arguments": {"a": 3, "b": 4}})"));
  EXPECT_EQ(json::parse(format.CallSchema(WeatherAndAdd(), only))["properties"]["name"],
            json({{"const", "add"}}));
}

TEST(ChatFormatTest, ToolsGoAfterTheSystemPromptInTheClientsKeyOrder) {
  const ChatFormat format = ChatFormat::Default();
  std::vector<Tool> tools(1);
  tools[0].name = "f";
  tools[0].json = R"({"type":"function","function":{"name":"f","parameters":{"z":1,"a":"é"}}})";
  const std::string block =
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      R"({"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": "é"}}})"
      "\n</tools>\n\nFor each function call, return a json object with function name and "
      "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": "
      "<function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
  std::vector<ChatMessage> with_system = {{"system", "Be brief."}, {"user", "hi"}};
  format.AddTools(tools, &with_system);
  ASSERT_EQ(with_system.size(), 2u);
  EXPECT_EQ(with_system[0].content, "Be brief.\n\n" + block);
  std::vector<ChatMessage> without = {{"user", "hi"}};
  format.AddTools(tools, &without);
  ASSERT_EQ(without.size(), 2u);
  EXPECT_EQ(without[0].role, "system");
  EXPECT_EQ(without[0].content, block);
}

TEST(ChatFormatTest, ConsecutiveToolResponsesShareOneUserTurn) {
  const ChatFormat format = ChatFormat::Default();
  std::vector<ChatMessage> ms = {{"user", "q"}, {"assistant", "calls"}};
  format.AddToolResponse("21", false, &ms);
  format.AddToolResponse("{\"sum\": 3}", true, &ms);
  ASSERT_EQ(ms.size(), 3u);
  EXPECT_EQ(ms[2].role, "user");
  EXPECT_EQ(ms[2].content,
            "<tool_response>\n21\n</tool_response>\n<tool_response>\n{\"sum\": 3}\n"
            "</tool_response>");
  // The Qwen3 template then takes the earlier user message as the query.
  StatusOr<std::string> text =
      ChatTemplate::Of(ChatTemplate::Family::kQwen3).Apply(ms, ChatOptions{});
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("<|im_start|>user\n<tool_response>\n21"), std::string::npos);
}

TEST(ChatFormatTest, TemplateJsonWritesPythonsSpelling) {
  EXPECT_EQ(TemplateJson(R"({"b":[1,2,{"c":null}],"a":"x"})"),
            R"({"b": [1, 2, {"c": null}], "a": "x"})");
  EXPECT_EQ(TemplateJson("not json"), "not json");
}

}  // namespace
}  // namespace pocket::chat
