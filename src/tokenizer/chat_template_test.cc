#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "base/mapped_file.h"
#include "tokenizer/test_fixtures.h"

namespace pocket {
namespace {

// The Qwen3 template as shipped in tokenizer_config.json.
std::string Qwen3TemplateSource() {
  const std::string path =
      std::string(POCKET_CACHE_DIR) + "/tokenizer-qwen3/package/models/tokenizer_config.json";
  const std::string config = testing::ReadFileOrEmpty(path);
  const size_t key = config.find("\"chat_template\"");
  return key == std::string::npos ? std::string() : config.substr(key);  // enough for Detect
}

ChatTemplate Qwen3() {
  return ChatTemplate::Of(ChatTemplate::Family::kQwen3);
}

std::string Apply(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages,
                  ChatOptions options = {}) {
  auto text = tmpl.Apply(messages, options);
  EXPECT_TRUE(text.ok()) << text.status().ToString();
  return text.ok() ? *text : std::string();
}

TEST(ChatTemplateTest, DetectsFamilies) {
  const std::string qwen3 = Qwen3TemplateSource();
  ASSERT_FALSE(qwen3.empty())
      << "missing Qwen3 tokenizer_config.json; run scripts/fetch_fixtures.sh";
  auto detected = ChatTemplate::Detect(qwen3);
  ASSERT_TRUE(detected.ok()) << detected.status().ToString();
  EXPECT_EQ(detected->family(), ChatTemplate::Family::kQwen3);
  EXPECT_EQ(detected->name(), "qwen3");

  const std::string qwen25 =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
      "messages[0]['content'] + '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are "
      "Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
      "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content "
      "+ '<|im_end|>' + '\\n' }}{%- endfor %}";
  EXPECT_EQ(ChatTemplate::Detect(qwen25)->family(), ChatTemplate::Family::kQwen25);
  const std::string qwen2 =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
      "'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif "
      "%}{{'<|im_start|>' "
      "+ message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}";
  EXPECT_EQ(ChatTemplate::Detect(qwen2)->family(), ChatTemplate::Family::kQwen2);
  const std::string chatml =
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
      "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
      "'<|im_start|>assistant\n' }}{% endif %}";
  EXPECT_EQ(ChatTemplate::Detect(chatml)->family(), ChatTemplate::Family::kChatMl);

  for (const std::string& unknown :
       {std::string(
            "{{ bos_token }}{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}"),
        std::string("<|im_start|>system\nYou are a pirate.<|im_end|>{% for m in messages %}"
                    "<|im_start|>{{ m.role }}{% endfor %}<|im_end|>")}) {
    auto error = ChatTemplate::Detect(unknown);
    ASSERT_FALSE(error.ok());
    EXPECT_NE(error.status().message().find("supported: ChatML, Qwen2, Qwen2.5 and Qwen3"),
              std::string::npos)
        << error.status().message();
  }
  EXPECT_FALSE(ChatTemplate::Detect("").ok());
}

TEST(ChatTemplateTest, Qwen3SingleUserTurn) {
  EXPECT_EQ(Apply(Qwen3(), {{"user", "Hi!"}}),
            "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n");
  ChatOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(Apply(Qwen3(), {{"user", "Hi!"}}, no_prompt), "<|im_start|>user\nHi!<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen3SystemAndUser) {
  EXPECT_EQ(Apply(Qwen3(), {{"system", "Be brief."}, {"user", "2+2?"}}),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\n2+2?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Qwen3ThinkingDisabled) {
  ChatOptions no_thinking;
  no_thinking.enable_thinking = false;
  EXPECT_EQ(Apply(Qwen3(), {{"user", "Hi!"}}, no_thinking),
            "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // Without a generation prompt there is nothing to append the empty block to.
  no_thinking.add_generation_prompt = false;
  EXPECT_EQ(Apply(Qwen3(), {{"user", "Hi!"}}, no_thinking), "<|im_start|>user\nHi!<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen3MultiTurnStripsPastReasoning) {
  const std::vector<ChatMessage> chat = {
      {"system", "You are helpful."},
      {"user", "What is 2+2?"},
      {"assistant", "<think>\nAdd them.\n</think>\n\nIt is 4."},
      {"user", "And 3+3?"},
  };
  EXPECT_EQ(Apply(Qwen3(), chat),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n"
            "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
            "<|im_start|>assistant\nIt is 4.<|im_end|>\n"
            "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Qwen3KeepsReasoningAfterTheLastQuery) {
  // Assistant turns after the last user message keep (or gain) their <think> block.
  const std::vector<ChatMessage> chat = {
      {"user", "Q1"},
      {"assistant", "<think>r1</think>A1"},
      {"user", "Q2"},
      {"assistant", "<think>\n\nr2\n\n</think>\n\nA2"},
      {"assistant", "no reasoning here"},
      {"assistant", "last"},
  };
  ChatOptions no_prompt;
  no_prompt.add_generation_prompt = false;
  EXPECT_EQ(Apply(Qwen3(), chat, no_prompt),
            "<|im_start|>user\nQ1<|im_end|>\n"
            "<|im_start|>assistant\nA1<|im_end|>\n"
            "<|im_start|>user\nQ2<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nr2\n</think>\n\nA2<|im_end|>\n"
            "<|im_start|>assistant\nno reasoning here<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nlast<|im_end|>\n");
}

TEST(ChatTemplateTest, Qwen3SystemAfterTheFirstMessage) {
  EXPECT_EQ(Apply(Qwen3(), {{"user", "a"}, {"system", "b"}}),
            "<|im_start|>user\na<|im_end|>\n<|im_start|>system\nb<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Qwen25AndQwen2DefaultSystemPrompts) {
  const auto qwen25 = ChatTemplate::Of(ChatTemplate::Family::kQwen25);
  EXPECT_EQ(Apply(qwen25, {{"user", "Hi"}}),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
            "assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(Apply(qwen25, {{"system", "S"}, {"user", "Hi"}, {"assistant", "<think>x</think>y"}},
                  {.add_generation_prompt = false}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>x</think>y<|im_end|>\n");
  const auto qwen2 = ChatTemplate::Of(ChatTemplate::Family::kQwen2);
  EXPECT_EQ(Apply(qwen2, {{"user", "Hi"}}),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // enable_thinking means nothing to these templates.
  EXPECT_EQ(Apply(qwen2, {{"user", "Hi"}}, {.enable_thinking = false}),
            Apply(qwen2, {{"user", "Hi"}}));
}

TEST(ChatTemplateTest, PlainChatMl) {
  const auto chatml = ChatTemplate::Of(ChatTemplate::Family::kChatMl);
  EXPECT_EQ(Apply(chatml, {{"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateTest, Errors) {
  auto bad_role = Qwen3().Apply({{"tool", "x"}});
  ASSERT_FALSE(bad_role.ok());
  EXPECT_NE(bad_role.status().message().find("\"tool\""), std::string::npos);
  EXPECT_FALSE(Qwen3().Apply({}).ok());
}

}  // namespace
}  // namespace pocket
