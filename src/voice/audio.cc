#include "voice/audio.h"

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "base/str.h"

namespace pocket::voice {
namespace {

constexpr int32_t kTaps = 16;  // input samples each side of an output instant
constexpr double kPi = 3.14159265358979323846;

int16_t Clip(double v) {
  return static_cast<int16_t>(std::lround(std::clamp(v, -32768.0, 32767.0)));
}

}  // namespace

StatusOr<Audio> ReadAudioFile(const std::string& path) {
  SF_INFO info{};
  SNDFILE* f = sf_open(path.c_str(), SFM_READ, &info);
  if (f == nullptr) {
    return InvalidArgumentError("cannot read audio file ", path, ": ", sf_strerror(nullptr));
  }
  Audio audio;
  Status status;
  if (info.channels < 1 || info.channels > 64) {
    status = InvalidArgumentError(path, ": ", info.channels, " channels");
  } else if (info.samplerate < 4000 || info.samplerate > 384000) {
    status = InvalidArgumentError(path, ": a sample rate of ", info.samplerate,
                                  " Hz (4 to 384 kHz are read)");
  } else if (info.frames <= 0) {
    status = InvalidArgumentError(path, ": no audio in the file");
  } else if (info.frames > int64_t{24} * 3600 * info.samplerate) {
    status = InvalidArgumentError(path, ": longer than a day");
  } else {
    audio.rate = info.samplerate;
    std::vector<float> frames(static_cast<size_t>(info.frames) * info.channels);
    const sf_count_t got = sf_readf_float(f, frames.data(), info.frames);
    if (got != info.frames) {
      status = DataLossError(path, ": ", got, " of ", info.frames, " frames read (truncated?)");
    } else {
      audio.samples.resize(static_cast<size_t>(got));
      for (sf_count_t i = 0; i < got; ++i) {
        double sum = 0;
        for (int c = 0; c < info.channels; ++c) sum += frames[i * info.channels + c];
        audio.samples[i] = Clip(sum / info.channels * 32768.0);
      }
    }
  }
  sf_close(f);
  if (!status.ok()) return status;
  return audio;
}

Status WriteWav(const std::string& path, const Audio& audio) {
  const std::string tmp = StrCat(path, ".tmp");
  SF_INFO info{};
  info.samplerate = audio.rate;
  info.channels = 1;
  info.format = SF_FORMAT_WAV | SF_FORMAT_PCM_16;
  SNDFILE* f = sf_open(tmp.c_str(), SFM_WRITE, &info);
  if (f == nullptr) return IoError("cannot write ", tmp, ": ", sf_strerror(nullptr));
  const sf_count_t n = static_cast<sf_count_t>(audio.samples.size());
  const sf_count_t wrote = sf_write_short(f, audio.samples.data(), n);
  const int closed = sf_close(f);
  std::error_code ec;
  if (wrote != n || closed != 0) {
    std::filesystem::remove(tmp, ec);
    return IoError("cannot write ", path, " (disk full?)");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return IoError("cannot rename ", tmp, " to ", path, ": ", ec.message());
  return Status::Ok();
}

Resampler::Resampler(int32_t from_rate, int32_t to_rate) : from_(from_rate), to_(to_rate) {
  // Below both Nyquist frequencies, with room for the window's transition band.
  const double cutoff = 0.5 * std::min(1.0, static_cast<double>(to_) / from_) * 0.92;
  // An output instant falls at one of to / gcd phases between two inputs: one row of weights
  // per phase (22.05 -> 16 kHz: 320 rows of 32).
  const int64_t g = std::gcd(from_, to_);
  phases_ = to_ / g;
  step_ = g;
  weights_.resize(static_cast<size_t>(phases_) * 2 * kTaps);
  for (int64_t p = 0; p < phases_; ++p) {
    const double frac = static_cast<double>(p * g) / to_;
    for (int32_t j = 0; j < 2 * kTaps; ++j) {
      const double x = static_cast<double>(j - kTaps + 1) - frac;  // distance in input samples
      const double w = 0.5 + 0.5 * std::cos(kPi * x / kTaps);      // Hann window
      const double arg = 2.0 * cutoff * x;
      const double sinc = x == 0 ? 1.0 : std::sin(kPi * arg) / (kPi * arg);
      weights_[static_cast<size_t>(p * 2 * kTaps + j)] =
          static_cast<float>(2.0 * cutoff * sinc * w);
    }
  }
}

void Resampler::Reset() {
  buffer_.clear();
  base_ = 0;
  next_ = 0;
  input_end_ = 0;
}

void Resampler::Push(std::span<const int16_t> in, std::vector<int16_t>& out) {
  if (from_ == to_) {
    out.insert(out.end(), in.begin(), in.end());
    return;
  }
  buffer_.insert(buffer_.end(), in.begin(), in.end());
  input_end_ += static_cast<int64_t>(in.size());
  Produce(out, /*final=*/false);
}

void Resampler::Finish(std::vector<int16_t>& out) {
  if (from_ == to_) return;
  Produce(out, /*final=*/true);
  Reset();
}

void Resampler::Produce(std::vector<int16_t>& out, bool final) {
  // Output sample n sits at input time t = n * from / to. It needs the inputs up to
  // floor(t) + kTaps; at the end, outputs up to the input's duration (missing inputs: silence).
  const int64_t last_output =
      final ? (input_end_ * to_ + from_ - 1) / from_ : INT64_MAX;  // exclusive
  while (next_ < last_output) {
    const int64_t num = next_ * from_;
    const int64_t center = num / to_;
    if (!final && center + kTaps >= input_end_) break;
    const float* w = &weights_[static_cast<size_t>((num % to_) / step_ * 2 * kTaps)];
    double sum = 0;
    for (int64_t k = center - kTaps + 1, j = 0; k <= center + kTaps; ++k, ++j) {
      if (k < base_ || k >= input_end_) continue;  // before the stream, after its end: silence
      sum += static_cast<double>(buffer_[static_cast<size_t>(k - base_)]) * w[j];
    }
    out.push_back(Clip(sum));
    ++next_;
  }
  // Drop the inputs no later output needs.
  const int64_t keep_from = std::max<int64_t>(base_, next_ * from_ / to_ - kTaps);
  if (keep_from > base_) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + (keep_from - base_));
    base_ = keep_from;
  }
}

Audio Resample(const Audio& audio, int32_t rate) {
  Audio out;
  out.rate = rate;
  Resampler r(audio.rate, rate);
  r.Push(audio.samples, out.samples);
  r.Finish(out.samples);
  return out;
}

}  // namespace pocket::voice
