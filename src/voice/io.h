// Where the voice pipeline's audio comes from and goes to, behind two small interfaces so an app
// can bring its own: a file (the microphone replayed, in real time or as fast as the machine
// goes), ALSA capture and playback (voice/alsa.h), a WAV recorder; and RunLive, the loop that
// drives a VoicePipeline from a source to a sink, 10 ms at a time, until the source ends, a
// duration passes or the caller says stop.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "voice/audio.h"
#include "voice/pipeline.h"

namespace pocket::voice {

// The microphone: 10 ms frames of 16 kHz mono PCM (kFrameSamples).
class AudioSource {
 public:
  virtual ~AudioSource() = default;
  // Fills `frame` with the next 10 ms. False once the source has ended (`frame` is then
  // silence); an error when a device fails.
  virtual StatusOr<bool> Read(std::span<int16_t> frame) = 0;
  // Whether Read waits for the audio to be captured (a device), so the caller need not pace.
  virtual bool paced() const = 0;
};

// The loudspeaker: what the pipeline plays, at its sink rate, 10 ms at a time.
class AudioSink {
 public:
  virtual ~AudioSink() = default;
  virtual Status Write(std::span<const int16_t> frame) = 0;
  // The end: waits until everything written is played (a device) or stored (a file).
  virtual Status Finish() = 0;
};

// A recording as the microphone: any file ReadAudioFile takes, resampled to 16 kHz. Not paced
// (RunLive paces it on a real clock).
class FileSource : public AudioSource {
 public:
  static StatusOr<std::unique_ptr<FileSource>> Open(const std::string& path);
  StatusOr<bool> Read(std::span<int16_t> frame) override;
  bool paced() const override { return false; }

 private:
  Audio audio_;
  size_t next_ = 0;
};

// Keeps what is played and writes it as a WAV file at Finish (a temporary file renamed).
class WavSink : public AudioSink {
 public:
  WavSink(std::string path, int32_t rate);
  Status Write(std::span<const int16_t> frame) override;
  Status Finish() override;

 private:
  std::string path_;
  Audio audio_;
};

// Plays to several sinks at once (a device and a recording).
class TeeSink : public AudioSink {
 public:
  explicit TeeSink(std::vector<AudioSink*> sinks) : sinks_(std::move(sinks)) {}
  Status Write(std::span<const int16_t> frame) override;
  Status Finish() override;

 private:
  std::vector<AudioSink*> sinks_;
};

struct LiveOptions {
  // Pace a source that does not pace itself to the wall clock (a pipeline on a real clock); off:
  // as fast as the machine goes (a virtual clock).
  bool pace = true;
  double max_seconds = 0;    // stop after this much audio (0: no limit)
  double tail_seconds = 60;  // once the source ended, the most to wait for the assistant to finish
  const std::atomic<bool>* stop = nullptr;  // set from another thread to end the run
};

struct LiveResult {
  VoiceStats stats;
  double first_audio_ms_p50 = 0;
  double first_audio_ms_p90 = 0;
  double barge_in_ms_p50 = 0;
  double seconds = 0;       // of audio
  double wall_seconds = 0;  // it took
  bool stopped = false;     // by `stop` or max_seconds, not by the source's end
};

// Drives `pipeline` (created with the sink's rate) frame by frame. Returns when the source has
// ended and the assistant has finished (or tail_seconds passed), after max_seconds, or when
// *stop is set.
StatusOr<LiveResult> RunLive(VoicePipeline& pipeline, AudioSource& source, AudioSink& sink,
                             const LiveOptions& options);

}  // namespace pocket::voice
