// libpocket_voice.so: the voice pipeline's C API (include/pocket/pocket_voice.h).
#include "pocket/pocket_voice.h"

#include <array>
#include <cstdio>
#include <deque>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "capi/common.h"
#include "capi/params.h"
#include "model/model.h"
#include "voice/pipeline.h"
#include "voice/vad.h"

struct pocket_voice {
  std::unique_ptr<pocket::voice::VoicePipeline> pipeline;
  std::vector<int16_t> pending;  // capture short of a frame
  std::deque<int16_t> playback;  // produced, not pulled yet: at most max_playback samples
  size_t max_playback = 0;       // kMaxPlaybackSeconds at the sink rate
  uint64_t dropped = 0;          // the oldest samples dropped beyond it
  std::vector<int16_t> out;      // one frame's playback
};

namespace {

using pocket::capi::Fail;
using pocket::capi::Guard;
using pocket::capi::Report;

// The fields after struct_size, in order (capi/params.h), and the library's defaults.
constexpr std::array kVoiceFields{POCKET_CAPI_FIELD(pocket_voice_params, tokenizer_path),
                                  POCKET_CAPI_FIELD(pocket_voice_params, n_threads),
                                  POCKET_CAPI_FIELD(pocket_voice_params, n_ctx),
                                  POCKET_CAPI_FIELD(pocket_voice_params, max_tokens),
                                  POCKET_CAPI_FIELD(pocket_voice_params, temperature),
                                  POCKET_CAPI_FIELD(pocket_voice_params, seed),
                                  POCKET_CAPI_FIELD(pocket_voice_params, system_prompt),
                                  POCKET_CAPI_FIELD(pocket_voice_params, sink_rate),
                                  POCKET_CAPI_FIELD(pocket_voice_params, hangover_ms),
                                  POCKET_CAPI_FIELD(pocket_voice_params, virtual_clock),
                                  POCKET_CAPI_FIELD(pocket_voice_params, on_event),
                                  POCKET_CAPI_FIELD(pocket_voice_params, user_data)};
static_assert(pocket::capi::ListsEveryField(kVoiceFields, sizeof(pocket_voice_params),
                                            alignof(pocket_voice_params)));

pocket_voice_params VoiceDefaults() {
  pocket_voice_params p{};
  p.struct_size = sizeof(pocket_voice_params);
  p.tokenizer_path = nullptr;
  p.n_threads = 0;
  p.n_ctx = 4096;
  p.max_tokens = 48;
  p.temperature = 0.7f;
  p.seed = 1;
  p.system_prompt = nullptr;
  p.sink_rate = 16000;
  p.hangover_ms = 300;
  p.virtual_clock = false;
  p.on_event = nullptr;
  p.user_data = nullptr;
  return p;
}

}  // namespace

void pocket_voice_params_init(pocket_voice_params* params, size_t struct_size) {
  pocket::capi::InitParams(params, struct_size, VoiceDefaults(), kVoiceFields);
}

pocket_status pocket_voice_create(const char* model_path, const pocket_voice_params* params,
                                  pocket_voice** out_voice, pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (model_path == nullptr || out_voice == nullptr) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "model_path and out_voice must not be NULL");
    }
    *out_voice = nullptr;
    pocket_voice_params p;
    const pocket::Status read =
        pocket::capi::ReadParams(params, VoiceDefaults(), kVoiceFields, "pocket_voice_params",
                                 "pocket_voice_default_params", &p);
    if (!read.ok()) return Report(err, read);
    if (p.hangover_ms < 30 || p.hangover_ms > 5000) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                  "hangover_ms must be 30 to 5000, got " + std::to_string(p.hangover_ms));
    }
    if (p.max_tokens < 1) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT,
                  "max_tokens must be >= 1, got " + std::to_string(p.max_tokens));
    }
    if (auto s = pocket::capi::CheckPathExists(model_path, "model"); !s.ok()) {
      return Report(err, s);
    }
    pocket::LoadOptions lo;
    if (p.tokenizer_path != nullptr) {
      if (auto s = pocket::capi::CheckPathExists(p.tokenizer_path, "tokenizer"); !s.ok()) {
        return Report(err, s);
      }
      lo.tokenizer_path = p.tokenizer_path;
    }
    auto model = pocket::Model::Load(model_path, lo);
    if (!model.ok()) return Report(err, model.status());
    pocket::voice::VoiceOptions vo;
    vo.session.n_threads = p.n_threads;
    vo.session.n_ctx = p.n_ctx;
    vo.max_tokens = p.max_tokens;
    vo.sampling.temperature = p.temperature;
    vo.sampling.seed = p.seed;
    if (p.system_prompt != nullptr) vo.system_prompt = p.system_prompt;
    vo.sink_rate = p.sink_rate;
    vo.endpointer.hangover_frames = p.hangover_ms / 10;
    vo.virtual_clock = p.virtual_clock;
    if (p.on_event != nullptr) {
      const pocket_voice_event_callback cb = p.on_event;
      void* user = p.user_data;
      vo.on_event = [cb, user](std::string_view json) {
        const std::string text(json);
        cb(text.c_str(), user);
      };
    }
    auto pipeline = pocket::voice::VoicePipeline::Create(std::move(*model), vo);
    if (!pipeline.ok()) return Report(err, pipeline.status());
    auto voice = std::make_unique<pocket_voice>();
    voice->pipeline = std::move(*pipeline);
    voice->max_playback = static_cast<size_t>(p.sink_rate) * POCKET_VOICE_MAX_PLAYBACK_SECONDS;
    *out_voice = voice.release();
    return Report(err, pocket::Status::Ok());
  });
}

pocket_status pocket_voice_push(pocket_voice* voice, const int16_t* pcm, size_t n,
                                pocket_error* err) {
  return Guard(err, [&]() -> pocket_status {
    if (voice == nullptr || (pcm == nullptr && n > 0)) {
      return Fail(err, POCKET_ERR_INVALID_ARGUMENT, "voice and pcm must not be NULL");
    }
    voice->pending.insert(voice->pending.end(), pcm, pcm + n);
    const size_t frame = pocket::voice::kFrameSamples;
    size_t used = 0;
    while (voice->pending.size() - used >= frame) {
      const pocket::Status s = voice->pipeline->Tick(
          std::span<const int16_t>(voice->pending.data() + used, frame), voice->out);
      used += frame;
      if (!s.ok()) {
        voice->pending.erase(voice->pending.begin(),
                             voice->pending.begin() + static_cast<std::ptrdiff_t>(used));
        return Report(err, s);
      }
      voice->playback.insert(voice->playback.end(), voice->out.begin(), voice->out.end());
      if (voice->playback.size() > voice->max_playback) {  // the app does not pull
        const size_t over = voice->playback.size() - voice->max_playback;
        voice->playback.erase(voice->playback.begin(),
                              voice->playback.begin() + static_cast<std::ptrdiff_t>(over));
        voice->dropped += over;
      }
    }
    voice->pending.erase(voice->pending.begin(),
                         voice->pending.begin() + static_cast<std::ptrdiff_t>(used));
    return Report(err, pocket::Status::Ok());
  });
}

size_t pocket_voice_pull(pocket_voice* voice, int16_t* out, size_t capacity) {
  if (voice == nullptr || out == nullptr) return 0;
  const size_t n = std::min(capacity, voice->playback.size());
  std::copy(voice->playback.begin(), voice->playback.begin() + static_cast<std::ptrdiff_t>(n), out);
  voice->playback.erase(voice->playback.begin(),
                        voice->playback.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

uint64_t pocket_voice_playback_dropped(const pocket_voice* voice) {
  return voice != nullptr ? voice->dropped : 0;
}

bool pocket_voice_busy(const pocket_voice* voice) {
  return voice != nullptr && voice->pipeline->busy();
}

void pocket_voice_stop(pocket_voice* voice) {
  if (voice != nullptr) voice->pipeline->Interrupt();
}

void pocket_voice_free(pocket_voice* voice) {
  delete voice;
}
