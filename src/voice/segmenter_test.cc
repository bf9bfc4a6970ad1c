#include "voice/segmenter.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace pocket::voice {
namespace {

// Segments of `text` pushed in pieces of `step` bytes (0: all at once), then finished.
std::vector<std::string> Cut(std::string_view text, size_t step = 0,
                             const SegmenterOptions& options = {}) {
  Segmenter s(options);
  std::vector<Segment> out;
  if (step == 0) step = text.size();
  for (size_t i = 0; i < text.size(); i += step) s.Push(text.substr(i, step), out);
  s.Finish(out);
  std::vector<std::string> texts;
  for (const Segment& seg : out) texts.push_back(seg.text);
  return texts;
}

// Later segments only: the first is cut early by design.
SegmenterOptions NoEarlyFirst(int32_t comma_chars = SegmenterOptions{}.comma_chars) {
  SegmenterOptions o;
  o.comma_chars = comma_chars;
  o.first_min_chars = comma_chars;
  o.first_max_words = 1000;
  o.first_max_chars = o.max_chars;
  return o;
}

TEST(SegmenterTest, SentenceEnds) {
  EXPECT_EQ(Cut("Hello there. How are you? I am fine!", 0, NoEarlyFirst()),
            (std::vector<std::string>{"Hello there.", "How are you?", "I am fine!"}));
}

TEST(SegmenterTest, NumbersAndAbbreviationsStayWhole) {
  EXPECT_EQ(Cut("Pi is 3.14 and a million is 1,000,000 exactly. Dr. Smith met J. K. Rowling in the "
                "U.S. on Monday. It costs $2.50, e.g. a coffee.",
                0, NoEarlyFirst()),
            (std::vector<std::string>{"Pi is 3.14 and a million is 1,000,000 exactly.",
                                      "Dr. Smith met J. K. Rowling in the U.S. on Monday.",
                                      "It costs $2.50, e.g. a coffee."}));
  // An ellipsis inside a sentence keeps it whole; one before a new sentence ends it.
  EXPECT_EQ(Cut("Well... maybe not. Wait... No!", 0, NoEarlyFirst()),
            (std::vector<std::string>{"Well... maybe not.", "Wait...", "No!"}));
  // The time 10:30 is not a place to cut, however long the segment.
  SegmenterOptions o = NoEarlyFirst(5);
  EXPECT_EQ(Cut("We meet at 10:30 today", 0, o),
            (std::vector<std::string>{"We meet at 10:30 today"}));
}

TEST(SegmenterTest, ClosingQuotesStayWithTheirSentence) {
  EXPECT_EQ(Cut("She said \"stop.\" Then she left.", 0, NoEarlyFirst()),
            (std::vector<std::string>{"She said \"stop.\"", "Then she left."}));
}

TEST(SegmenterTest, ChineseSentenceEndsAndCommas) {
  EXPECT_EQ(Cut("你好。今天天气很好！你呢？", 0, NoEarlyFirst()),
            (std::vector<std::string>{"你好。", "今天天气很好！", "你呢？"}));
  SegmenterOptions o = NoEarlyFirst(4);
  EXPECT_EQ(Cut("我们今天去公园，然后去吃饭。", 0, o),
            (std::vector<std::string>{"我们今天去公园，", "然后去吃饭。"}));
}

TEST(SegmenterTest, LongSegmentsCutAtCommasThenSpaces) {
  SegmenterOptions o = NoEarlyFirst(20);
  o.max_chars = 40;
  EXPECT_EQ(Cut("Short, then a clause that runs on, and on and on and on and on without end", 0, o),
            (std::vector<std::string>{"Short, then a clause that runs on,",
                                      "and on and on and on and on without end"}));
  // No punctuation at all (a random model's reply): cut at a space within max_chars.
  std::string words;
  for (int i = 0; i < 60; ++i) words += "word ";
  for (const std::string& seg : Cut(words, 0, o)) {
    EXPECT_LE(seg.size(), 40u) << seg;
    EXPECT_EQ(seg.find("wor "), std::string::npos);  // words whole
  }
  // No spaces either (Chinese without punctuation): between characters, never inside one.
  std::string han;
  for (int i = 0; i < 100; ++i) han += "字";
  const std::vector<std::string> segs = Cut(han, 0, o);
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[0].size(), 40u * 3);
}

TEST(SegmenterTest, FirstSegmentIsShort) {
  // At the first comma once it holds 12 characters, or after six words.
  EXPECT_EQ(Cut("Well, the answer, as far as I know, is yes. And more follows here."),
            (std::vector<std::string>{"Well, the answer,", "as far as I know, is yes.",
                                      "And more follows here."}));
  EXPECT_EQ(Cut("one two three four five six seven eight nine ten."),
            (std::vector<std::string>{"one two three four five six", "seven eight nine ten."}));
}

TEST(SegmenterTest, StreamingGivesTheSameSegmentsAsWholeText) {
  const std::string text =
      "Dr. Who said 3.5 times, \"hi!\" Then… nothing. 你好，世界。The end, e.g. here: now.  "
      "Another one? Yes! The U.S. is large; very large, indeed, and it goes on and on for a "
      "long while without any period at all so that the hard limit cuts it somewhere";
  const std::vector<std::string> whole = Cut(text);
  for (size_t step : {1, 2, 3, 5, 7}) EXPECT_EQ(Cut(text, step), whole) << step;
}

TEST(SegmenterTest, OffsetsCoverTheReply) {
  const std::string text = "  First part here, then. Second one!  Third ";
  Segmenter s;
  std::vector<Segment> out;
  for (char c : text) s.Push(std::string_view(&c, 1), out);
  s.Finish(out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.front().begin, 0u);
  EXPECT_EQ(out.back().end, text.size());
  for (size_t i = 0; i < out.size(); ++i) {
    if (i > 0) {
      EXPECT_EQ(out[i].begin, out[i - 1].end);
    }
    EXPECT_NE(text.substr(out[i].begin, out[i].end - out[i].begin).find(out[i].text),
              std::string::npos);
  }
}

TEST(SegmenterTest, RandomBytesNeverHangOrSplitCharacters) {
  std::mt19937 rng(7);
  const std::vector<std::string> pieces = {"a", " ",  ".",  ",",    "!",    "?",
                                           "3", "字", "。", "，",   "\xff", "\xe5\xad",
                                           "…", "\"", "Dr", "U.S.", "\n"};
  for (int round = 0; round < 200; ++round) {
    std::string text;
    const int n = static_cast<int>(rng() % 400);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    Segmenter s;
    std::vector<Segment> out;
    size_t i = 0;
    while (i < text.size()) {
      const size_t step = 1 + rng() % 9;
      s.Push(std::string_view(text).substr(i, step), out);
      i += step;
    }
    s.Finish(out);
    size_t covered = 0;
    for (const Segment& seg : out) {
      // Between segments only spaces (a run of them is no segment).
      EXPECT_GE(seg.begin, covered);
      EXPECT_EQ(text.substr(covered, seg.begin - covered).find_first_not_of(" \n"),
                std::string::npos);
      EXPECT_GT(seg.end, seg.begin);
      EXPECT_LE(seg.text.size(), SegmenterOptions{}.max_chars * 4u + 8);
      covered = seg.end;
    }
    // Everything but trailing spaces was spoken.
    const std::string rest = text.substr(covered);
    EXPECT_EQ(rest.find_first_not_of(" \n"), std::string::npos) << rest;
  }
}

}  // namespace
}  // namespace pocket::voice
