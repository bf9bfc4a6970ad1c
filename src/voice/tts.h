// Speech synthesis for the voice pipeline: text in, PCM out through a callback as it is made, so
// that playback starts before a segment is synthesized whole, and the callback's `false` stops it
// (barge-in). flite (voice cmu_us_slt, 16 kHz) speaks English; espeak-ng (22.05 kHz) Chinese and
// other languages. Both libraries keep process-wide state, so each serializes its syntheses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace pocket::voice {

// Receives synthesized samples at Synthesizer::rate(); returns false to stop the synthesis.
using PcmCallback = std::function<bool(std::span<const int16_t> samples)>;

struct SynthesisResult {
  int64_t samples = 0;   // handed to the callback
  bool stopped = false;  // the callback said stop
};

class Synthesizer {
 public:
  virtual ~Synthesizer() = default;
  virtual int32_t rate() const = 0;
  virtual StatusOr<SynthesisResult> Synthesize(std::string_view text,
                                               const PcmCallback& on_pcm) = 0;
};

// `voice`: cmu_us_slt (a woman's voice: the assistant's), cmu_us_rms or cmu_us_awb (men's: the
// test fixtures' users), named "slt", "rms", "awb". Each voice is loaded once per process.
StatusOr<std::unique_ptr<Synthesizer>> CreateFlite(const std::string& voice = "slt");
// `voice`: an espeak-ng voice name ("cmn" Mandarin, "en", "de", ...).
StatusOr<std::unique_ptr<Synthesizer>> CreateEspeak(const std::string& voice);

// Whether text is mostly Chinese/Japanese characters (then espeak-ng speaks it).
bool IsMostlyCjk(std::string_view text);

}  // namespace pocket::voice
