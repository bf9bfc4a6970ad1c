// Scripted conversations for the voice pipeline (tests/voice/README.md documents the format): the
// user's turns as text (synthesized with flite's rms voice, low-level noise mixed in) or WAV
// files, each started at a time, after the assistant finished speaking, or during its reply (a
// barge-in). RunScript plays one through a VoicePipeline, on a virtual clock or in real time,
// writes what the assistant played, and measures first-audio and barge-in latency and the
// recognizer's word error rate.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/model.h"
#include "voice/audio.h"
#include "voice/pipeline.h"

namespace pocket::voice {

struct ScriptTurn {
  enum class When { kAt, kAfter, kBarge };
  When when = When::kAfter;
  double seconds = 0;
  std::string text;  // what the user says (the transcript the WER is measured against)
  std::string file;  // a recording (resolved against the script's folder); empty: synthesized
  int32_t line = 0;
};

struct Script {
  std::vector<ScriptTurn> turns;
  double noise_dbfs = -60;  // background noise mixed into the capture; <= -200: none
  uint64_t seed = 1;        // the noise's
};

// Parses a script; errors name the file and line.
StatusOr<Script> ParseScript(std::string_view text, const std::string& path);
// Reads and parses a script, and checks that each turn's recording is there (an error names the
// script's file and line); RunScript's errors reading a recording name them too.
StatusOr<Script> LoadScript(const std::string& path);

struct ScriptRunOptions {
  VoiceOptions voice;         // voice.virtual_clock: no pacing
  std::string output_wav;     // what the assistant played, on the conversation's timeline
  std::string capture_wav;    // the capture the pipeline heard (the user and the noise)
  std::string fixtures_dir;   // write each turn's synthesized audio here (turn-NN.wav)
  double tail_seconds = 120;  // after the last turn, the most to wait for the assistant to end
};

struct ScriptResult {
  VoiceStats stats;
  double first_audio_ms_p50 = 0;
  double first_audio_ms_p90 = 0;
  double barge_in_ms_p50 = 0;
  double asr_wer = 0;
  int64_t asr_errors = 0;
  int64_t asr_words = 0;
  int32_t scripted_barge_ins = 0;  // barge turns that came while the assistant was speaking
  bool samples_reconcile = false;  // played + dropped == synthesized
  // Resident memory (Linux: /proc/self/statm; 0 elsewhere) when the third turn starts (after
  // warm-up: the model, the engines and the session's pages in use) and at the end.
  double rss_warm_mib = 0;
  double rss_end_mib = 0;
  double conversation_seconds = 0;
  double wall_seconds = 0;
  std::vector<std::string> trace;  // the events, JSON each
  std::vector<std::string> heard;  // per script turn: what the recognizer made of it
};

StatusOr<ScriptResult> RunScript(std::shared_ptr<const Model> model, const Script& script,
                                 const std::string& script_path, const ScriptRunOptions& options);

}  // namespace pocket::voice
