#include "voice/alsa.h"

#include <algorithm>
#include <cerrno>
#include <vector>

#ifdef POCKET_HAVE_ALSA
#include <alsa/asoundlib.h>
#endif

#include "voice/vad.h"

namespace pocket::voice {

#ifdef POCKET_HAVE_ALSA
namespace {

// Opens `device` for mono S16 at `rate` with `latency_us` of buffer.
StatusOr<snd_pcm_t*> OpenPcm(const std::string& device, snd_pcm_stream_t stream, int32_t rate,
                             unsigned latency_us) {
  const char* what = stream == SND_PCM_STREAM_CAPTURE ? "capture" : "playback";
  snd_pcm_t* pcm = nullptr;
  int err = snd_pcm_open(&pcm, device.c_str(), stream, 0);
  if (err < 0) {
    return IoError("cannot open ALSA device '", device, "' for ", what, ": ", snd_strerror(err),
                   " (`aplay -L` lists the devices)");
  }
  err = snd_pcm_set_params(pcm, SND_PCM_FORMAT_S16_LE, SND_PCM_ACCESS_RW_INTERLEAVED,
                           /*channels=*/1, static_cast<unsigned>(rate), /*soft_resample=*/1,
                           latency_us);
  if (err < 0) {
    snd_pcm_close(pcm);
    return IoError("ALSA device '", device, "' does not take mono 16-bit ", what, " at ", rate,
                   " Hz: ", snd_strerror(err), " (a plug device such as 'plughw:0' converts)");
  }
  return pcm;
}

class AlsaCaptureImpl : public AlsaCapture {
 public:
  AlsaCaptureImpl(snd_pcm_t* pcm, std::string device) : pcm_(pcm), device_(std::move(device)) {}
  ~AlsaCaptureImpl() override { snd_pcm_close(pcm_); }

  StatusOr<bool> Read(std::span<int16_t> frame) override {
    size_t got = 0;
    while (got < frame.size()) {
      const snd_pcm_sframes_t n = snd_pcm_readi(pcm_, frame.data() + got, frame.size() - got);
      if (n >= 0) {
        got += static_cast<size_t>(n);
        continue;
      }
      if (n == -EPIPE) ++overruns_;
      const int err = snd_pcm_recover(pcm_, static_cast<int>(n), /*silent=*/1);
      if (err < 0) {
        return IoError("ALSA capture from '", device_, "' failed: ", snd_strerror(err));
      }
    }
    return true;
  }
  bool paced() const override { return true; }
  int64_t overruns() const override { return overruns_; }

 private:
  snd_pcm_t* pcm_;
  std::string device_;
  int64_t overruns_ = 0;
};

class AlsaPlaybackImpl : public AlsaPlayback {
 public:
  AlsaPlaybackImpl(snd_pcm_t* pcm, std::string device) : pcm_(pcm), device_(std::move(device)) {}
  ~AlsaPlaybackImpl() override { snd_pcm_close(pcm_); }

  Status Write(std::span<const int16_t> frame) override {
    size_t put = 0;
    while (put < frame.size()) {
      const snd_pcm_sframes_t n = snd_pcm_writei(pcm_, frame.data() + put, frame.size() - put);
      if (n >= 0) {
        put += static_cast<size_t>(n);
        continue;
      }
      if (n == -EPIPE) ++underruns_;
      const int err = snd_pcm_recover(pcm_, static_cast<int>(n), /*silent=*/1);
      if (err < 0) {
        return IoError("ALSA playback to '", device_, "' failed: ", snd_strerror(err));
      }
    }
    return Status::Ok();
  }
  Status Finish() override {
    const int err = snd_pcm_drain(pcm_);
    if (err < 0 && err != -EPIPE) {
      return IoError("ALSA playback to '", device_, "' failed at the end: ", snd_strerror(err));
    }
    return Status::Ok();
  }
  int64_t underruns() const override { return underruns_; }

 private:
  snd_pcm_t* pcm_;
  std::string device_;
  int64_t underruns_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<AlsaCapture>> OpenAlsaCapture(const std::string& device) {
  // A 100 ms buffer: capture waits for each 10 ms frame, and the pipeline's Tick is far shorter.
  POCKET_ASSIGN_OR_RETURN(snd_pcm_t * pcm,
                          OpenPcm(device, SND_PCM_STREAM_CAPTURE, kAsrRate, 100000));
  const int err = snd_pcm_start(pcm);
  if (err < 0) {
    snd_pcm_close(pcm);
    return IoError("cannot start ALSA capture from '", device, "': ", snd_strerror(err));
  }
  return std::unique_ptr<AlsaCapture>(new AlsaCaptureImpl(pcm, device));
}

StatusOr<std::unique_ptr<AlsaPlayback>> OpenAlsaPlayback(const std::string& device, int32_t rate,
                                                         int32_t latency_ms) {
  if (rate < 8000 || rate > 192000) {
    return InvalidArgumentError("a playback rate of ", rate, " Hz (8000 to 192000)");
  }
  POCKET_ASSIGN_OR_RETURN(snd_pcm_t * pcm,
                          OpenPcm(device, SND_PCM_STREAM_PLAYBACK, rate,
                                  static_cast<unsigned>(std::clamp(latency_ms, 20, 1000)) * 1000u));
  return std::unique_ptr<AlsaPlayback>(new AlsaPlaybackImpl(pcm, device));
}

#else  // !POCKET_HAVE_ALSA

StatusOr<std::unique_ptr<AlsaCapture>> OpenAlsaCapture(const std::string& device) {
  return UnimplementedError("ALSA capture from '", device,
                            "': this build has no ALSA (install libasound2-dev and rebuild)");
}

StatusOr<std::unique_ptr<AlsaPlayback>> OpenAlsaPlayback(const std::string& device, int32_t,
                                                         int32_t) {
  return UnimplementedError("ALSA playback to '", device,
                            "': this build has no ALSA (install libasound2-dev and rebuild)");
}

#endif

}  // namespace pocket::voice
