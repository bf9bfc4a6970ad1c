/* Uses only the installed header <pocket/pocket.h> and libpocket: load a model, tokenize and
 * detokenize, generate with a streaming callback, stop from the callback, cancel from another
 * thread and before a call, seeds, thread counts, report errors, score candidates; with
 * HEAD_MODEL (a .pocket with a classification head), classify; with CHAT_MODEL (a model with the
 * Qwen3 tokenizer, its chat template and a 3-label classification head), chat messages and
 * parse_special in generate, score and classify. Also the version macros against the library,
 * struct_size (an older app's smaller struct gets defaults, a newer app's larger one and a zeroed
 * one are refused), missing files as NotFound and a result reset by every call; a batch of
 * sessions generating together as each does alone.
 * Usage: capi_test MODEL TOKENIZER [HEAD_MODEL [CHAT_MODEL]] */
#define _POSIX_C_SOURCE 200809L
#include <pocket/pocket.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond, ...)                      \
  do {                                        \
    if (!(cond)) {                            \
      fprintf(stderr, "capi_test: FAILED: "); \
      fprintf(stderr, __VA_ARGS__);           \
      fprintf(stderr, "\n");                  \
      exit(1);                                \
    }                                         \
  } while (0)

typedef struct {
  char text[8192];
  size_t len;
  int pieces;
  int stop_after; /* return false after this many pieces (0: never) */
} Collected;

static bool collect(const char* text, size_t len, void* user) {
  Collected* c = (Collected*)user;
  if (c->len + len < sizeof(c->text)) {
    memcpy(c->text + c->len, text, len);
    c->len += len;
    c->text[c->len] = '\0';
  }
  c->pieces++;
  return c->stop_after == 0 || c->pieces < c->stop_after;
}

static Collected* new_collected(void) {
  Collected* c = (Collected*)calloc(1, sizeof(Collected));
  CHECK(c != NULL, "out of memory");
  return c;
}

/* Generates into a fresh Collected (the caller frees it). */
static Collected* run(pocket_session* session, const char* prompt, const pocket_generate_params* gp,
                      pocket_generate_result* r) {
  pocket_error err;
  Collected* c = new_collected();
  pocket_status st = pocket_generate(session, prompt, gp, collect, c, r, &err);
  CHECK(st == POCKET_OK, "generate: %s", err.message);
  return c;
}

static int count_id(const int32_t* ids, size_t n, int32_t id) {
  int count = 0;
  for (size_t i = 0; i < n; ++i) count += ids[i] == id;
  return count;
}

/* ---- cancelling from another thread ---- */
typedef struct {
  pocket_session* session;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool cancel_now; /* set by the generating thread */
  bool cancelled;  /* set by the canceller once pocket_session_cancel returned */
  Collected text;
} CancelState;

static void* canceller(void* arg) {
  CancelState* s = (CancelState*)arg;
  pthread_mutex_lock(&s->mu);
  while (!s->cancel_now) pthread_cond_wait(&s->cv, &s->mu);
  pocket_session_cancel(s->session);
  s->cancelled = true;
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* After the 5th piece: wake the canceller and wait until it has cancelled, so the bound is exact.
 */
static bool collect_then_cancel(const char* text, size_t len, void* user) {
  CancelState* s = (CancelState*)user;
  collect(text, len, &s->text);
  if (s->text.pieces == 5) {
    pthread_mutex_lock(&s->mu);
    s->cancel_now = true;
    pthread_cond_broadcast(&s->cv);
    while (!s->cancelled) pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
  }
  return true;
}

static void test_cancel(pocket_session* session, const char* text) {
  pocket_error err;
  pocket_generate_result r;
  pocket_generate_params gp = pocket_generate_default_params();
  gp.temperature = 0.0f;
  gp.max_tokens = 200;

  /* From another thread while generate runs: it stops before the next token. */
  CancelState* s = (CancelState*)calloc(1, sizeof(CancelState));
  CHECK(s != NULL, "out of memory");
  s->session = session;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, canceller, s) == 0, "pthread_create");
  pocket_status st = pocket_generate(session, text, &gp, collect_then_cancel, s, &r, &err);
  pthread_join(thread, NULL);
  CHECK(st == POCKET_OK, "generate: %s", err.message);
  CHECK(r.stop_reason == POCKET_STOP_CANCELLED, "cancel from a thread: stop reason %d",
        (int)r.stop_reason);
  CHECK(s->text.pieces == 5, "%d pieces after a cancel at the 5th", s->text.pieces);
  printf("cancelled from another thread after %d tokens\n", r.n_generated_tokens);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  free(s);

  /* Just before the call: not lost, the call returns at once; the next call runs normally. */
  pocket_session_reset(session);
  pocket_session_cancel(session);
  Collected* c = run(session, text, &gp, &r);
  CHECK(r.stop_reason == POCKET_STOP_CANCELLED && r.n_generated_tokens == 0 && c->pieces == 0,
        "cancel before generate: stop reason %d, %d tokens", (int)r.stop_reason,
        r.n_generated_tokens);
  free(c);
  gp.max_tokens = 8;
  c = run(session, text, &gp, &r);
  CHECK(r.stop_reason != POCKET_STOP_CANCELLED && r.n_generated_tokens > 0,
        "the call after a cancelled one: stop reason %d, %d tokens", (int)r.stop_reason,
        r.n_generated_tokens);
  free(c);

  /* The same for score. */
  const char* cands[] = {" cat", " dog"};
  pocket_candidate_score scores[2];
  pocket_session_cancel(session);
  st = pocket_score(session, text, NULL, cands, 2, scores, &err);
  CHECK(st == POCKET_ERR_CANCELLED, "cancel before score gave %d", (int)st);
  st = pocket_score(session, text, NULL, cands, 2, scores, &err);
  CHECK(st == POCKET_OK, "the score after a cancelled one: %s", err.message);
}

/* pocket_session_eval: the logits after a prompt's ids pick, greedily, the token a greedy generate
 * starts with; the same ids again give the same logits; bad ids are errors naming them. */
static void test_eval(const pocket_model* model, pocket_session* session, const char* text) {
  pocket_error err;
  int32_t ids[256];
  size_t n_ids = 0;
  pocket_status st = pocket_tokenize(model, text, strlen(text), false, ids, 256, &n_ids, &err);
  CHECK(st == POCKET_OK && n_ids > 0, "tokenize: %s", err.message);
  const float* logits = NULL;
  st = pocket_session_eval(session, ids, n_ids, &logits, &err);
  CHECK(st == POCKET_OK && logits != NULL, "eval: %s", err.message);
  const int32_t vocab = pocket_model_vocab_size(model);
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  float* copy = (float*)malloc((size_t)vocab * sizeof(float));
  CHECK(copy != NULL, "out of memory");
  memcpy(copy, logits, (size_t)vocab * sizeof(float));
  st = pocket_session_eval(session, ids, n_ids, &logits, &err);
  CHECK(st == POCKET_OK && memcmp(copy, logits, (size_t)vocab * sizeof(float)) == 0,
        "the same ids gave other logits");
  free(copy);
  pocket_generate_params gp = pocket_generate_default_params();
  gp.temperature = 0.0f;
  gp.max_tokens = 1;
  Collected* c = run(session, text, &gp, NULL);
  char piece[256];
  size_t n_bytes = 0;
  st = pocket_detokenize(model, &best, 1, piece, sizeof(piece) - 1, &n_bytes, &err);
  CHECK(st == POCKET_OK, "detokenize: %s", err.message);
  piece[n_bytes] = '\0';
  CHECK(strcmp(piece, c->text) == 0, "argmax of eval's logits is '%s', greedy generate gave '%s'",
        piece, c->text);
  free(c);
  int32_t bad[2] = {ids[0], vocab};
  st = pocket_session_eval(session, bad, 2, &logits, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && logits == NULL &&
            strstr(err.message, "token id 1") != NULL,
        "an id outside the vocabulary gave %d: %s", (int)st, err.message);
  printf("expected error: %s\n", err.message);
  st = pocket_session_eval(session, ids, 0, &logits, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "no ids gave %d", (int)st);
  pocket_session_cancel(session);
  st = pocket_session_eval(session, ids, n_ids, &logits, &err);
  CHECK(st == POCKET_OK || st == POCKET_ERR_CANCELLED, "cancelled eval gave %d", (int)st);
  st = pocket_session_eval(session, ids, n_ids, &logits, &err);
  CHECK(st == POCKET_OK, "eval after a cancel: %s", err.message);
}

static void test_seeds(pocket_session* session, const char* text) {
  pocket_generate_params gp = pocket_generate_default_params();
  CHECK(gp.seed == POCKET_SEED_RANDOM, "the default seed is %llu", (unsigned long long)gp.seed);
  gp.temperature = 1.0f;
  gp.max_tokens = 30;
  pocket_generate_result r1, r2, r3;
  /* Random seeds: drawn per call, reported, and the reported one reproduces the run. */
  Collected* a = run(session, text, &gp, &r1);
  Collected* b = run(session, text, &gp, &r2);
  CHECK(r1.seed != POCKET_SEED_RANDOM && r2.seed != POCKET_SEED_RANDOM, "sentinel reported");
  CHECK(r1.seed != r2.seed, "two random seeds are both %llu", (unsigned long long)r1.seed);
  gp.seed = r1.seed;
  Collected* a2 = run(session, text, &gp, &r3);
  CHECK(r3.seed == r1.seed, "reported seed %llu, passed %llu", (unsigned long long)r3.seed,
        (unsigned long long)r1.seed);
  CHECK(strcmp(a->text, a2->text) == 0, "seed %llu did not reproduce '%s': '%s'",
        (unsigned long long)r1.seed, a->text, a2->text);
  /* A fixed seed, twice: the same text, and that seed reported. */
  gp.seed = 42;
  Collected* f1 = run(session, text, &gp, &r1);
  Collected* f2 = run(session, text, &gp, &r2);
  CHECK(r1.seed == 42 && r2.seed == 42, "fixed seed reported as %llu", (unsigned long long)r1.seed);
  CHECK(strcmp(f1->text, f2->text) == 0, "seed 42 gave '%s' and '%s'", f1->text, f2->text);
  printf("seed %llu: %s\n", (unsigned long long)r1.seed, f1->text);
  free(a);
  free(b);
  free(a2);
  free(f1);
  free(f2);
}

static void test_threads(const pocket_model* model) {
  pocket_error err;
  pocket_session_params sp = pocket_session_default_params();
  CHECK(sp.n_threads == 0, "default n_threads %d", sp.n_threads);
  pocket_session* s = NULL;
  CHECK(pocket_session_create(model, &sp, &s, &err) == POCKET_OK, "session: %s", err.message);
  CHECK(pocket_session_n_threads(s) >= 1, "automatic threads: %d", pocket_session_n_threads(s));
  pocket_session_free(s);
  sp.n_threads = 3;
  CHECK(pocket_session_create(model, &sp, &s, &err) == POCKET_OK, "session: %s", err.message);
  CHECK(pocket_session_n_threads(s) == 3, "n_threads 3 gave %d", pocket_session_n_threads(s));
  pocket_session_free(s);
  sp.n_threads = -1;
  pocket_status st = pocket_session_create(model, &sp, &s, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && s == NULL, "n_threads -1 gave %d", (int)st);
}

/* A saved session: loaded into a fresh session, the conversation continues as if never
 * interrupted (the same greedy text, only the new tokens evaluated); the app's user data comes
 * back, a too-small buffer is refused first (the session unchanged), a damaged file is data loss.
 */
/* A batch of three sessions generating together (one with a sampled seed, one cancelled from its
 * callback, one joining late): each request's text is what pocket_generate gives alone. */
static void test_batch(const pocket_model* model) {
  const char* prompts[3] = {"Once upon a time", "The little dog ran to the park and",
                            "Lily had a red ball"};
  pocket_generate_params gp[3];
  Collected* alone[3];
  pocket_session_params sp = pocket_session_default_params();
  sp.n_threads = 2;
  sp.n_ctx = 256;
  sp.n_batch = 32;
  pocket_error err;
  pocket_session* s[3];
  for (int i = 0; i < 3; ++i) {
    pocket_status st = pocket_session_create(model, &sp, &s[i], &err);
    CHECK(st == POCKET_OK, "session: %s", err.message);
    gp[i] = pocket_generate_default_params();
    gp[i].max_tokens = 24 + 8 * i;
    gp[i].temperature = i == 1 ? 0.8f : 0.0f;
    gp[i].seed = 42;
    pocket_generate_result r;
    alone[i] = run(s[i], prompts[i], &gp[i], &r);
    pocket_session_reset(s[i]);
  }
  pocket_batch* batch = NULL;
  pocket_status st = pocket_batch_create(model, 2, 4, 64, &batch, &err);
  CHECK(st == POCKET_OK, "batch: %s", err.message);
  Collected* got[3];
  int64_t ids[3];
  for (int i = 0; i < 2; ++i) {
    got[i] = new_collected();
    st = pocket_batch_submit(batch, s[i], prompts[i], &gp[i], collect, got[i], &ids[i], &err);
    CHECK(st == POCKET_OK, "submit: %s", err.message);
  }
  /* The session is the request's until taken. */
  pocket_generate_result r;
  Collected* busy = new_collected();
  st = pocket_generate(s[0], "x", &gp[0], collect, busy, &r, &err);
  CHECK(st == POCKET_ERR_FAILED_PRECONDITION, "generate on a session in a batch gave %d", (int)st);
  free(busy);
  int64_t again = 0;
  st = pocket_batch_submit(batch, s[0], "x", &gp[0], NULL, NULL, &again, &err);
  CHECK(st == POCKET_ERR_FAILED_PRECONDITION, "a second submit on a busy session gave %d", (int)st);
  st = pocket_batch_take(batch, ids[0], &r, &err);
  CHECK(st == POCKET_ERR_FAILED_PRECONDITION, "take of a running request gave %d", (int)st);
  int32_t active = 0;
  int steps = 0;
  bool third = false;
  do {
    st = pocket_batch_step(batch, &active, &err);
    CHECK(st == POCKET_OK, "step: %s", err.message);
    if (++steps == 3) {
      got[2] = new_collected();
      st = pocket_batch_submit(batch, s[2], prompts[2], &gp[2], collect, got[2], &ids[2], &err);
      CHECK(st == POCKET_OK, "submit: %s", err.message);
      third = true;
      active = 1;
    }
  } while (active > 0);
  CHECK(third, "the third request never joined");
  for (int i = 0; i < 3; ++i) {
    CHECK(pocket_batch_done(batch, ids[i]) == 1, "request %d not done", i);
    st = pocket_batch_take(batch, ids[i], &r, &err);
    CHECK(st == POCKET_OK, "take: %s", err.message);
    CHECK(strcmp(got[i]->text, alone[i]->text) == 0, "batched '%s' != alone '%s'", got[i]->text,
          alone[i]->text);
    CHECK(r.n_generated_tokens == gp[i].max_tokens || r.stop_reason != POCKET_STOP_MAX_TOKENS,
          "tokens %d", r.n_generated_tokens);
  }
  st = pocket_batch_take(batch, ids[0], &r, &err);
  CHECK(st == POCKET_ERR_NOT_FOUND, "take twice gave %d", (int)st);
  /* Speculative decoding is not batched; another thread count is refused. */
  pocket_generate_params spec = gp[0];
  spec.spec = "lookup";
  int64_t id = 0;
  st = pocket_batch_submit(batch, s[0], prompts[0], &spec, NULL, NULL, &id, &err);
  CHECK(st == POCKET_ERR_UNIMPLEMENTED, "spec in a batch gave %d", (int)st);
  pocket_session_params other = sp;
  other.n_threads = 1;
  pocket_session* s1 = NULL;
  st = pocket_session_create(model, &other, &s1, &err);
  CHECK(st == POCKET_OK, "session: %s", err.message);
  st = pocket_batch_submit(batch, s1, prompts[0], &gp[0], NULL, NULL, &id, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "a session on other threads gave %d", (int)st);
  /* A request cancelled from another thread's call (here: before the step) stops. */
  st = pocket_batch_submit(batch, s[0], prompts[0], &gp[0], NULL, NULL, &id, &err);
  CHECK(st == POCKET_OK, "submit: %s", err.message);
  pocket_session_cancel(s[0]);
  do {
    st = pocket_batch_step(batch, &active, &err);
    CHECK(st == POCKET_OK, "step: %s", err.message);
  } while (active > 0);
  st = pocket_batch_take(batch, id, &r, &err);
  CHECK(st == POCKET_OK && r.stop_reason == POCKET_STOP_CANCELLED, "cancelled: %d %d", (int)st,
        (int)r.stop_reason);
  pocket_batch_free(batch);
  pocket_session_free(s1);
  for (int i = 0; i < 3; ++i) {
    pocket_session_free(s[i]);
    free(alone[i]);
    free(got[i]);
  }
  printf("batch: 3 requests in %d steps, each as alone\n", steps);
}

static void test_saved_session(const pocket_model* model) {
  pocket_error err;
  pocket_session_params sp = pocket_session_default_params();
  sp.n_ctx = 256;
  pocket_session *a = NULL, *b = NULL;
  CHECK(pocket_session_create(model, &sp, &a, &err) == POCKET_OK, "session: %s", err.message);
  CHECK(pocket_session_create(model, &sp, &b, &err) == POCKET_OK, "session: %s", err.message);
  pocket_generate_params gp = pocket_generate_default_params();
  gp.temperature = 0.0f;
  gp.max_tokens = 16;
  pocket_generate_result r;
  Collected* first = run(a, "Once upon a time", &gp, &r);
  char path[256];
  const char* tmp = getenv("TMPDIR");
  snprintf(path, sizeof(path), "%s/pocket-capi-%d.session", tmp != NULL ? tmp : "/tmp",
           (int)getpid());
  const char state[] = "turn 1";
  pocket_status st = pocket_session_save(a, path, state, sizeof(state), &err);
  CHECK(st == POCKET_OK, "save: %s", err.message);
  size_t n_state = 0;
  st = pocket_session_load(b, path, NULL, 0, &n_state, &err);
  CHECK(st == POCKET_ERR_BUFFER_TOO_SMALL && n_state == sizeof(state), "size query gave %d, %zu",
        (int)st, n_state);
  char back[16];
  st = pocket_session_load(b, path, back, sizeof(back), &n_state, &err);
  CHECK(st == POCKET_OK && n_state == sizeof(state) && strcmp(back, state) == 0, "load: %s",
        err.message);
  static char next[8300];
  snprintf(next, sizeof(next), "Once upon a time%s. The end", first->text);
  pocket_generate_result ra, rb;
  Collected* ca = run(a, next, &gp, &ra);
  Collected* cb = run(b, next, &gp, &rb);
  CHECK(strcmp(ca->text, cb->text) == 0, "resumed '%s', uninterrupted '%s'", cb->text, ca->text);
  CHECK(rb.n_prompt_tokens == ra.n_prompt_tokens, "resumed evaluated %d prompt tokens, not %d",
        rb.n_prompt_tokens, ra.n_prompt_tokens);
  /* A damaged file: data loss, named. */
  FILE* f = fopen(path, "r+b");
  CHECK(f != NULL, "reopen");
  fseek(f, -8, SEEK_END);
  fputc(0x5a, f);
  fclose(f);
  st = pocket_session_load(b, path, back, sizeof(back), &n_state, &err);
  CHECK(st == POCKET_ERR_DATA_LOSS && strstr(err.message, path) != NULL, "damaged file gave %d: %s",
        (int)st, err.message);
  printf("saved session: resumed '%s'; damaged: %s\n", cb->text, err.message);
  remove(path);
  st = pocket_session_load(b, path, back, sizeof(back), &n_state, &err);
  CHECK(st == POCKET_ERR_NOT_FOUND && strstr(err.message, path) != NULL,
        "a missing session file gave %d: %s", (int)st, err.message);
  free(first);
  free(ca);
  free(cb);
  pocket_session_free(a);
  pocket_session_free(b);
}

static double logprob_of(const pocket_candidate_score* scores, size_t n, size_t index) {
  for (size_t i = 0; i < n; ++i) {
    if (scores[i].index == index) return scores[i].logprob;
  }
  CHECK(false, "no score for candidate %zu", index);
  return 0.0;
}

/* A candidate is scored as the tokens it adds to the prompt's: tokenize(prompt + candidate) after
 * tokenize(prompt), not tokenized on its own (SentencePiece would give it a second space). */
static void test_candidate_rule(pocket_session* session, const pocket_model* model) {
  pocket_error err;
  const char* prompt = "Once upon a time";
  const char* cands[] = {" happy", " sad", " a big dog"};
  pocket_candidate_score scores[3];
  pocket_status st = pocket_score(session, prompt, NULL, cands, 3, scores, &err);
  CHECK(st == POCKET_OK, "score: %s", err.message);
  int32_t ids[128];
  size_t n_prompt = 0, n_joint = 0, n_alone = 0;
  st = pocket_tokenize(model, prompt, strlen(prompt), false, ids, 128, &n_prompt, &err);
  CHECK(st == POCKET_OK, "tokenize: %s", err.message);
  bool rules_differ = false;
  for (size_t i = 0; i < 3; ++i) {
    char joint[128];
    snprintf(joint, sizeof(joint), "%s%s", prompt, cands[scores[i].index]);
    st = pocket_tokenize(model, joint, strlen(joint), false, ids, 128, &n_joint, &err);
    CHECK(st == POCKET_OK, "tokenize: %s", err.message);
    CHECK((size_t)scores[i].n_tokens == n_joint - n_prompt, "'%s' scored as %d tokens, not %zu",
          cands[scores[i].index], scores[i].n_tokens, n_joint - n_prompt);
    const char* alone = cands[scores[i].index];
    st = pocket_tokenize(model, alone, strlen(alone), false, ids, 128, &n_alone, &err);
    CHECK(st == POCKET_OK, "tokenize: %s", err.message);
    rules_differ = rules_differ || n_alone != n_joint - n_prompt;
  }
  CHECK(rules_differ, "this check cannot tell the candidate rules apart");
}

/* Generate with `gp`: an INVALID_ARGUMENT error whose message contains `field` and `what`. */
static void expect_field_error(pocket_session* session, const char* text,
                               const pocket_generate_params* gp, const char* field,
                               const char* what) {
  pocket_error err;
  Collected* c = new_collected();
  pocket_status st = pocket_generate(session, text, gp, collect, c, NULL, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, field) != NULL &&
            strstr(err.message, what) != NULL,
        "%s %s gave %d (%s), output '%s'", field, what, (int)st, err.message, c->text);
  CHECK(c->pieces == 0, "%s %s: generated '%s' before failing", field, what, c->text);
  printf("expected error: %s\n", err.message);
  free(c);
}

/* A constraint that is given (non-NULL) but empty or blank is an error naming the field, never
 * silently no constraint; so are choices missing their array or holding an empty string. */
static void test_empty_constraints(pocket_session* session, const char* text) {
  pocket_generate_params gp = pocket_generate_default_params();
  gp.temperature = 0.0f;
  gp.max_tokens = 4;
  const char* texts[] = {"", " \t\n"};
  const char* whats[] = {"empty", "blank"};
  for (int i = 0; i < 2; ++i) {
    gp.regex = texts[i];
    expect_field_error(session, text, &gp, "regex", whats[i]);
    gp.regex = NULL;
    gp.json_schema = texts[i];
    expect_field_error(session, text, &gp, "json_schema", whats[i]);
    gp.json_schema = NULL;
    gp.grammar = texts[i];
    expect_field_error(session, text, &gp, "grammar", whats[i]);
    gp.grammar = NULL;
    const char* choices[] = {" yes", texts[i]};
    gp.choices = choices;
    gp.n_choices = 2;
    expect_field_error(session, text, &gp, "choices[1]", whats[i]);
    gp.choices = NULL;
    gp.n_choices = 0;
  }
  gp.n_choices = 2;
  expect_field_error(session, text, &gp, "choices", "NULL");
  /* NULL (and n_choices 0) is no constraint. */
  gp.n_choices = 0;
  pocket_generate_result r;
  free(run(session, text, &gp, &r));
  CHECK(r.n_generated_tokens > 0, "unconstrained generate made nothing");
}

/* A model without a chat template cannot take messages, and says so. */
static void test_no_chat_template(const pocket_model* model, pocket_session* session) {
  pocket_error err;
  pocket_chat_message msgs[] = {{"user", "Hello"}};
  int32_t ids[64];
  size_t n = 0;
  pocket_status st = pocket_tokenize_chat(model, msgs, 1, true, false, ids, 64, &n, &err);
  CHECK(st == POCKET_ERR_FAILED_PRECONDITION && strstr(err.message, "chat template") != NULL,
        "tokenize_chat without a template gave %d: %s", (int)st, err.message);
  printf("expected error: %s\n", err.message);
  pocket_generate_params gp = pocket_generate_default_params();
  gp.messages = msgs;
  gp.n_messages = 1;
  st = pocket_generate(session, NULL, &gp, NULL, NULL, NULL, &err);
  CHECK(st == POCKET_ERR_FAILED_PRECONDITION && strstr(err.message, "chat template") != NULL,
        "generate without a template gave %d: %s", (int)st, err.message);
  pocket_score_params sp = pocket_score_default_params();
  sp.messages = msgs;
  sp.n_messages = 1;
  const char* cands[] = {" yes", " no"};
  pocket_candidate_score scores[2];
  st = pocket_score(session, NULL, &sp, cands, 2, scores, &err);
  CHECK(st == POCKET_ERR_FAILED_PRECONDITION && strstr(err.message, "chat template") != NULL,
        "score without a template gave %d: %s", (int)st, err.message);
}

/* The label logits of classify, by label index (n_labels of them); resets the session first, so
 * that every call evaluates its whole input. */
static void classify_logits(pocket_session* session, const char* prompt,
                            const pocket_classify_params* params, double* logits, size_t n_labels) {
  pocket_error err;
  pocket_label_score labels[8];
  size_t n = 0;
  CHECK(n_labels <= 8, "too many labels");
  pocket_session_reset(session);
  pocket_status st = pocket_classify(session, prompt, params, labels, 8, &n, &err);
  CHECK(st == POCKET_OK && n == n_labels, "classify: %s", err.message);
  for (size_t i = 0; i < n; ++i) logits[labels[i].index] = labels[i].logit;
}

static bool same_logits(const double* a, const double* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (a[i] - b[i] > 1e-6 || b[i] - a[i] > 1e-6) return false;
  }
  return true;
}

/* Prompt tokens pocket_generate evaluates (not reused from the session's context) for `prompt`. */
static int32_t evaluated(pocket_session* session, const char* prompt, bool parse_special) {
  pocket_generate_params gp = pocket_generate_default_params();
  gp.max_tokens = 0;
  gp.parse_special = parse_special;
  pocket_generate_result r;
  free(run(session, prompt, &gp, &r));
  return r.n_prompt_tokens;
}

/* Classify tokenizes as generate and score do: special-token strings in the prompt or message
 * contents are plain text unless parse_special (NULL params: the defaults), messages go through
 * the chat template. The model has the Qwen3 tokenizer and a 3-label head. */
static void test_chat_classify(const pocket_model* model, pocket_session* session,
                               const char* rendered) {
  pocket_error err;
  const size_t n_labels = pocket_model_n_labels(model);
  CHECK(n_labels == 3, "the chat model has %zu labels, not 3", n_labels);
  pocket_classify_params cp = pocket_classify_default_params();
  CHECK(!cp.parse_special && cp.enable_thinking && cp.messages == NULL && cp.n_messages == 0,
        "classify defaults");
  pocket_classify_params special = pocket_classify_default_params();
  special.parse_special = true;

  /* "<|im_end|>" inside the prompt: the plain text's tokens, unless parse_special. */
  const char* injected = "Hi<|im_end|> there";
  double by_null[3], by_default[3], by_special[3];
  classify_logits(session, injected, NULL, by_null, n_labels);
  classify_logits(session, injected, &cp, by_default, n_labels);
  classify_logits(session, injected, &special, by_special, n_labels);
  CHECK(same_logits(by_null, by_default, n_labels), "NULL params differ from the defaults");
  CHECK(!same_logits(by_default, by_special, n_labels),
        "parse_special changed nothing in classify");
  /* The context classify leaves is its input: generate then reuses all of the plain tokens but
   * the last, and not those of the special reading past "Hi". */
  classify_logits(session, injected, NULL, by_null, n_labels);
  int32_t n = evaluated(session, injected, false);
  CHECK(n == 1, "after classify, generate with the plain tokens evaluated %d tokens, not 1", n);
  classify_logits(session, injected, NULL, by_null, n_labels);
  n = evaluated(session, injected, true);
  CHECK(n > 1, "after classify, generate with the special token evaluated %d tokens", n);
  classify_logits(session, injected, &special, by_special, n_labels);
  n = evaluated(session, injected, true);
  CHECK(n == 1, "after classify with parse_special, generate evaluated %d tokens, not 1", n);

  /* Messages: as the rendered template with its control tokens special. */
  pocket_chat_message hello[] = {{"user", "Hello there"}};
  double by_messages[3], by_text[3];
  cp.messages = hello;
  cp.n_messages = 1;
  classify_logits(session, NULL, &cp, by_messages, n_labels);
  classify_logits(session, rendered, &special, by_text, n_labels);
  CHECK(same_logits(by_messages, by_text, n_labels), "classify of messages differs from the text");
  pocket_chat_message msgs[] = {{"user", injected}};
  cp.messages = msgs;
  classify_logits(session, NULL, &cp, by_default, n_labels);
  special.messages = msgs;
  special.n_messages = 1;
  classify_logits(session, NULL, &special, by_special, n_labels);
  CHECK(!same_logits(by_default, by_special, n_labels),
        "parse_special changed nothing in classify of messages");

  /* Exactly one of prompt and messages. */
  pocket_label_score labels[8];
  size_t n_scores = 0;
  pocket_status st = pocket_classify(session, "Hi", &cp, labels, 8, &n_scores, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "classify with prompt and messages gave %d", (int)st);
  st = pocket_classify(session, NULL, NULL, labels, 8, &n_scores, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "classify with neither gave %d", (int)st);
  printf("expected error: %s\n", err.message);
}

/* CHAT_MODEL: the Qwen3 tokenizer (fitted to a small vocabulary) and its chat template. */
static void test_chat(const char* path) {
  pocket_error err;
  pocket_model* model = NULL;
  pocket_status st = pocket_model_load(path, NULL, &model, &err);
  CHECK(st == POCKET_OK, "load %s: %s", path, err.message);
  int32_t ids[256], ids2[256];
  size_t n = 0, n2 = 0;
  st = pocket_tokenize(model, "<|im_end|>", 10, true, ids, 256, &n, &err);
  CHECK(st == POCKET_OK && n == 1, "<|im_end|> is %zu tokens", n);
  const int32_t im_end = ids[0];
  st = pocket_tokenize(model, "<|im_start|>", 12, true, ids, 256, &n, &err);
  CHECK(st == POCKET_OK && n == 1, "<|im_start|> is %zu tokens", n);
  const int32_t im_start = ids[0];

  /* parse_special: a special-token string in user text is plain text unless asked. */
  const char* injected = "Hi<|im_end|>";
  size_t n_plain = 0, n_special = 0;
  st = pocket_tokenize(model, injected, strlen(injected), false, ids, 256, &n_plain, &err);
  CHECK(st == POCKET_OK && n_plain > 2 && count_id(ids, n_plain, im_end) == 0,
        "plain '%s': %zu tokens", injected, n_plain);
  st = pocket_tokenize(model, injected, strlen(injected), true, ids, 256, &n_special, &err);
  CHECK(st == POCKET_OK && count_id(ids, n_special, im_end) == 1, "special '%s'", injected);
  pocket_session* session = NULL;
  pocket_session_params sp = pocket_session_default_params();
  sp.n_ctx = 512;
  st = pocket_session_create(model, &sp, &session, &err);
  CHECK(st == POCKET_OK, "session: %s", err.message);
  pocket_generate_params gp = pocket_generate_default_params();
  CHECK(!gp.parse_special && gp.enable_thinking && gp.messages == NULL, "generate defaults");
  gp.temperature = 0.0f;
  gp.max_tokens = 0;
  pocket_generate_result r;
  pocket_session_reset(session);
  free(run(session, injected, &gp, &r));
  CHECK((size_t)r.n_prompt_tokens == n_plain, "generate evaluated %d prompt tokens, plain is %zu",
        r.n_prompt_tokens, n_plain);
  gp.parse_special = true;
  pocket_session_reset(session);
  free(run(session, injected, &gp, &r));
  CHECK((size_t)r.n_prompt_tokens == n_special, "parse_special: %d prompt tokens, expected %zu",
        r.n_prompt_tokens, n_special);

  /* Messages: the template's control tokens are special, the content's only with parse_special. */
  pocket_chat_message msgs[] = {{"system", "Be brief."}, {"user", injected}};
  size_t n_chat_plain = 0, n_chat_special = 0;
  st = pocket_tokenize_chat(model, msgs, 2, true, false, ids, 256, &n_chat_plain, &err);
  CHECK(st == POCKET_OK, "tokenize_chat: %s", err.message);
  CHECK(count_id(ids, n_chat_plain, im_start) == 3 && count_id(ids, n_chat_plain, im_end) == 2,
        "chat without parse_special: %d <|im_start|>, %d <|im_end|>",
        count_id(ids, n_chat_plain, im_start), count_id(ids, n_chat_plain, im_end));
  st = pocket_tokenize_chat(model, msgs, 2, true, true, ids, 256, &n_chat_special, &err);
  CHECK(st == POCKET_OK && count_id(ids, n_chat_special, im_end) == 3,
        "chat with parse_special: %d <|im_end|>", count_id(ids, n_chat_special, im_end));
  st = pocket_tokenize_chat(model, msgs, 2, true, false, ids, 1, &n, &err);
  CHECK(st == POCKET_ERR_BUFFER_TOO_SMALL && n == n_chat_plain, "small chat buffer gave %d",
        (int)st);

  /* The rendering is the model's (Qwen3) template, with and without thinking. */
  pocket_chat_message hello[] = {{"user", "Hello there"}};
  const char* rendered = "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n";
  const char* no_think =
      "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
  st = pocket_tokenize_chat(model, hello, 1, true, false, ids, 256, &n, &err);
  CHECK(st == POCKET_OK, "tokenize_chat: %s", err.message);
  st = pocket_tokenize(model, rendered, strlen(rendered), true, ids2, 256, &n2, &err);
  CHECK(st == POCKET_OK && n == n2 && memcmp(ids, ids2, n * sizeof(int32_t)) == 0,
        "chat tokens differ from the rendered template's");
  st = pocket_tokenize_chat(model, hello, 1, false, false, ids, 256, &n, &err);
  CHECK(st == POCKET_OK, "tokenize_chat: %s", err.message);
  st = pocket_tokenize(model, no_think, strlen(no_think), true, ids2, 256, &n2, &err);
  CHECK(st == POCKET_OK && n == n2 && memcmp(ids, ids2, n * sizeof(int32_t)) == 0,
        "enable_thinking = false: chat tokens differ from the rendered template's");

  /* Generate from messages: exactly those tokens are evaluated. */
  gp = pocket_generate_default_params();
  gp.temperature = 0.0f;
  gp.max_tokens = 8;
  gp.messages = msgs;
  gp.n_messages = 2;
  pocket_session_reset(session);
  Collected* c = run(session, NULL, &gp, &r);
  CHECK((size_t)r.n_prompt_tokens == n_chat_plain, "chat generate evaluated %d tokens, not %zu",
        r.n_prompt_tokens, n_chat_plain);
  printf("chat reply (%d tokens): %s\n", r.n_generated_tokens, c->text);
  free(c);
  gp.parse_special = true;
  pocket_session_reset(session);
  free(run(session, NULL, &gp, &r));
  CHECK((size_t)r.n_prompt_tokens == n_chat_special, "chat parse_special: %d tokens, not %zu",
        r.n_prompt_tokens, n_chat_special);
  /* Exactly one of prompt and messages; roles are checked. */
  st = pocket_generate(session, "Hi", &gp, NULL, NULL, NULL, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "prompt and messages gave %d", (int)st);
  printf("expected error: %s\n", err.message);
  gp.messages = NULL;
  gp.n_messages = 0;
  st = pocket_generate(session, NULL, &gp, NULL, NULL, NULL, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "neither prompt nor messages gave %d", (int)st);
  pocket_chat_message bad_role[] = {{"robot", "beep"}};
  gp.messages = bad_role;
  gp.n_messages = 1;
  st = pocket_generate(session, NULL, &gp, NULL, NULL, NULL, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "robot") != NULL,
        "a bad role gave %d: %s", (int)st, err.message);

  /* Score from messages: the same as the rendered prompt with its control tokens special. */
  const char* cands[] = {" yes", " no", "Maybe"};
  pocket_candidate_score s1[3], s2[3], s3[3];
  pocket_score_params sc = pocket_score_default_params();
  CHECK(!sc.parse_special && sc.enable_thinking && sc.messages == NULL, "score defaults");
  sc.messages = hello;
  sc.n_messages = 1;
  st = pocket_score(session, NULL, &sc, cands, 3, s1, &err);
  CHECK(st == POCKET_OK, "score messages: %s", err.message);
  pocket_score_params special = pocket_score_default_params();
  special.parse_special = true;
  st = pocket_score(session, rendered, &special, cands, 3, s2, &err);
  CHECK(st == POCKET_OK, "score rendered: %s", err.message);
  for (size_t i = 0; i < 3; ++i) {
    const double a = logprob_of(s1, 3, i), b = logprob_of(s2, 3, i);
    CHECK(a - b < 1e-6 && b - a < 1e-6, "candidate %zu: %f from messages, %f from the text", i, a,
          b);
  }
  /* Score a prompt: special-token strings are plain text by default (NULL params). */
  st = pocket_score(session, injected, NULL, cands, 3, s1, &err);
  CHECK(st == POCKET_OK, "score: %s", err.message);
  st = pocket_score(session, injected, &special, cands, 3, s3, &err);
  CHECK(st == POCKET_OK, "score: %s", err.message);
  double diff = logprob_of(s1, 3, 0) - logprob_of(s3, 3, 0);
  CHECK(diff > 1e-6 || diff < -1e-6, "parse_special changed nothing in score");
  /* Candidates too: "<|im_end|>" is its text's tokens, or the special token when asked. */
  const char* end_cands[] = {"<|im_end|>", " yes"};
  st = pocket_score(session, "Hi", NULL, end_cands, 2, s1, &err);
  CHECK(st == POCKET_OK, "score: %s", err.message);
  st = pocket_score(session, "Hi", &special, end_cands, 2, s3, &err);
  CHECK(st == POCKET_OK, "score: %s", err.message);
  for (size_t i = 0; i < 2; ++i) {
    if (s1[i].index == 0) CHECK(s1[i].n_tokens > 1, "plain <|im_end|>: %d tokens", s1[i].n_tokens);
    if (s3[i].index == 0) CHECK(s3[i].n_tokens == 1, "special: %d tokens", s3[i].n_tokens);
  }
  test_chat_classify(model, session, rendered);

  pocket_session_free(session);
  pocket_model_free(model);
}

/* LoRA adapters: loaded once, set per session with scales, switched between calls; the output
 * follows the set (an adapter changes the greedy text, removing it brings the bare text back,
 * the same set twice keeps the context); errors name the problem. */
static void test_adapters(const char* model_path, const char* tokenizer, const char* adapter_dir) {
  pocket_error err;
  pocket_model_params mp = pocket_model_default_params();
  mp.tokenizer_path = tokenizer;
  pocket_model* model = NULL;
  pocket_status st = pocket_model_load(model_path, &mp, &model, &err);
  CHECK(st == POCKET_OK, "load: %s", err.message);
  pocket_adapter* bad = NULL;
  st = pocket_adapter_load(model, "/nonexistent/adapter", &bad, &err);
  CHECK(st == POCKET_ERR_NOT_FOUND && bad == NULL &&
            strstr(err.message, "/nonexistent/adapter") != NULL,
        "missing adapter gave %d: %s", (int)st, err.message);
  pocket_adapter* adapter = NULL;
  st = pocket_adapter_load(model, adapter_dir, &adapter, &err);
  CHECK(st == POCKET_OK, "adapter: %s", err.message);
  CHECK(pocket_adapter_max_rank(adapter) == 4, "rank %d", pocket_adapter_max_rank(adapter));
  CHECK(strcmp(pocket_adapter_targets(adapter), "v,o,gate,up,down") == 0, "targets %s",
        pocket_adapter_targets(adapter));
  CHECK(pocket_adapter_n_labels(adapter) == 0 && pocket_adapter_label(adapter, 0) == NULL,
        "a PEFT adapter carries no classification head");
  CHECK(pocket_adapter_bytes(adapter) > 0 && pocket_adapter_n_matrices(adapter) > 0, "sizes");
  pocket_session* session = NULL;
  pocket_session_params sp = pocket_session_default_params();
  sp.n_ctx = 256;
  st = pocket_session_create(model, &sp, &session, &err);
  CHECK(st == POCKET_OK, "session: %s", err.message);
  pocket_generate_params gp = pocket_generate_default_params();
  gp.temperature = 0.0f;
  gp.max_tokens = 32;
  pocket_generate_result r;
  Collected* bare = run(session, "Once upon a time", &gp, &r);
  const pocket_adapter* set[1] = {adapter};
  const float scale[1] = {1.0f};
  st = pocket_session_set_adapters(session, set, scale, 1, &err);
  CHECK(st == POCKET_OK && pocket_session_n_adapters(session) == 1, "set: %s", err.message);
  Collected* adapted = run(session, "Once upon a time", &gp, &r);
  CHECK(strcmp(bare->text, adapted->text) != 0, "the adapter changed nothing: %s", bare->text);
  st = pocket_session_set_adapters(session, set, NULL, 1, &err); /* the same set: scale 1 */
  CHECK(st == POCKET_OK, "same set: %s", err.message);
  Collected* again = run(session, "Once upon a time", &gp, &r);
  CHECK(strcmp(adapted->text, again->text) == 0, "same set, other text");
  CHECK(r.n_prompt_tokens <= 1, "the same set re-evaluated %d prompt tokens", r.n_prompt_tokens);
  st = pocket_session_set_adapters(session, NULL, NULL, 0, &err);
  CHECK(st == POCKET_OK && pocket_session_n_adapters(session) == 0, "clear: %s", err.message);
  Collected* back = run(session, "Once upon a time", &gp, &r);
  CHECK(strcmp(bare->text, back->text) == 0, "without the adapter: %s vs %s", bare->text,
        back->text);
  const pocket_adapter* none[1] = {NULL};
  st = pocket_session_set_adapters(session, none, NULL, 1, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "adapters[0]") != NULL,
        "NULL adapter gave %d", (int)st);
  printf("adapter: '%s' -> '%s'\n", bare->text, adapted->text);
  free(bare);
  free(adapted);
  free(again);
  free(back);
  pocket_session_free(session);
  pocket_adapter_free(adapter);
  pocket_model_free(model);
}

/* The header's version is the library's: the macros, their string and pocket_version(). */
static void test_version(void) {
  char macros[64];
  snprintf(macros, sizeof(macros), "%d.%d.%d", POCKET_VERSION_MAJOR, POCKET_VERSION_MINOR,
           POCKET_VERSION_PATCH);
  CHECK(strcmp(macros, POCKET_VERSION_STRING) == 0, "macros %s, string %s", macros,
        POCKET_VERSION_STRING);
  CHECK(strcmp(pocket_version(), POCKET_VERSION_STRING) == 0, "library %s, header %s",
        pocket_version(), POCKET_VERSION_STRING);
}

/* struct_size: the defaults set it to the app's sizeof; fields past a smaller struct_size (an app
 * compiled against an older header) are the library's defaults, however wrong the bytes there;
 * a larger one (a newer header than the library) and a zeroed struct are refused, naming it. */
static void test_struct_size(const pocket_model* model, pocket_session* session, const char* text) {
  pocket_error err;
  pocket_generate_params gp = pocket_generate_default_params();
  CHECK(gp.struct_size == sizeof(gp), "struct_size %zu, sizeof %zu", gp.struct_size, sizeof(gp));
  pocket_session_params sp = pocket_session_default_params();
  CHECK(sp.struct_size == sizeof(sp) && sp.n_ctx > 0, "session params");
  CHECK(pocket_model_default_params().struct_size == sizeof(pocket_model_params) &&
            pocket_score_default_params().struct_size == sizeof(pocket_score_params) &&
            pocket_classify_default_params().struct_size == sizeof(pocket_classify_params),
        "struct_size of the defaults");
  /* pocket_X_params_init with a larger struct (a binding's newer one): the known fields get their
   * defaults and the bytes beyond them are zeroed. */
  pocket_generate_params two[2]; /* a struct of twice the size the library knows */
  const unsigned char* bytes = (const unsigned char*)two;
  memset(two, 0xab, sizeof(two));
  pocket_generate_params_init(&two[0], sizeof(two));
  CHECK(two[0].struct_size == sizeof(two) && two[0].max_tokens == gp.max_tokens &&
            two[0].top_p == gp.top_p && two[0].seed == POCKET_SEED_RANDOM,
        "init of a larger struct");
  for (size_t i = sizeof(two[0]); i < sizeof(two); ++i) {
    CHECK(bytes[i] == 0, "init left byte %zu of a larger struct at %d", i, (int)bytes[i]);
  }

  /* Older app: max_tokens and temperature within struct_size, top_p (0: invalid) and spec
   * ("oracle": unknown) past it, so the defaults apply. */
  gp.max_tokens = 3;
  gp.temperature = 0.0f;
  gp.top_p = 0.0f;
  gp.spec = "oracle";
  pocket_generate_result r;
  pocket_status st = pocket_generate(session, text, &gp, NULL, NULL, &r, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "top_p 0 within struct_size gave %d", (int)st);
  gp.struct_size = offsetof(pocket_generate_params, top_k);
  st = pocket_generate(session, text, &gp, NULL, NULL, &r, &err);
  CHECK(st == POCKET_OK, "a struct ending before top_k: %s", err.message);
  CHECK(r.n_generated_tokens >= 1 && r.n_generated_tokens <= 3,
        "max_tokens 3 within struct_size gave %d tokens", r.n_generated_tokens);
  /* A struct_size that cuts a field: that field is not read either. */
  gp.struct_size = offsetof(pocket_generate_params, top_p) + 1;
  st = pocket_generate(session, text, &gp, NULL, NULL, &r, &err);
  CHECK(st == POCKET_OK, "a struct cutting top_p: %s", err.message);
  sp.n_ctx = 64;
  sp.n_threads = -5; /* invalid if read */
  sp.struct_size = offsetof(pocket_session_params, n_threads);
  pocket_session* older = NULL;
  st = pocket_session_create(model, &sp, &older, &err);
  CHECK(st == POCKET_OK && pocket_session_n_threads(older) > 0,
        "a session struct ending before n_threads: %s", err.message);
  pocket_session_free(older);

  /* Newer app, or a zeroed struct: refused, naming struct_size, before anything runs. */
  gp = pocket_generate_default_params();
  gp.struct_size = sizeof(gp) + 8;
  st = pocket_generate(session, text, &gp, NULL, NULL, &r, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "struct_size") != NULL &&
            strstr(err.message, "newer") != NULL,
        "a larger struct_size gave %d: %s", (int)st, err.message);
  printf("expected error: %s\n", err.message);
  memset(&gp, 0, sizeof(gp));
  st = pocket_generate(session, text, &gp, NULL, NULL, &r, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "struct_size") != NULL,
        "a zeroed struct gave %d: %s", (int)st, err.message);
  printf("expected error: %s\n", err.message);
  pocket_session_params zs;
  memset(&zs, 0, sizeof(zs));
  st = pocket_session_create(model, &zs, &older, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && older == NULL && strstr(err.message, "struct_size"),
        "a zeroed session struct gave %d: %s", (int)st, err.message);
  pocket_score_params scp = pocket_score_default_params();
  scp.struct_size = sizeof(scp) + 8;
  const char* cands[] = {" a", " b"};
  pocket_candidate_score scores[2];
  st = pocket_score(session, text, &scp, cands, 2, scores, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "pocket_score_params"),
        "a larger score struct_size gave %d: %s", (int)st, err.message);
  pocket_classify_params clp = pocket_classify_default_params();
  clp.struct_size = 0;
  pocket_label_score labels[4];
  size_t n_labels = 0;
  st = pocket_classify(session, text, &clp, labels, 4, &n_labels, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "pocket_classify_params"),
        "classify with a zeroed struct_size gave %d: %s", (int)st, err.message);
}

/* Every pocket_generate starts by zeroing its result: after an error none of the previous call's
 * figures remain. */
static void test_result_reset(pocket_session* session, const char* text) {
  pocket_error err;
  pocket_generate_params gp = pocket_generate_default_params();
  gp.temperature = 0.0f;
  gp.max_tokens = 8;
  gp.seed = 7;
  pocket_generate_result r;
  pocket_status st = pocket_generate(session, text, &gp, NULL, NULL, &r, &err);
  CHECK(st == POCKET_OK && r.n_generated_tokens > 0 && r.seed == 7, "generate: %s", err.message);
  gp.top_p = 0.0f; /* invalid */
  st = pocket_generate(session, text, &gp, NULL, NULL, &r, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "top_p 0 gave %d", (int)st);
  CHECK(r.n_generated_tokens == 0 && r.n_prompt_tokens == 0 && r.seed == 0 && r.prefill_ms == 0.0 &&
            r.decode_ms == 0.0 && r.stop_reason == 0,
        "after an error the result holds %d tokens, seed %llu, %.3f ms", r.n_generated_tokens,
        (unsigned long long)r.seed, r.decode_ms);
  gp.top_p = 1.0f;
  st = pocket_generate(session, text, &gp, NULL, NULL, &r, &err);
  CHECK(st == POCKET_OK && r.n_generated_tokens > 0, "generate: %s", err.message);
  st = pocket_generate(NULL, text, &gp, NULL, NULL, &r, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && r.n_generated_tokens == 0 && r.seed == 0,
        "a NULL session left %d tokens in the result", r.n_generated_tokens);
}

int main(int argc, char** argv) {
  CHECK(argc >= 3 && argc <= 5, "usage: capi_test MODEL TOKENIZER [HEAD_MODEL [CHAT_MODEL]]");
  pocket_error err;
  printf("pocket %s\n", pocket_version());
  test_version();

  /* Errors are values with messages; a file that does not exist is NotFound, naming it. */
  pocket_model* bad = NULL;
  pocket_status st = pocket_model_load("/nonexistent/model.gguf", NULL, &bad, &err);
  CHECK(st == POCKET_ERR_NOT_FOUND && bad == NULL, "missing file gave %d", (int)st);
  CHECK(strstr(err.message, "/nonexistent/model.gguf") != NULL, "message: %s", err.message);
  CHECK(strcmp(pocket_status_name(st), "NotFound") == 0, "name %s", pocket_status_name(st));
  printf("expected error: %s: %s\n", pocket_status_name(st), err.message);

  pocket_model_params mp = pocket_model_default_params();
  mp.tokenizer_path = "/nonexistent/tok512.bin";
  st = pocket_model_load(argv[1], &mp, &bad, &err);
  CHECK(st == POCKET_ERR_NOT_FOUND && bad == NULL && strstr(err.message, "/nonexistent/tok512.bin"),
        "missing tokenizer gave %d: %s", (int)st, err.message);
  mp.tokenizer_path = argv[2];
  pocket_model* model = NULL;
  st = pocket_model_load(argv[1], &mp, &model, &err);
  CHECK(st == POCKET_OK, "load: %s", err.message);
  CHECK(pocket_model_vocab_size(model) > 0, "vocab size");

  /* The kernel table: the one POCKET_KERNELS names when the suite runs under it; a name this CPU
   * cannot run fails the load naming the variable (no silent fall back to another table). */
  const char* kernels = pocket_model_kernels(model);
  CHECK(kernels != NULL && kernels[0] != '\0', "no kernel table");
  printf("kernel table: %s\n", kernels);
  const char* env_kernels = getenv("POCKET_KERNELS");
  char saved_kernels[64] = "";
  if (env_kernels != NULL && env_kernels[0] != '\0') {
    CHECK(strcmp(kernels, env_kernels) == 0, "POCKET_KERNELS=%s but the model runs %s", env_kernels,
          kernels);
    snprintf(saved_kernels, sizeof(saved_kernels), "%s", env_kernels);
  }
  CHECK(pocket_model_kernels(NULL) == NULL, "kernels of NULL");
  CHECK(setenv("POCKET_KERNELS", "no-such-isa", 1) == 0, "setenv");
  st = pocket_model_load(argv[1], &mp, &bad, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && bad == NULL, "POCKET_KERNELS=no-such-isa gave %d",
        (int)st);
  CHECK(strstr(err.message, "POCKET_KERNELS") != NULL, "message: %s", err.message);
  printf("expected error: %s: %s\n", pocket_status_name(st), err.message);
  CHECK(setenv("POCKET_KERNELS", "reference", 1) == 0, "setenv");
  st = pocket_model_load(argv[1], &mp, &bad, &err);
  CHECK(st == POCKET_OK && strcmp(pocket_model_kernels(bad), "reference") == 0,
        "POCKET_KERNELS=reference: %s", st == POCKET_OK ? pocket_model_kernels(bad) : err.message);
  pocket_model_free(bad);
  bad = NULL;
  if (saved_kernels[0] != '\0') {
    CHECK(setenv("POCKET_KERNELS", saved_kernels, 1) == 0, "setenv");
  } else {
    CHECK(unsetenv("POCKET_KERNELS") == 0, "unsetenv");
  }

  const char* text = "Once upon a time";
  int32_t ids[64];
  size_t n_ids = 0;
  st = pocket_tokenize(model, text, strlen(text), true, ids, 64, &n_ids, &err);
  CHECK(st == POCKET_OK && n_ids > 0, "tokenize: %s", err.message);
  size_t needed = 0;
  st = pocket_tokenize(model, text, strlen(text), true, ids, 1, &needed, &err);
  CHECK(st == POCKET_ERR_BUFFER_TOO_SMALL && needed == n_ids, "small buffer gave %d", (int)st);
  char back[256];
  size_t n_bytes = 0;
  st = pocket_detokenize(model, ids, n_ids, back, sizeof(back), &n_bytes, &err);
  CHECK(st == POCKET_OK, "detokenize: %s", err.message);
  back[n_bytes] = '\0';
  CHECK(strstr(back, "Once upon a time") != NULL, "round trip gave '%s'", back);
  st = pocket_tokenize(model, "a\xff", 2, true, ids, 64, &n_ids, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "invalid UTF-8 gave %d", (int)st);

  pocket_session* session = NULL;
  pocket_session_params sp = pocket_session_default_params();
  sp.n_ctx = 256;
  st = pocket_session_create(model, &sp, &session, &err);
  CHECK(st == POCKET_OK, "session: %s", err.message);

  pocket_generate_params gp = pocket_generate_default_params();
  gp.temperature = 0.0f;
  gp.max_tokens = 40;
  Collected c;
  memset(&c, 0, sizeof(c));
  pocket_generate_result r;
  st = pocket_generate(session, text, &gp, collect, &c, &r, &err);
  CHECK(st == POCKET_OK, "generate: %s", err.message);
  CHECK(r.n_generated_tokens > 0 && c.len > 0, "no text generated");
  printf("generated %d tokens: %s\n", r.n_generated_tokens, c.text);

  /* The callback can stop generation. */
  Collected c2;
  memset(&c2, 0, sizeof(c2));
  c2.stop_after = 3;
  st = pocket_generate(session, text, &gp, collect, &c2, &r, &err);
  CHECK(st == POCKET_OK && r.stop_reason == POCKET_STOP_CALLBACK, "callback stop: %d",
        (int)r.stop_reason);
  CHECK(strncmp(c.text, c2.text, c2.len) == 0, "greedy output differs between calls");

  /* Stop strings. */
  const char* stops[] = {"."};
  gp.stop_strings = stops;
  gp.n_stop_strings = 1;
  Collected c3;
  memset(&c3, 0, sizeof(c3));
  st = pocket_generate(session, text, &gp, collect, &c3, &r, &err);
  CHECK(st == POCKET_OK, "generate with stop: %s", err.message);
  CHECK(strchr(c3.text, '.') == NULL, "stop string leaked: %s", c3.text);

  /* Speculative decoding: the same greedy text, and the acceptance reported. */
  {
    pocket_generate_params sgp = pocket_generate_default_params();
    sgp.temperature = 0.0f;
    sgp.max_tokens = 40;
    sgp.spec = "lookup";
    sgp.draft_max = 4;
    const char* story = "Lily and Tom went to the park. Lily and Tom";
    pocket_generate_result plain_r, spec_r;
    pocket_generate_params pgp = sgp;
    pgp.spec = NULL;
    Collected* plain = run(session, story, &pgp, &plain_r);
    Collected* spec = run(session, story, &sgp, &spec_r);
    CHECK(strcmp(plain->text, spec->text) == 0, "spec lookup changed the text:\n%s\n%s",
          plain->text, spec->text);
    CHECK(plain_r.n_verify_passes == 0 && spec_r.n_verify_passes > 0,
          "verification passes: %d plain, %d spec", plain_r.n_verify_passes,
          spec_r.n_verify_passes);
    CHECK(spec_r.n_accepted_draft_tokens <= spec_r.n_drafted_tokens &&
              spec_r.n_drafted_tokens <= spec_r.n_verify_passes * sgp.draft_max,
          "acceptance %d of %d in %d passes", spec_r.n_accepted_draft_tokens,
          spec_r.n_drafted_tokens, spec_r.n_verify_passes);
    printf("spec lookup: %d passes, %d of %d drafted tokens accepted\n", spec_r.n_verify_passes,
           spec_r.n_accepted_draft_tokens, spec_r.n_drafted_tokens);
    free(spec);
    /* A draft tree of up to 4 branches: the same text again. */
    sgp.draft_branches = 4;
    sgp.draft_max = 8;
    spec = run(session, story, &sgp, &spec_r);
    CHECK(strcmp(plain->text, spec->text) == 0, "spec lookup with a tree changed the text:\n%s\n%s",
          plain->text, spec->text);
    CHECK(spec_r.n_tree_passes <= spec_r.n_verify_passes, "tree passes %d of %d",
          spec_r.n_tree_passes, spec_r.n_verify_passes);
    printf("spec lookup tree: %d passes (%d over trees), %d of %d drafted tokens accepted\n",
           spec_r.n_verify_passes, spec_r.n_tree_passes, spec_r.n_accepted_draft_tokens,
           spec_r.n_drafted_tokens);
    free(plain);
    free(spec);
    sgp.draft_branches = 9;
    st = pocket_generate(session, story, &sgp, NULL, NULL, NULL, &err);
    CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "branches") != NULL,
          "draft_branches 9 gave %d: %s", (int)st, err.message);
    sgp.draft_branches = 1;
    sgp.draft_max = 4;
    sgp.spec = "oracle";
    st = pocket_generate(session, story, &sgp, NULL, NULL, NULL, &err);
    CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "oracle") != NULL,
          "unknown spec gave %d: %s", (int)st, err.message);
    sgp.spec = "lookup";
    sgp.draft_max = 0;
    st = pocket_generate(session, story, &sgp, NULL, NULL, NULL, &err);
    CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "draft-max") != NULL,
          "draft_max 0 gave %d: %s", (int)st, err.message);
  }

  /* Bad parameters are errors, not crashes. */
  gp.top_p = 0.0f;
  st = pocket_generate(session, text, &gp, NULL, NULL, NULL, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "top_p 0 gave %d", (int)st);
  printf("expected error: %s\n", err.message);
  st = pocket_generate(NULL, text, NULL, NULL, NULL, NULL, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT, "NULL session");

  /* Constrained to a choice: the output is one of them, whatever the sampling. */
  gp = pocket_generate_default_params();
  gp.temperature = 1.0f;
  gp.max_tokens = 32;
  const char* choices[] = {" happy", " sad", " a big dog"};
  gp.choices = choices;
  gp.n_choices = 3;
  for (int seed = 0; seed < 20; ++seed) {
    Collected cc;
    memset(&cc, 0, sizeof(cc));
    gp.seed = (uint64_t)seed;
    st = pocket_generate(session, text, &gp, collect, &cc, &r, &err);
    CHECK(st == POCKET_OK, "constrained generate: %s", err.message);
    CHECK(strcmp(cc.text, choices[0]) == 0 || strcmp(cc.text, choices[1]) == 0 ||
              strcmp(cc.text, choices[2]) == 0,
          "constrained output '%s' is not a choice", cc.text);
  }
  gp.max_tokens = 1;
  gp.choices = choices + 2;
  gp.n_choices = 1;
  st = pocket_generate(session, text, &gp, NULL, NULL, NULL, &err);
  CHECK(st == POCKET_ERR_RESOURCE_EXHAUSTED, "a budget that cuts a choice gave %d", (int)st);

  /* A JSON Schema with a span field: the output is such an object, its "who" copied from the
   * source; the constraint's cost is reported. */
  gp = pocket_generate_default_params();
  gp.temperature = 1.0f;
  gp.max_tokens = 64;
  gp.json_schema =
      "{\"type\":\"object\",\"properties\":{\"who\":{\"type\":\"string\","
      "\"x-pocket-span\":true},\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9}},"
      "\"required\":[\"who\",\"n\"],\"additionalProperties\":false}";
  gp.span_source = "Tim and Lily";
  for (int seed = 0; seed < 5; ++seed) {
    Collected cc;
    memset(&cc, 0, sizeof(cc));
    gp.seed = (uint64_t)seed;
    st = pocket_generate(session, text, &gp, collect, &cc, &r, &err);
    if (st == POCKET_ERR_RESOURCE_EXHAUSTED) continue; /* the budget ran out: reported, fine */
    CHECK(st == POCKET_OK, "schema-constrained generate: %s", err.message);
    CHECK(
        cc.text[0] == '{' && strstr(cc.text, "\"who\"") != NULL && strstr(cc.text, "\"n\"") != NULL,
        "schema output '%s'", cc.text);
    CHECK(r.constraint_ms >= 0.0 && r.constraint_ms <= r.decode_ms, "constraint_ms %f",
          r.constraint_ms);
  }
  gp.json_schema = "{\"type\":\"object\",\"not\":{}}";
  st = pocket_generate(session, text, &gp, NULL, NULL, NULL, &err);
  CHECK(st == POCKET_ERR_INVALID_ARGUMENT && strstr(err.message, "\"not\"") != NULL,
        "an unsupported keyword gave %d: %s", (int)st, err.message);
  printf("expected error: %s\n", err.message);
  gp.json_schema = NULL;
  gp.grammar = "root ::= \" \" [a-z]+ \".\"";
  gp.span_source = NULL;
  st = pocket_generate(session, text, &gp, NULL, NULL, &r, &err);
  CHECK(st == POCKET_OK || st == POCKET_ERR_RESOURCE_EXHAUSTED, "grammar: %s", err.message);

  /* Candidates scored in one pass, best first, probabilities summing to one. */
  pocket_candidate_score scores[3];
  st = pocket_score(session, text, NULL, choices, 3, scores, &err);
  CHECK(st == POCKET_OK, "score: %s", err.message);
  CHECK(scores[0].logprob >= scores[1].logprob && scores[1].logprob >= scores[2].logprob,
        "scores not ranked");
  double total = scores[0].probability + scores[1].probability + scores[2].probability;
  CHECK(total > 0.999 && total < 1.001, "probabilities sum to %f", total);
  printf("best candidate: '%s' (logprob %.3f)\n", choices[scores[0].index], scores[0].logprob);

  /* No classification head: no labels, and classify says so. */
  CHECK(pocket_model_n_labels(model) == 0, "labels on a model without a head");
  CHECK(pocket_model_label(model, 0) == NULL, "a label on a model without a head");
  pocket_label_score labels[8];
  size_t n_labels = 99;
  st = pocket_classify(session, text, NULL, labels, 8, &n_labels, &err);
  CHECK(st == POCKET_ERR_FAILED_PRECONDITION && n_labels == 0, "classify without a head gave %d",
        (int)st);
  printf("expected error: %s\n", err.message);

  test_empty_constraints(session, text);
  test_struct_size(model, session, text);
  test_result_reset(session, text);
  test_candidate_rule(session, model);
  test_no_chat_template(model, session);
  test_cancel(session, text);
  test_seeds(session, text);
  test_eval(model, session, text);
  test_threads(model);
  test_saved_session(model);
  test_batch(model);

  pocket_session_cancel(session);
  pocket_session_free(session);
  pocket_model_free(model);

  if (argc >= 4) {
    /* A head [3, hidden]: its labels from one forward pass of the prompt, best first. */
    pocket_model* head_model = NULL;
    st = pocket_model_load(argv[3], NULL, &head_model, &err);
    CHECK(st == POCKET_OK, "load %s: %s", argv[3], err.message);
    CHECK(pocket_model_n_labels(head_model) == 3, "labels: %zu", pocket_model_n_labels(head_model));
    CHECK(strcmp(pocket_model_label(head_model, 1), "sad") == 0, "label 1");
    pocket_session* hs = NULL;
    st = pocket_session_create(head_model, NULL, &hs, &err);
    CHECK(st == POCKET_OK, "session: %s", err.message);
    st = pocket_classify(hs, text, NULL, labels, 2, &n_labels, &err);
    CHECK(st == POCKET_ERR_BUFFER_TOO_SMALL && n_labels == 3, "capacity 2 gave %d", (int)st);
    st = pocket_classify(hs, text, NULL, labels, 8, &n_labels, &err);
    CHECK(st == POCKET_OK && n_labels == 3, "classify: %s", err.message);
    double sum = 0.0;
    for (size_t i = 0; i < n_labels; ++i) {
      CHECK(labels[i].label == pocket_model_label(head_model, labels[i].index), "label pointer");
      CHECK(i == 0 || labels[i - 1].logit >= labels[i].logit, "labels not ranked");
      sum += labels[i].probability;
    }
    CHECK(sum > 0.999999 && sum < 1.000001, "label probabilities sum to %f", sum);
    printf("best label: '%s' (p %.3f)\n", labels[0].label, labels[0].probability);
    pocket_session_free(hs);
    pocket_model_free(head_model);
  }
  if (argc == 5) test_chat(argv[4]);
  const char* adapter_dir = getenv("POCKET_CAPI_ADAPTER");
  if (adapter_dir != NULL && adapter_dir[0] != '\0') test_adapters(argv[1], argv[2], adapter_dir);
  printf("capi_test: OK\n");
  return 0;
}
