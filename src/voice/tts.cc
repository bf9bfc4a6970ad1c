#include "voice/tts.h"

#include <espeak-ng/speak_lib.h>

#include <mutex>
#include <string>

#include "base/str.h"
#include "voice/segmenter.h"

extern "C" {
#include <flite/flite.h>
cst_voice* register_cmu_us_slt(const char* voxdir);
cst_voice* register_cmu_us_rms(const char* voxdir);
cst_voice* register_cmu_us_awb(const char* voxdir);
}

namespace pocket::voice {
namespace {

// flite and espeak-ng keep their state in the process (flite's voice and its features, espeak's
// one callback and its synthesis): one synthesis at a time through each.
std::mutex& FliteMutex() {
  static std::mutex mu;
  return mu;
}
std::mutex& EspeakMutex() {
  static std::mutex mu;
  return mu;
}

struct StreamState {
  const PcmCallback* on_pcm = nullptr;
  SynthesisResult result;
};

int FliteChunk(const cst_wave* w, int start, int size, int /*last*/,
               cst_audio_streaming_info* asi) {
  auto* state = static_cast<StreamState*>(asi->userdata);
  if (size <= 0) return CST_AUDIO_STREAM_CONT;
  state->result.samples += size;
  if (!(*state->on_pcm)(std::span<const int16_t>(w->samples + start, static_cast<size_t>(size)))) {
    state->result.stopped = true;
    return CST_AUDIO_STREAM_STOP;
  }
  return CST_AUDIO_STREAM_CONT;
}

class Flite final : public Synthesizer {
 public:
  explicit Flite(cst_voice* voice) : voice_(voice) {}
  int32_t rate() const override { return 16000; }

  StatusOr<SynthesisResult> Synthesize(std::string_view text, const PcmCallback& on_pcm) override {
    std::lock_guard<std::mutex> lock(FliteMutex());
    StreamState state;
    state.on_pcm = &on_pcm;
    cst_audio_streaming_info* asi = new_audio_streaming_info();
    asi->min_buffsize = 256;  // 16 ms chunks: playback starts with the first
    asi->asc = FliteChunk;
    asi->userdata = &state;
    feat_set(voice_->features, "streaming_info", audio_streaming_info_val(asi));
    const std::string s(text);
    cst_utterance* u = flite_synth_text(s.c_str(), voice_);
    feat_remove(voice_->features, "streaming_info");  // frees asi with the feature's value
    if (u == nullptr) return InternalError("flite could not synthesize \"", text, "\"");
    delete_utterance(u);
    return state.result;
  }

 private:
  cst_voice* voice_;
};

int EspeakChunk(short* wav, int n, espeak_EVENT* events) {
  auto* state = static_cast<StreamState*>(events != nullptr ? events->user_data : nullptr);
  if (state == nullptr || wav == nullptr || n <= 0) return 0;
  state->result.samples += n;
  if (!(*state->on_pcm)(std::span<const int16_t>(wav, static_cast<size_t>(n)))) {
    state->result.stopped = true;
    return 1;  // abort
  }
  return 0;
}

class Espeak final : public Synthesizer {
 public:
  Espeak(int32_t rate, std::string voice) : rate_(rate), voice_(std::move(voice)) {}
  int32_t rate() const override { return rate_; }

  StatusOr<SynthesisResult> Synthesize(std::string_view text, const PcmCallback& on_pcm) override {
    std::lock_guard<std::mutex> lock(EspeakMutex());
    if (espeak_SetVoiceByName(voice_.c_str()) != EE_OK) {
      return NotFoundError("espeak-ng has no voice \"", voice_, "\"");
    }
    espeak_SetSynthCallback(EspeakChunk);
    StreamState state;
    state.on_pcm = &on_pcm;
    const std::string s(text);
    const espeak_ERROR e = espeak_Synth(s.c_str(), s.size() + 1, 0, POS_CHARACTER, 0,
                                        espeakCHARS_UTF8, nullptr, &state);
    if (e != EE_OK) return InternalError("espeak-ng could not synthesize (error ", e, ")");
    return state.result;
  }

 private:
  int32_t rate_;
  std::string voice_;
};

}  // namespace

StatusOr<std::unique_ptr<Synthesizer>> CreateFlite(const std::string& voice_name) {
  std::lock_guard<std::mutex> lock(FliteMutex());
  flite_init();  // idempotent
  // A voice registers once per process: each registration allocates a voice flite never frees,
  // so an app creating pipeline after pipeline would grow. flite's own state is process-wide;
  // these pointers mirror it, behind the same mutex.
  static cst_voice* slt = nullptr;
  static cst_voice* rms = nullptr;
  static cst_voice* awb = nullptr;
  cst_voice** voice = nullptr;
  cst_voice* (*reg)(const char*) = nullptr;
  if (voice_name == "slt") {
    voice = &slt;
    reg = register_cmu_us_slt;
  } else if (voice_name == "rms") {
    voice = &rms;
    reg = register_cmu_us_rms;
  } else if (voice_name == "awb") {
    voice = &awb;
    reg = register_cmu_us_awb;
  } else {
    return NotFoundError("no flite voice \"", voice_name, "\" (slt, rms or awb)");
  }
  if (*voice == nullptr) *voice = reg(nullptr);
  if (*voice == nullptr) return InternalError("flite could not load voice cmu_us_", voice_name);
  return std::unique_ptr<Synthesizer>(new Flite(*voice));
}

StatusOr<std::unique_ptr<Synthesizer>> CreateEspeak(const std::string& voice) {
  std::lock_guard<std::mutex> lock(EspeakMutex());
  const int rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 200, nullptr, 0);
  if (rate <= 0) return InternalError("espeak-ng could not start (its data: espeak-ng-data)");
  if (espeak_SetVoiceByName(voice.c_str()) != EE_OK) {
    return NotFoundError("espeak-ng has no voice \"", voice, "\"");
  }
  return std::unique_ptr<Synthesizer>(new Espeak(rate, voice));
}

bool IsMostlyCjk(std::string_view text) {
  size_t cjk = 0;
  size_t letters = 0;
  for (size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const size_t n = Utf8Length(b);
    if (n == 3 && i + 3 <= text.size()) {
      const char32_t c = ((b & 0x0F) << 12) | ((text[i + 1] & 0x3F) << 6) | (text[i + 2] & 0x3F);
      if ((c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3040 && c <= 0x30FF)) {
        ++cjk;
        ++letters;
      }
    } else if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z')) {
      ++letters;
    }
    i += n;
  }
  return cjk * 3 > letters;  // a Chinese character carries about a word
}

}  // namespace pocket::voice
