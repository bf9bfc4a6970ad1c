/* Streams a greedy generation through the C API and reports tokens/s by the wall clock of the
 * whole call: the baseline the bindings' overhead is measured against (scripts/bindings-bench.sh).
 * Usage: capi_stream MODEL [N_TOKENS=256] [REPS=5] [THREADS=2]; prints one JSON line per run. */
#include <pocket/pocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static bool count_piece(const char* text, size_t len, void* user) {
  (void)text;
  *(size_t*)user += len;
  return true;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL [N_TOKENS] [REPS] [THREADS]\n", argv[0]);
    return 2;
  }
  const int n_tokens = argc > 2 ? atoi(argv[2]) : 256;
  const int reps = argc > 3 ? atoi(argv[3]) : 5;
  pocket_error err;
  pocket_model* model = NULL;
  if (pocket_model_load(argv[1], NULL, &model, &err) != POCKET_OK) {
    fprintf(stderr, "capi_stream: %s\n", err.message);
    return 1;
  }
  pocket_session_params sp = pocket_session_default_params();
  sp.n_threads = argc > 4 ? atoi(argv[4]) : 2;
  pocket_session* session = NULL;
  if (pocket_session_create(model, &sp, &session, &err) != POCKET_OK) {
    fprintf(stderr, "capi_stream: %s\n", err.message);
    return 1;
  }
  pocket_generate_params gp = pocket_generate_default_params();
  gp.temperature = 0.0f;
  gp.max_tokens = n_tokens;
  /* A warm-up generation first, unreported (as the bindings' benchmarks do: a JVM's JIT). */
  gp.max_tokens = 32;
  size_t warm = 0;
  if (pocket_generate(session, "Once upon a time", &gp, count_piece, &warm, NULL, &err) !=
      POCKET_OK) {
    fprintf(stderr, "capi_stream: %s\n", err.message);
    return 1;
  }
  gp.max_tokens = n_tokens;
  for (int r = 0; r < reps; ++r) {
    pocket_session_reset(session); /* every run evaluates the prompt, as a fresh request */
    size_t bytes = 0;
    pocket_generate_result res;
    const double t0 = now_s();
    if (pocket_generate(session, "Once upon a time", &gp, count_piece, &bytes, &res, &err) !=
        POCKET_OK) {
      fprintf(stderr, "capi_stream: %s\n", err.message);
      return 1;
    }
    const double s = now_s() - t0;
    printf("{\"api\": \"c\", \"tokens\": %d, \"seconds\": %.6f, \"tokens_per_s\": %.3f}\n",
           res.n_generated_tokens, s, res.n_generated_tokens / s);
  }
  pocket_session_free(session);
  pocket_model_free(model);
  return 0;
}
