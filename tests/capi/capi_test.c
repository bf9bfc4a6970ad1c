/* Uses only the installed header <pocket/pocket.h> and libpocket: load a model, tokenize and
 * detokenize, generate with a streaming callback, cancel from the callback, report errors, score
 * candidates; with HEAD_MODEL (a .pocket with a classification head), classify.
 * Usage: capi_test MODEL TOKENIZER [HEAD_MODEL] */
#include <pocket/pocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char** argv) {
  CHECK(argc == 3 || argc == 4, "usage: capi_test MODEL TOKENIZER [HEAD_MODEL]");
  pocket_error err;
  printf("pocket %s\n", pocket_version());

  /* Errors are values with messages. */
  pocket_model* bad = NULL;
  pocket_status st = pocket_model_load("/nonexistent/model.gguf", NULL, &bad, &err);
  CHECK(st == POCKET_ERR_IO && bad == NULL, "missing file gave %d", (int)st);
  CHECK(strstr(err.message, "/nonexistent/model.gguf") != NULL, "message: %s", err.message);
  printf("expected error: %s: %s\n", pocket_status_name(st), err.message);

  pocket_model_params mp = pocket_model_default_params();
  mp.tokenizer_path = argv[2];
  pocket_model* model = NULL;
  st = pocket_model_load(argv[1], &mp, &model, &err);
  CHECK(st == POCKET_OK, "load: %s", err.message);
  CHECK(pocket_model_vocab_size(model) > 0, "vocab size");

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
  st = pocket_score(session, text, choices, 3, scores, &err);
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
  st = pocket_classify(session, text, labels, 8, &n_labels, &err);
  CHECK(st == POCKET_ERR_FAILED_PRECONDITION && n_labels == 0, "classify without a head gave %d",
        (int)st);
  printf("expected error: %s\n", err.message);

  pocket_session_cancel(session);
  pocket_session_free(session);
  pocket_model_free(model);

  if (argc == 4) {
    /* A head [3, hidden]: its labels from one forward pass of the prompt, best first. */
    pocket_model* head_model = NULL;
    st = pocket_model_load(argv[3], NULL, &head_model, &err);
    CHECK(st == POCKET_OK, "load %s: %s", argv[3], err.message);
    CHECK(pocket_model_n_labels(head_model) == 3, "labels: %zu", pocket_model_n_labels(head_model));
    CHECK(strcmp(pocket_model_label(head_model, 1), "sad") == 0, "label 1");
    pocket_session* hs = NULL;
    st = pocket_session_create(head_model, NULL, &hs, &err);
    CHECK(st == POCKET_OK, "session: %s", err.message);
    st = pocket_classify(hs, text, labels, 2, &n_labels, &err);
    CHECK(st == POCKET_ERR_BUFFER_TOO_SMALL && n_labels == 3, "capacity 2 gave %d", (int)st);
    st = pocket_classify(hs, text, labels, 8, &n_labels, &err);
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
  printf("capi_test: OK\n");
  return 0;
}
