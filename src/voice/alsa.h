// ALSA capture and playback for the voice pipeline (Linux). Both open the device for mono 16-bit
// PCM at the pipeline's rate; alsa-lib's plug layer converts when the device is a plug device
// ("default", "plughw:0"), a raw "hw:0" must take the rate itself. Overruns and underruns are
// recovered and counted, never fatal. Built when alsa-lib is found (pkg-config alsa); without it
// the functions return an Unimplemented error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "voice/io.h"

namespace pocket::voice {

class AlsaCapture : public AudioSource {
 public:
  virtual int64_t overruns() const = 0;
};

class AlsaPlayback : public AudioSink {
 public:
  virtual int64_t underruns() const = 0;
};

// 16 kHz capture from `device` ("default", "plughw:1", an .asoundrc name).
StatusOr<std::unique_ptr<AlsaCapture>> OpenAlsaCapture(const std::string& device);
// Playback at `rate` to `device`; `latency_ms` of buffer (the first writes fill it before sound
// starts, so a late frame does not underrun).
StatusOr<std::unique_ptr<AlsaPlayback>> OpenAlsaPlayback(const std::string& device, int32_t rate,
                                                         int32_t latency_ms = 80);

}  // namespace pocket::voice
