// The voice pipeline's stages on Debian's real engines: resampling, WAV files, WebRTC VAD and the
// endpointer, pocketsphinx, flite and espeak-ng.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "voice/asr.h"
#include "voice/audio.h"
#include "voice/tts.h"
#include "voice/vad.h"

namespace pocket::voice {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("pocket_voice_test_" + name)).string();
}

Audio Sine(int32_t rate, double hz, double seconds, double amplitude = 8000) {
  Audio a;
  a.rate = rate;
  const auto n = static_cast<size_t>(seconds * rate);
  for (size_t i = 0; i < n; ++i) {
    a.samples.push_back(
        static_cast<int16_t>(std::lround(amplitude * std::sin(2 * M_PI * hz * i / rate))));
  }
  return a;
}

double Rms(std::span<const int16_t> s) {
  double sum = 0;
  for (int16_t v : s) sum += static_cast<double>(v) * v;
  return s.empty() ? 0 : std::sqrt(sum / static_cast<double>(s.size()));
}

int64_t ZeroCrossings(std::span<const int16_t> s) {
  int64_t n = 0;
  for (size_t i = 1; i < s.size(); ++i) n += (s[i - 1] < 0) != (s[i] < 0);
  return n;
}

Audio Speak(Synthesizer& tts, const std::string& text) {
  Audio a;
  a.rate = tts.rate();
  auto r = tts.Synthesize(text, [&](std::span<const int16_t> pcm) {
    a.samples.insert(a.samples.end(), pcm.begin(), pcm.end());
    return true;
  });
  EXPECT_TRUE(r.ok()) << r.status().message();
  return a;
}

TEST(ResamplerTest, KeepsFrequencyLevelAndLength) {
  for (auto [from, to] : {std::pair{22050, 16000}, {16000, 48000}, {44100, 16000}, {8000, 16000}}) {
    const Audio in = Sine(from, 440, 2.0);
    const Audio out = Resample(in, to);
    EXPECT_EQ(out.samples.size(), (in.samples.size() * to + from - 1) / from) << from << "->" << to;
    // Away from the edges: the same level and the same pitch.
    const std::span<const int16_t> mid(out.samples.data() + to / 10, out.samples.size() - to / 5);
    EXPECT_NEAR(Rms(mid), 8000 / std::sqrt(2.0), 8000 * 0.02) << from << "->" << to;
    EXPECT_NEAR(static_cast<double>(ZeroCrossings(mid)) / (mid.size() / static_cast<double>(to)),
                880, 4)
        << from << "->" << to;
  }
  // A tone above the new Nyquist frequency is filtered out, not folded back.
  const Audio high = Resample(Sine(44100, 12000, 1.0), 16000);
  EXPECT_LT(Rms(std::span<const int16_t>(high.samples).subspan(1600, 12800)), 8000 * 0.03);
}

TEST(ResamplerTest, StreamedInPiecesEqualsWhole) {
  const Audio in = Sine(22050, 300, 0.7);
  const Audio whole = Resample(in, 16000);
  Resampler r(22050, 16000);
  std::vector<int16_t> out;
  std::mt19937 rng(3);
  size_t i = 0;
  while (i < in.samples.size()) {
    const size_t n = std::min<size_t>(1 + rng() % 700, in.samples.size() - i);
    r.Push(std::span<const int16_t>(in.samples).subspan(i, n), out);
    i += n;
  }
  r.Finish(out);
  EXPECT_EQ(out, whole.samples);
}

TEST(AudioFileTest, WavRoundTripAndBadFiles) {
  const std::string path = TempPath("round.wav");
  const Audio a = Sine(22050, 500, 0.3);
  ASSERT_TRUE(WriteWav(path, a).ok());
  StatusOr<Audio> b = ReadAudioFile(path);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->rate, 22050);
  EXPECT_EQ(b->samples, a.samples);
  // Truncated: the header promises more than the file holds.
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(TempPath("cut.wav"), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  StatusOr<Audio> cut = ReadAudioFile(TempPath("cut.wav"));
  if (cut.ok()) {
    // libsndfile may trust the file's length over its header: then a prefix, never garbage.
    ASSERT_LE(cut->samples.size(), a.samples.size());
    EXPECT_TRUE(std::equal(cut->samples.begin(), cut->samples.end(), a.samples.begin()));
  } else {
    EXPECT_NE(cut.status().message().find("cut.wav"), std::string::npos);
  }
  // Not audio at all.
  {
    std::ofstream out(TempPath("text.wav"));
    out << "this is not a wave file\n";
  }
  StatusOr<Audio> text = ReadAudioFile(TempPath("text.wav"));
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.status().message().find("text.wav"), std::string::npos);
  EXPECT_FALSE(ReadAudioFile(TempPath("missing.wav")).ok());
}

class StagesTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto f = CreateFlite();
    ASSERT_TRUE(f.ok()) << f.status().message();
    flite_ = f->release();
  }
  static void TearDownTestSuite() { delete flite_; }
  static Synthesizer* flite_;
};
Synthesizer* StagesTest::flite_ = nullptr;

TEST_F(StagesTest, FliteStreamsAndStops) {
  const Audio a = Speak(*flite_, "Hello there, this is a test of speech synthesis.");
  EXPECT_EQ(a.rate, 16000);
  EXPECT_GT(a.seconds(), 1.5);
  EXPECT_GT(Rms(a.samples), 300);
  // The callback says stop after the first chunk: synthesis ends there.
  int chunks = 0;
  auto r = flite_->Synthesize("A long sentence that would take several seconds to say aloud.",
                              [&](std::span<const int16_t>) { return ++chunks < 2; });
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped);
  EXPECT_EQ(chunks, 2);
  EXPECT_LT(r->samples, a.samples.size());
  // Nothing to say is no error.
  EXPECT_TRUE(flite_->Synthesize("", [](std::span<const int16_t>) { return true; }).ok());
}

TEST_F(StagesTest, EspeakSpeaksChinese) {
  auto e = CreateEspeak("cmn");
  ASSERT_TRUE(e.ok()) << e.status().message();
  const Audio a = Speak(**e, "你好，今天天气很好。");
  EXPECT_EQ(a.rate, (*e)->rate());
  EXPECT_GT(a.seconds(), 0.8);
  EXPECT_GT(Rms(a.samples), 300);
  EXPECT_TRUE(IsMostlyCjk("你好，今天天气很好。"));
  EXPECT_FALSE(IsMostlyCjk("Hello there, 你好 is hello."));
  EXPECT_FALSE(CreateEspeak("no-such-voice").ok());
  EXPECT_FALSE(CreateFlite("no-such-voice").ok());
}

TEST_F(StagesTest, VadFindsSpeechNotSilenceOrLowNoise) {
  auto vad = CreateWebRtcVoiceDetector({});
  ASSERT_TRUE(vad.ok()) << vad.status().message();
  // 0.5 s silence, speech, 1 s of low-level noise (-55 dBFS).
  Audio clip;
  clip.samples.assign(8000, 0);
  const Audio speech = Speak(*flite_, "Please set a timer for ten minutes.");
  clip.samples.insert(clip.samples.end(), speech.samples.begin(), speech.samples.end());
  std::mt19937 rng(5);
  std::normal_distribution<double> noise(0.0, 32768 * std::pow(10.0, -55 / 20.0));
  for (int i = 0; i < 16000; ++i) clip.samples.push_back(static_cast<int16_t>(noise(rng)));
  const size_t speech_begin = 8000 / kFrameSamples;
  const size_t speech_end = (8000 + speech.samples.size()) / kFrameSamples;
  Endpointer ep;
  int starts = 0;
  int ends = 0;
  int64_t voiced_outside = 0;
  int64_t voiced_inside = 0;
  for (size_t f = 0; (f + 1) * kFrameSamples <= clip.samples.size(); ++f) {
    auto v = (*vad)->IsVoice(
        std::span<const int16_t>(clip.samples).subspan(f * kFrameSamples, kFrameSamples));
    ASSERT_TRUE(v.ok());
    (f >= speech_begin && f < speech_end ? voiced_inside : voiced_outside) += *v;
    const VadEvent e = ep.Push(*v);
    if (e == VadEvent::kSpeechStart) {
      ++starts;
      EXPECT_NEAR(static_cast<double>(ep.speech_start_frame()), speech_begin, 30);
    }
    if (e == VadEvent::kSpeechEnd) {
      ++ends;
      EXPECT_NEAR(static_cast<double>(ep.last_voiced_frame()), speech_end, 30);
    }
  }
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(ends, 1);
  EXPECT_GT(voiced_inside, static_cast<int64_t>((speech_end - speech_begin) / 2));
  EXPECT_LT(voiced_outside, 10);
  EXPECT_FALSE((*vad)->IsVoice(std::vector<int16_t>(100)).ok());  // not a 10 ms frame
}

TEST(EndpointerTest, StartWindowAndHangover) {
  EndpointerOptions o;
  o.start_frames = 5;
  o.start_voiced = 3;
  o.hangover_frames = 4;
  Endpointer ep(o);
  // A lone voiced frame (a click) starts nothing; three of five do.
  const std::vector<int> frames = {0, 1, 0, 0, 0, 0, 0, 1, 0, 1, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0};
  std::vector<std::pair<size_t, VadEvent>> events;
  for (size_t i = 0; i < frames.size(); ++i) {
    const VadEvent e = ep.Push(frames[i] != 0);
    if (e != VadEvent::kNone) events.emplace_back(i, e);
    if (e == VadEvent::kSpeechStart) {
      EXPECT_EQ(ep.speech_start_frame(), 7);
    }
  }
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], std::make_pair(size_t{10}, VadEvent::kSpeechStart));  // 7, 9, 10 in 6..10
  // The gap of three at 12..14 is inside the hangover; the run of four from 16 ends it.
  EXPECT_EQ(events[1], std::make_pair(size_t{19}, VadEvent::kSpeechEnd));
  EXPECT_EQ(ep.last_voiced_frame(), 15);
}

TEST_F(StagesTest, PocketSphinxRecognizesFliteSpeech) {
  // The user speaks with flite's rms voice (the fixtures' user; en-us recognizes it better than
  // slt, the assistant's voice).
  auto user = CreateFlite("rms");
  ASSERT_TRUE(user.ok()) << user.status().message();
  const Audio warm = Speak(**user, "Good morning, how are you doing today?");
  PocketSphinxOptions o;
  o.warm_up = warm.samples;
  auto asr = CreatePocketSphinx(o);
  ASSERT_TRUE(asr.ok()) << asr.status().message();
  const std::string text = "how far is the moon from the earth";
  const Audio speech = Speak(**user, text);
  ASSERT_TRUE((*asr)->Start().ok());
  std::string partial;
  for (size_t i = 0; i < speech.samples.size(); i += 1600) {
    const size_t n = std::min<size_t>(1600, speech.samples.size() - i);
    ASSERT_TRUE((*asr)->Push(std::span<const int16_t>(speech.samples).subspan(i, n)).ok());
    if (i >= speech.samples.size() / 2 && partial.empty()) partial = (*asr)->Partial();
  }
  StatusOr<std::string> final_text = (*asr)->Finish();
  ASSERT_TRUE(final_text.ok());
  EXPECT_FALSE(partial.empty());
  EXPECT_LE(WordErrorRate(text, *final_text), 0.25) << *final_text;  // two words of eight
  // Silence: an empty hypothesis, not an error.
  ASSERT_TRUE((*asr)->Start().ok());
  ASSERT_TRUE((*asr)->Push(std::vector<int16_t>(16000)).ok());
  StatusOr<std::string> silent = (*asr)->Finish();
  ASSERT_TRUE(silent.ok());
  EXPECT_TRUE(silent->empty()) << *silent;
  EXPECT_FALSE((*asr)->Push(speech.samples).ok());  // no utterance started
  PocketSphinxOptions missing;
  missing.model_dir = "/nonexistent";
  EXPECT_FALSE(CreatePocketSphinx(missing).ok());
}

TEST(WerTest, EditDistanceOverWords) {
  int64_t errors = 0;
  int64_t words = 0;
  EXPECT_EQ(WordErrorRate("Hello, World!", "hello world"), 0.0);
  EXPECT_DOUBLE_EQ(WordErrorRate("a b c d", "a x c", &errors, &words), 0.5);  // 1 sub + 1 del
  EXPECT_EQ(errors, 2);
  EXPECT_EQ(words, 4);
  EXPECT_DOUBLE_EQ(WordErrorRate("a b", "a b c d"), 1.0);  // two insertions
  EXPECT_EQ(WordErrorRate("", ""), 0.0);
}

}  // namespace
}  // namespace pocket::voice
