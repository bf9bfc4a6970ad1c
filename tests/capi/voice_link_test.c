/* A program that uses only <pocket/pocket_voice.h> (and what it declares from pocket.h:
 * pocket_version, pocket_status_name), built against an installed tree and linked with
 * libpocket_voice alone (-lpocket_voice, no -lpocket): it must link and run. It checks the
 * version, the struct_size rules of pocket_voice_params and that a missing model is
 * POCKET_ERR_NOT_FOUND; no model is loaded. Usage: voice_link_test */
#include <pocket/pocket_voice.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond, ...)                                                    \
  do {                                                                      \
    if (!(cond)) {                                                          \
      fprintf(stderr, "voice_link_test:%d: FAILED: %s: ", __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
      ++failures;                                                           \
    }                                                                       \
  } while (0)

int main(void) {
  char version[64];
  snprintf(version, sizeof(version), "%d.%d.%d", POCKET_VERSION_MAJOR, POCKET_VERSION_MINOR,
           POCKET_VERSION_PATCH);
  CHECK(strcmp(pocket_version(), POCKET_VERSION_STRING) == 0 &&
            strcmp(version, POCKET_VERSION_STRING) == 0,
        "library %s, header %s, macros %s", pocket_version(), POCKET_VERSION_STRING, version);
  printf("pocket %s\n", pocket_version());

  pocket_error err;
  pocket_voice* voice = NULL;
  const char* missing = "/nonexistent/voice-model.gguf";
  pocket_voice_params p = pocket_voice_default_params();
  CHECK(p.struct_size == sizeof(p), "struct_size %zu, sizeof %zu", p.struct_size, sizeof(p));
  CHECK(p.hangover_ms == 300 && p.max_tokens == 48, "defaults %d %d", (int)p.hangover_ms,
        (int)p.max_tokens);

  /* A missing model file: NotFound, naming it. */
  pocket_status st = pocket_voice_create(missing, &p, &voice, &err);
  CHECK(st == POCKET_ERR_NOT_FOUND && voice == NULL, "missing model gave %s: %s",
        pocket_status_name(st), err.message);
  CHECK(strcmp(pocket_status_name(st), "NotFound") == 0, "name %s", pocket_status_name(st));
  CHECK(strstr(err.message, missing) != NULL, "message: %s", err.message);

  /* A field within struct_size is read (an invalid one is refused before the model loads) ... */
  p.hangover_ms = 1;
  st = pocket_voice_create(missing, &p, &voice, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && voice == NULL &&
            strstr(err.message, "hangover_ms") != NULL,
        "hangover_ms 1 gave %s: %s", pocket_status_name(st), err.message);
  CHECK(strcmp(pocket_status_name(st), "InvalidArgument") == 0, "name %s", pocket_status_name(st));
  /* ... one past it is not: an app compiled against an older header, whose struct ended before
   * hangover_ms, gets its default. */
  p.struct_size = offsetof(pocket_voice_params, hangover_ms);
  st = pocket_voice_create(missing, &p, &voice, &err);
  CHECK(st == POCKET_ERR_NOT_FOUND, "a struct ending before hangover_ms gave %s: %s",
        pocket_status_name(st), err.message);

  /* An app compiled against a newer header (a larger struct) or a zeroed struct: refused,
   * naming struct_size. */
  p = pocket_voice_default_params();
  p.struct_size = sizeof(p) + 8;
  st = pocket_voice_create(missing, &p, &voice, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "struct_size") != NULL,
        "a larger struct_size gave %s: %s", pocket_status_name(st), err.message);
  printf("expected error: %s\n", err.message);
  memset(&p, 0, sizeof(p));
  st = pocket_voice_create(missing, &p, &voice, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "struct_size") != NULL,
        "a zeroed struct gave %s: %s", pocket_status_name(st), err.message);

  if (failures > 0) return 1;
  printf("voice_link_test: OK\n");
  return 0;
}
