/* pocket voice: a spoken conversation with a model, as a C API (libpocket_voice.so, apart from
 * libpocket.so so that the core library carries no speech engines). Capture goes in as 16 kHz
 * mono 16-bit PCM in pieces of any size; every 10 ms of it advances the pipeline (WebRTC VAD,
 * pocketsphinx, the model's chat turn, segmenter, flite / espeak-ng, barge-in) and leaves 10 ms of
 * playback (sink_rate) to pull. Events arrive as JSON objects through a callback. Errors,
 * statuses, versions and struct_size as in pocket.h. A pocket_voice is used by one thread at a
 * time, except pocket_voice_busy and pocket_voice_stop, which any thread may call, the event
 * callback too.
 *
 * Linking: libpocket_voice.so holds all that an app using this header calls, pocket_version and
 * pocket_status_name of pocket.h included, so such an app links it alone (-lpocket_voice, or
 * `pkg-config --cflags --libs pocket_voice`); an app that also uses the rest of pocket.h (models,
 * sessions) links libpocket.so too (`pkg-config --cflags --libs pocket_voice pocket`). */
#ifndef POCKET_POCKET_VOICE_H_
#define POCKET_POCKET_VOICE_H_

#include "pocket/pocket.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pocket_voice pocket_voice;

/* An event: a JSON object with "event" (speech_start, speech_end, asr_partial, asr_final,
 * first_token, segment, first_audio, barge_in, reply_end, stopped, error) and "t_ms". The text is
 * valid during the call only. With a real clock it may come from the pipeline's worker thread.
 * It is called with no lock of the pipeline held, one event at a time, in order: it may call
 * pocket_voice_busy and pocket_voice_stop (what those emit arrives after it returns). */
typedef void (*pocket_voice_event_callback)(const char* json, void* user_data);

typedef struct pocket_voice_params {
  size_t struct_size;                   /* set by pocket_voice_default_params() */
  const char* tokenizer_path;           /* NULL: the model's own */
  int32_t n_threads;                    /* compute threads (0: one per hardware thread) */
  int32_t n_ctx;                        /* context tokens (default 4096, clamped to the model's) */
  int32_t max_tokens;                   /* per reply (default 48) */
  float temperature;                    /* default 0.7 */
  uint64_t seed;                        /* turn i samples with seed + i (default 1) */
  const char* system_prompt;            /* NULL: a brief voice assistant */
  int32_t sink_rate;                    /* playback rate, Hz (default 16000) */
  int32_t hangover_ms;                  /* silence that ends the user's turn (default 300) */
  bool virtual_clock;                   /* the model runs inside push, a fixed amount per 10 ms: a
                                           deterministic run as fast as the machine (tests); false: a
                                           worker thread, times from the wall clock */
  pocket_voice_event_callback on_event; /* NULL: none */
  void* user_data;
} pocket_voice_params;

POCKET_API void pocket_voice_params_init(pocket_voice_params* params, size_t struct_size);
POCKET_INLINE pocket_voice_params pocket_voice_default_params(void) {
  pocket_voice_params params;
  pocket_voice_params_init(&params, sizeof(params));
  return params;
}
/* Loads the model (as pocket_model_load: a missing file is POCKET_ERR_NOT_FOUND) and the speech
 * engines. */
POCKET_API pocket_status pocket_voice_create(const char* model_path,
                                             const pocket_voice_params* params,
                                             pocket_voice** out_voice, pocket_error* err);
/* Capture: n samples at 16 kHz; complete 10 ms frames are processed now, the rest kept for the
 * next call. */
POCKET_API pocket_status pocket_voice_push(pocket_voice* voice, const int16_t* pcm, size_t n,
                                           pocket_error* err);
/* Playback: up to `capacity` samples (sink_rate) of what the processed frames produced, oldest
 * first (silence where the assistant said nothing); returns how many were written. At most
 * POCKET_VOICE_MAX_PLAYBACK_SECONDS of playback wait to be pulled: beyond that the oldest samples
 * are dropped (pocket_voice_playback_dropped counts them). */
#define POCKET_VOICE_MAX_PLAYBACK_SECONDS 30
POCKET_API size_t pocket_voice_pull(pocket_voice* voice, int16_t* out, size_t capacity);
/* Samples dropped because playback was not pulled (see pocket_voice_pull); 0 for NULL. */
POCKET_API uint64_t pocket_voice_playback_dropped(const pocket_voice* voice);
/* Whether the assistant is thinking or has audio left. */
POCKET_API bool pocket_voice_busy(const pocket_voice* voice);
/* Stops the assistant now (generation, synthesis, audio not played): a "stop" event. */
POCKET_API void pocket_voice_stop(pocket_voice* voice);
POCKET_API void pocket_voice_free(pocket_voice* voice);

#ifdef __cplusplus
}
#endif

#endif /* POCKET_POCKET_VOICE_H_ */
