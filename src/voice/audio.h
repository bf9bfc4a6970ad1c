// Audio for the voice pipeline: mono 16-bit PCM at a known rate, WAV files through libsndfile,
// and a streaming resampler (windowed sinc) between the rates of the stages (ASR wants 16 kHz,
// flite speaks at 16 kHz, espeak-ng at 22.05 kHz, a sink plays at its own).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"

namespace pocket::voice {

constexpr int32_t kAsrRate = 16000;  // what the VAD and the recognizer take

struct Audio {
  int32_t rate = kAsrRate;
  std::vector<int16_t> samples;  // mono

  double seconds() const { return rate > 0 ? static_cast<double>(samples.size()) / rate : 0; }
};

// Any file libsndfile reads (WAV of 8/16/24/32-bit integers or floats, FLAC, ...), channels mixed
// down to mono, at the file's own rate (Resample it). An unreadable file, one without audio or of
// an absurd rate is an error naming the file and why.
StatusOr<Audio> ReadAudioFile(const std::string& path);
// A 16-bit PCM WAV, written to a temporary file renamed over `path` at the end.
Status WriteWav(const std::string& path, const Audio& audio);

// Converts a stream of samples from one rate to another: a windowed-sinc interpolator (cutoff
// below the lower rate's Nyquist frequency) evaluated at each output instant, exact in time (the
// ratio is kept as integers, so no drift however long the stream). Same rate: a copy.
class Resampler {
 public:
  Resampler(int32_t from_rate, int32_t to_rate);
  int32_t from_rate() const { return from_; }
  int32_t to_rate() const { return to_; }
  // Appends to `out` every output sample the input so far determines.
  void Push(std::span<const int16_t> in, std::vector<int16_t>& out);
  // The end of the stream: the remaining output (the input padded with silence).
  void Finish(std::vector<int16_t>& out);
  void Reset();

 private:
  void Produce(std::vector<int16_t>& out, bool final);

  int32_t from_ = 0;
  int32_t to_ = 0;
  int64_t phases_ = 1;          // output instants fall at phases_ positions between inputs
  int64_t step_ = 1;            // gcd(from, to)
  std::vector<float> weights_;  // phases_ rows of 2 * kTaps
  std::vector<float> buffer_;   // input not yet consumed, from input index base_
  int64_t base_ = 0;            // the input index of buffer_[0]
  int64_t next_ = 0;            // the next output sample's index
  int64_t input_end_ = 0;       // input samples pushed in all
};

// A whole clip at another rate.
Audio Resample(const Audio& audio, int32_t rate);

}  // namespace pocket::voice
