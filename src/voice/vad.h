// Voice activity: a per-frame decision (WebRTC's detector from libwebrtc-audio-processing, behind
// an energy floor that keeps low-level noise out) and the endpointer that turns decisions into
// the start and end of an utterance (docs/architecture.md, "Voice").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"

namespace pocket::voice {

constexpr int32_t kFrameSamples = 160;  // 10 ms at 16 kHz: the unit the VAD decides on

struct VadOptions {
  // WebRTC's likelihood of declaring voice: 0 (very low, the most aggressive about noise) to 3.
  int32_t likelihood = 1;
  // Frames quieter than this (RMS, dB full scale) are never voice, whatever the detector says.
  double floor_dbfs = -45.0;
};

// Decides whether a 10 ms frame (kFrameSamples at 16 kHz) holds speech.
class VoiceDetector {
 public:
  virtual ~VoiceDetector() = default;
  virtual StatusOr<bool> IsVoice(std::span<const int16_t> frame) = 0;
  virtual void Reset() = 0;
};

StatusOr<std::unique_ptr<VoiceDetector>> CreateWebRtcVoiceDetector(const VadOptions& options);

// RMS level of a frame in dB full scale (-inf for digital silence: returns -200).
double FrameDbfs(std::span<const int16_t> frame);

struct EndpointerOptions {
  int32_t start_frames = 10;     // a window of 100 ms ...
  int32_t start_voiced = 7;      // ... with this many voiced frames starts speech
  int32_t hangover_frames = 30;  // this many unvoiced frames in a row (300 ms) end it
};

enum class VadEvent { kNone, kSpeechStart, kSpeechEnd };

// Turns per-frame decisions into utterances. Frame indices count every frame pushed.
class Endpointer {
 public:
  explicit Endpointer(const EndpointerOptions& options = {});
  VadEvent Push(bool voiced);
  bool in_speech() const { return in_speech_; }
  // The first voiced frame of the window that started the current (or last) utterance.
  int64_t speech_start_frame() const { return start_frame_; }
  // The last voiced frame seen (the end of the utterance once kSpeechEnd came).
  int64_t last_voiced_frame() const { return last_voiced_; }
  int64_t frames() const { return frames_; }
  void Reset();

 private:
  EndpointerOptions options_;
  std::vector<bool> window_;  // the last start_frames decisions, a ring
  int32_t voiced_in_window_ = 0;
  bool in_speech_ = false;
  int32_t unvoiced_run_ = 0;
  int64_t frames_ = 0;
  int64_t start_frame_ = -1;
  int64_t last_voiced_ = -1;
};

}  // namespace pocket::voice
