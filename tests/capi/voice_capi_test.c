/* The voice C API (include/pocket/pocket_voice.h) from C: stories260K on the virtual clock, a
 * user turn pushed as PCM in pieces that are not whole frames, the reply pulled, a barge-in, the
 * app's stop, a callback that calls pocket_voice_busy on every event and stops a reply at its
 * first audio (no lock held), playback bounded when the app does not pull, and the errors. Usage:
 * voice_capi_test MODEL TOKENIZER SPEECH.wav (16 kHz mono 16-bit, e.g. `pocket voice --fixtures`).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pocket/pocket_voice.h"

static int failures = 0;
#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

typedef struct Events {
  int asr_final, first_audio, barge_in, stopped, reply_end;
  char heard[512];
  pocket_voice* voice;     /* set: the callback asks pocket_voice_busy at every event */
  int stop_at_first_audio; /* the callback stops the reply when its audio starts */
} Events;

static void on_event(const char* json, void* user) {
  Events* e = (Events*)user;
  if (strstr(json, "\"event\":\"asr_final\"")) {
    ++e->asr_final;
    const char* t = strstr(json, "\"text\":\"");
    if (t) snprintf(e->heard, sizeof(e->heard), "%s", t + 8);
  }
  if (e->voice != NULL) (void)pocket_voice_busy(e->voice); /* deadlocked under the old lock */
  if (strstr(json, "\"event\":\"first_audio\"")) {
    ++e->first_audio;
    if (e->stop_at_first_audio) {
      e->stop_at_first_audio = 0;
      pocket_voice_stop(e->voice);
    }
  }
  if (strstr(json, "\"event\":\"barge_in\"")) ++e->barge_in;
  if (strstr(json, "\"event\":\"stopped\"")) ++e->stopped;
  if (strstr(json, "\"event\":\"reply_end\"")) ++e->reply_end;
}

/* The samples of a canonical PCM WAV's "data" chunk. */
static int16_t* read_wav(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char header[12];
  if (fread(header, 1, 12, f) != 12 || memcmp(header, "RIFF", 4) || memcmp(header + 8, "WAVE", 4)) {
    fclose(f);
    return NULL;
  }
  for (;;) {
    unsigned char chunk[8];
    if (fread(chunk, 1, 8, f) != 8) break;
    const unsigned size = chunk[4] | chunk[5] << 8 | chunk[6] << 16 | (unsigned)chunk[7] << 24;
    if (memcmp(chunk, "data", 4) == 0) {
      int16_t* s = malloc(size);
      *n = fread(s, 1, size, f) / 2;
      fclose(f);
      return s;
    }
    fseek(f, (long)(size + (size & 1)), SEEK_CUR);
  }
  fclose(f);
  return NULL;
}

/* Pushes `n` samples (speech, or silence when s is NULL) in pieces of 333; returns the
 * non-silent samples pulled meanwhile. */
static long feed(pocket_voice* v, const int16_t* s, size_t n) {
  static int16_t zeros[333];
  int16_t out[4096];
  long voiced = 0;
  for (size_t i = 0; i < n; i += 333) {
    const size_t k = n - i < 333 ? n - i : 333;
    pocket_error err;
    CHECK(pocket_voice_push(v, s ? s + i : zeros, k, &err) == POCKET_OK);
    size_t got;
    while ((got = pocket_voice_pull(v, out, 4096)) > 0) {
      for (size_t j = 0; j < got; ++j) voiced += out[j] != 0;
    }
  }
  return voiced;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s MODEL TOKENIZER SPEECH.wav\n", argv[0]);
    return 2;
  }
  size_t n = 0;
  int16_t* speech = read_wav(argv[3], &n);
  if (!speech || n < 16000) {
    fprintf(stderr, "cannot read %s\n", argv[3]);
    return 2;
  }
  Events events;
  memset(&events, 0, sizeof(events));
  pocket_voice_params p = pocket_voice_default_params();
  p.tokenizer_path = argv[2];
  p.n_threads = 2;
  p.virtual_clock = true;
  p.max_tokens = 40;
  p.on_event = on_event;
  p.user_data = &events;
  pocket_voice* v = NULL;
  pocket_error err;
  if (pocket_voice_create(argv[1], &p, &v, &err) != POCKET_OK) {
    fprintf(stderr, "pocket_voice_create: %s\n", err.message);
    return 1;
  }
  /* A turn, then silence while the assistant answers: its speech comes back. */
  feed(v, NULL, 4800);
  feed(v, speech, n);
  long played = feed(v, NULL, 16000 * 2);
  CHECK(events.asr_final == 1);
  CHECK(events.first_audio == 1);
  CHECK(played > 1000);
  CHECK(pocket_voice_busy(v));
  fprintf(stderr, "heard: %s\n", events.heard);
  /* The user speaks over it: a barge-in. */
  feed(v, speech, n);
  CHECK(events.barge_in == 1);
  feed(v, NULL, 16000);
  CHECK(events.asr_final == 2);
  /* The app's stop button while it answers that. */
  feed(v, NULL, 1600);
  pocket_voice_stop(v);
  CHECK(events.stopped == 1);
  feed(v, NULL, 1600);
  CHECK(!pocket_voice_busy(v));
  /* The callback itself stops the next reply when its audio starts. */
  events.voice = v;
  events.stop_at_first_audio = 1;
  const int first_audio = events.first_audio, stopped = events.stopped;
  feed(v, speech, n);
  feed(v, NULL, 16000 * 2);
  CHECK(events.first_audio == first_audio + 1);
  CHECK(events.stopped == stopped + 1);
  CHECK(!pocket_voice_busy(v));
  /* 35 s of capture with no pull: 30 s of playback wait, the oldest 5 s are dropped. */
  CHECK(pocket_voice_playback_dropped(v) == 0);
  static int16_t zeros[333];
  for (size_t i = 0; i < 35 * 16000; i += 333) {
    CHECK(pocket_voice_push(v, zeros, 333, &err) == POCKET_OK);
  }
  const uint64_t dropped = pocket_voice_playback_dropped(v);
  CHECK(dropped + 160 >= 5 * 16000 && dropped <= 5 * 16000 + 480);
  size_t waiting = 0, got;
  static int16_t out[4096];
  while ((got = pocket_voice_pull(v, out, 4096)) > 0) waiting += got;
  CHECK(waiting == (size_t)POCKET_VOICE_MAX_PLAYBACK_SECONDS * 16000);
  CHECK(pocket_voice_playback_dropped(NULL) == 0);
  pocket_voice_free(v);

  /* Errors: named, no crash. */
  CHECK(pocket_voice_create(NULL, &p, &v, &err) == POCKET_ERR_INVALID_ARGUMENT);
  CHECK(pocket_voice_create("/nonexistent/model.gguf", &p, &v, &err) != POCKET_OK);
  CHECK(strstr(err.message, "/nonexistent/model.gguf") != NULL);
  p.hangover_ms = 5;
  CHECK(pocket_voice_create(argv[1], &p, &v, &err) == POCKET_ERR_INVALID_ARGUMENT);
  CHECK(strstr(err.message, "hangover_ms") != NULL);
  CHECK(pocket_voice_push(NULL, speech, 10, &err) == POCKET_ERR_INVALID_ARGUMENT);
  CHECK(pocket_voice_pull(NULL, speech, 10) == 0);
  pocket_voice_free(NULL);
  free(speech);
  if (failures) fprintf(stderr, "%d checks failed\n", failures);
  return failures ? 1 : 0;
}
