#include "voice/io.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "voice/vad.h"

namespace pocket::voice {

StatusOr<std::unique_ptr<FileSource>> FileSource::Open(const std::string& path) {
  POCKET_ASSIGN_OR_RETURN(Audio audio, ReadAudioFile(path));
  auto source = std::unique_ptr<FileSource>(new FileSource());
  source->audio_ = audio.rate == kAsrRate ? std::move(audio) : Resample(audio, kAsrRate);
  return source;
}

StatusOr<bool> FileSource::Read(std::span<int16_t> frame) {
  const std::vector<int16_t>& s = audio_.samples;
  const size_t n = std::min(frame.size(), s.size() - std::min(next_, s.size()));
  std::copy_n(s.begin() + static_cast<ptrdiff_t>(std::min(next_, s.size())), n, frame.begin());
  std::fill(frame.begin() + static_cast<ptrdiff_t>(n), frame.end(), int16_t{0});
  next_ += frame.size();
  return n > 0;
}

WavSink::WavSink(std::string path, int32_t rate) : path_(std::move(path)) {
  audio_.rate = rate;
}

Status WavSink::Write(std::span<const int16_t> frame) {
  audio_.samples.insert(audio_.samples.end(), frame.begin(), frame.end());
  return Status::Ok();
}

Status WavSink::Finish() {
  return WriteWav(path_, audio_);
}

Status TeeSink::Write(std::span<const int16_t> frame) {
  for (AudioSink* s : sinks_) POCKET_RETURN_IF_ERROR(s->Write(frame));
  return Status::Ok();
}

Status TeeSink::Finish() {
  Status first = Status::Ok();
  for (AudioSink* s : sinks_) {
    Status st = s->Finish();
    if (first.ok() && !st.ok()) first = std::move(st);
  }
  return first;
}

StatusOr<LiveResult> RunLive(VoicePipeline& pipeline, AudioSource& source, AudioSink& sink,
                             const LiveOptions& options) {
  LiveResult result;
  std::vector<int16_t> frame(kFrameSamples);
  std::vector<int16_t> out;
  const auto wall_start = std::chrono::steady_clock::now();
  const bool pace = options.pace && !source.paced();
  const int64_t max_frames =
      options.max_seconds > 0 ? static_cast<int64_t>(options.max_seconds * 100.0 + 0.5) : -1;
  int64_t frames = 0;
  int64_t ended_at = -1;  // the frame at which the source ended
  while (true) {
    if (options.stop != nullptr && options.stop->load()) {
      result.stopped = true;
      break;
    }
    if (max_frames >= 0 && frames >= max_frames) {
      result.stopped = true;
      break;
    }
    POCKET_ASSIGN_OR_RETURN(const bool more, source.Read(frame));
    if (!more && ended_at < 0) ended_at = frames;
    if (pace) {
      // Frame n is handed over when it has been "captured", at (n + 1) * 10 ms.
      std::this_thread::sleep_until(wall_start + std::chrono::microseconds((frames + 1) * 10000));
    }
    POCKET_RETURN_IF_ERROR(pipeline.Tick(frame, out));
    POCKET_RETURN_IF_ERROR(sink.Write(out));
    ++frames;
    if (ended_at >= 0) {
      // The endpointer's hangover, then the assistant's reply.
      if (frames >= ended_at + 150 && !pipeline.busy()) break;
      if (static_cast<double>(frames - ended_at) > options.tail_seconds * 100.0) break;
    }
  }
  POCKET_RETURN_IF_ERROR(sink.Finish());
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.seconds = static_cast<double>(frames) / 100.0;
  result.stats = pipeline.stats();
  result.first_audio_ms_p50 = Percentile(result.stats.first_audio_ms, 50);
  result.first_audio_ms_p90 = Percentile(result.stats.first_audio_ms, 90);
  result.barge_in_ms_p50 = Percentile(result.stats.barge_in_ms, 50);
  return result;
}

}  // namespace pocket::voice
