// The voice pipeline (docs/architecture.md, "Voice"): microphone audio in 10 ms frames → VAD and
// endpointer → speech recognition → a chat turn on a Session (streamed) → segmenter → speech
// synthesis → the audio to play, with barge-in: user speech while the assistant thinks or speaks
// cancels the generation (Session::Cancel), stops the synthesis and drops the audio not yet
// played; the history keeps only what was played.
//
// The app (or `pocket voice`) drives it with Tick: one frame of capture in, one frame of playback
// out. With a real clock the model and the synthesis run on a worker thread, so capture never
// waits for them; with a virtual clock they run inside Tick, a fixed number of engine steps per
// frame, so a run is deterministic and as fast as the machine goes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "generate/sampler.h"
#include "model/model.h"
#include "runtime/session.h"
#include "voice/segmenter.h"
#include "voice/vad.h"

namespace pocket::voice {

struct VoiceOptions {
  SessionOptions session;  // threads, context, KV type
  std::string system_prompt =
      "You are a helpful voice assistant. Answer briefly, in one or two short sentences.";
  int32_t max_tokens = 48;  // per reply
  SamplerParams sampling;   // each turn seeds with sampling.seed + its index
  int32_t sink_rate = 16000;
  SegmenterOptions segmenter;
  VadOptions vad;
  EndpointerOptions endpointer;
  // The turn's prompt is evaluated early, from the recognizer's partial hypothesis, once the
  // user has been silent this long (ms): the endpointer's silence window is spent prefilling, and
  // the turn at the endpoint reuses what agrees with the final text (the history and the words
  // recognized alike), evaluating only the rest. 0: off. At or above the hangover: never.
  int32_t early_prefill_ms = 100;
  bool virtual_clock = false;
  int32_t virtual_steps_per_frame = 2;  // engine steps (or one segment's synthesis) per 10 ms
  std::string other_voice = "cmn";      // espeak-ng's voice for text that is mostly CJK
  // The recognizer's warm-up: speech it decodes once at creation (16 kHz), so the first
  // utterance is recognized as well as later ones. Empty: DefaultAsrWarmUp() unless
  // asr_default_warm_up is off (then none).
  std::vector<int16_t> asr_warm_up;
  bool asr_default_warm_up = true;
  // One JSON object per event (docs/architecture.md lists them), in time order.
  std::function<void(std::string_view json)> on_event;
};

// What a run measured (all times in ms on the pipeline's clock).
struct VoiceStats {
  std::vector<double> first_audio_ms;   // per reply: last voiced frame of the turn → first sample
  std::vector<double> barge_in_ms;      // per barge-in: first voiced frame → last sample played
  std::vector<std::string> user_texts;  // what the recognizer heard, per turn
  std::vector<std::string> replies;     // what was played of each reply
  int64_t samples_synthesized = 0;      // at the sink's rate
  int64_t samples_played = 0;
  int64_t samples_dropped = 0;  // queued when a barge-in came
  int32_t turns = 0;
  int32_t barge_ins = 0;
  int32_t early_prefills = 0;       // prompts evaluated in the silence window (early_prefill_ms)
  int64_t early_prompt_tokens = 0;  // ... the tokens they evaluated
  int64_t turn_prompt_tokens = 0;   // the tokens the turns evaluated after the endpoint
};

class VoicePipeline {
 public:
  static StatusOr<std::unique_ptr<VoicePipeline>> Create(std::shared_ptr<const Model> model,
                                                         const VoiceOptions& options);
  // One frame: kFrameSamples of capture at 16 kHz in, sink_rate / 100 samples of playback out
  // (silence when there is nothing to say).
  Status Tick(std::span<const int16_t> in, std::vector<int16_t>& out);
  // Stops the assistant as a barge-in would (generation, synthesis, the audio not played yet),
  // without one counted: the app's stop button. From Tick's thread.
  void Interrupt();
  // Whether the assistant is thinking or has audio left to play.
  bool busy() const;
  // The time of the next frame, ms.
  double now_ms() const;
  VoiceStats stats() const;
  ~VoicePipeline();

 private:
  struct Impl;
  explicit VoicePipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A sentence in flite's rms voice at 16 kHz ("Good morning, how are you doing today?"): the
// warm-up a pipeline uses when given none.
StatusOr<std::vector<int16_t>> DefaultAsrWarmUp();

// P-th percentile (0-100) of `values` by linear interpolation (0 for none).
double Percentile(std::vector<double> values, double p);

}  // namespace pocket::voice
