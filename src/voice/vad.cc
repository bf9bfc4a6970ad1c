#include "voice/vad.h"

#include "voice/audio.h"

#include <webrtc/modules/audio_processing/include/audio_processing.h>
#include <webrtc/modules/interface/module_common_types.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace pocket::voice {
namespace {

class WebRtcVoiceDetector final : public VoiceDetector {
 public:
  WebRtcVoiceDetector(std::unique_ptr<webrtc::AudioProcessing> apm, double floor_dbfs)
      : apm_(std::move(apm)), floor_dbfs_(floor_dbfs) {}

  StatusOr<bool> IsVoice(std::span<const int16_t> frame) override {
    if (frame.size() != static_cast<size_t>(kFrameSamples)) {
      return InvalidArgumentError("the VAD takes frames of ", kFrameSamples, " samples, got ",
                                  frame.size());
    }
    frame_.UpdateFrame(0, 0, frame.data(), frame.size(), kAsrRate,
                       webrtc::AudioFrame::kNormalSpeech, webrtc::AudioFrame::kVadUnknown, 1);
    if (const int r = apm_->ProcessStream(&frame_); r != 0) {
      return InternalError("WebRTC audio processing failed (error ", r, ")");
    }
    return apm_->voice_detection()->stream_has_voice() && FrameDbfs(frame) >= floor_dbfs_;
  }

  void Reset() override { static_cast<void>(apm_->Initialize()); }

 private:
  std::unique_ptr<webrtc::AudioProcessing> apm_;
  double floor_dbfs_;
  webrtc::AudioFrame frame_;
};

}  // namespace

double FrameDbfs(std::span<const int16_t> frame) {
  if (frame.empty()) return -200.0;
  double sum = 0;
  for (int16_t s : frame) sum += static_cast<double>(s) * s;
  const double rms = std::sqrt(sum / static_cast<double>(frame.size())) / 32768.0;
  return rms > 0 ? 20.0 * std::log10(rms) : -200.0;
}

StatusOr<std::unique_ptr<VoiceDetector>> CreateWebRtcVoiceDetector(const VadOptions& options) {
  if (options.likelihood < 0 || options.likelihood > 3) {
    return InvalidArgumentError("VAD likelihood must be 0 to 3, got ", options.likelihood);
  }
  std::unique_ptr<webrtc::AudioProcessing> apm(webrtc::AudioProcessing::Create());
  if (!apm) return InternalError("cannot create WebRTC audio processing");
  webrtc::VoiceDetection* vd = apm->voice_detection();
  if (vd->Enable(true) != 0 ||
      vd->set_likelihood(static_cast<webrtc::VoiceDetection::Likelihood>(options.likelihood)) !=
          0 ||
      vd->set_frame_size_ms(10) != 0 || apm->high_pass_filter()->Enable(true) != 0) {
    return InternalError("cannot configure WebRTC voice detection");
  }
  return std::unique_ptr<VoiceDetector>(
      new WebRtcVoiceDetector(std::move(apm), options.floor_dbfs));
}

Endpointer::Endpointer(const EndpointerOptions& options) : options_(options) {
  Reset();
}

void Endpointer::Reset() {
  window_.assign(static_cast<size_t>(std::max(1, options_.start_frames)), false);
  voiced_in_window_ = 0;
  in_speech_ = false;
  unvoiced_run_ = 0;
  frames_ = 0;
  start_frame_ = -1;
  last_voiced_ = -1;
}

VadEvent Endpointer::Push(bool voiced) {
  const int64_t index = frames_++;
  const size_t slot = static_cast<size_t>(index % static_cast<int64_t>(window_.size()));
  voiced_in_window_ += (voiced ? 1 : 0) - (window_[slot] ? 1 : 0);
  window_[slot] = voiced;
  if (voiced) last_voiced_ = index;
  if (!in_speech_) {
    if (voiced_in_window_ >= options_.start_voiced) {
      in_speech_ = true;
      unvoiced_run_ = 0;
      // The first voiced frame still in the window.
      const int64_t n = static_cast<int64_t>(window_.size());
      for (int64_t back = std::min<int64_t>(n, index + 1) - 1; back >= 0; --back) {
        if (window_[static_cast<size_t>((index - back) % n)]) {
          start_frame_ = index - back;
          break;
        }
      }
      return VadEvent::kSpeechStart;
    }
    return VadEvent::kNone;
  }
  unvoiced_run_ = voiced ? 0 : unvoiced_run_ + 1;
  if (unvoiced_run_ >= options_.hangover_frames) {
    in_speech_ = false;
    unvoiced_run_ = 0;
    return VadEvent::kSpeechEnd;
  }
  return VadEvent::kNone;
}

}  // namespace pocket::voice
