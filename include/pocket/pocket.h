/* pocket: a small-language-model runtime for mobile apps. C API.
 *
 * Handles are opaque. Every fallible call returns a pocket_status and, when `err` is not NULL,
 * fills it with the code and a message a user can act on. No exceptions cross this boundary and
 * nothing here uses global state: a pocket_model may be shared by any number of sessions on any
 * threads; a pocket_session is used by one thread at a time, except pocket_session_cancel.
 *
 * Lifetimes. Free a model after all of its sessions (pocket_session_free, then
 * pocket_model_free). Strings the library returns are owned by it: pocket_version and
 * pocket_status_name return static strings; label names (pocket_model_label,
 * pocket_label_score.label) live as long as their model. The text passed to a pocket_text_callback
 * is valid only during that call. Everything the caller passes in (prompts, messages, params and
 * the arrays they point to) is read during the call only and may be freed when it returns.
 * A NULL params pointer means the defaults (the matching *_default_params()); start from those
 * functions rather than zeroed structs, since zero is not every field's default.
 *
 * Versions and compatibility. POCKET_VERSION_MAJOR, _MINOR, _PATCH and POCKET_VERSION_STRING
 * (pocket/pocket_version.h) are the version of the header the app is compiled with,
 * pocket_version() that of the library it runs with. A release that breaks binary compatibility
 * changes the libraries' SONAME (the ABI version: libpocket.so.0.MINOR before 1.0, then
 * libpocket.so.MAJOR), so an app is never loaded with a library it does not fit. Within one ABI
 * version a parameter struct may gain fields at its end: each starts with struct_size, which
 * *_default_params() (inline here, so compiled into the app) sets to the size of the app's struct.
 * The library reads the fields that lie within struct_size and uses its defaults for the others,
 * so an app compiled against an older header keeps working; a struct_size larger than the
 * library's struct (an app compiled against a newer header) or smaller than the struct_size field
 * (a zeroed struct) is POCKET_ERR_INVALID_ARGUMENT naming struct_size. Without the inline
 * functions (a binding that cannot call them), call pocket_X_params_init(&params, sizeof params):
 * the library's defaults for the fields it knows, zeros for the others, struct_size set.
 * The other structs (results, scores, messages, pocket_error) change only with the ABI version.
 *
 * Files. A path that does not exist (a model, a tokenizer, an adapter, a saved session) is
 * POCKET_ERR_NOT_FOUND naming it; one that exists but cannot be read is POCKET_ERR_IO.
 *
 * Special tokens. Text from the caller (prompts, message contents, candidates) is tokenized with
 * special-token strings such as "<|im_end|>" read as plain text unless parse_special is true, so
 * user input cannot inject control tokens. A chat template's own control tokens are always
 * special. (pocket_tokenize takes parse_special as an argument, without a default.) */
#ifndef POCKET_POCKET_H_
#define POCKET_POCKET_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pocket/pocket_version.h"

#ifdef __cplusplus
extern "C" {
#endif

/* On Windows, users import the DLL's symbols; the library's build defines POCKET_BUILDING_LIBRARY
 * to export them. Define POCKET_STATIC when linking a static build. */
#if defined(POCKET_STATIC)
#define POCKET_API
#elif defined(_WIN32)
#if defined(POCKET_BUILDING_LIBRARY)
#define POCKET_API __declspec(dllexport)
#else
#define POCKET_API __declspec(dllimport)
#endif
#else
#define POCKET_API __attribute__((visibility("default")))
#endif

/* The *_default_params() functions: compiled into the app, so that struct_size is its own. */
#if defined(__cplusplus) || (defined(__STDC_VERSION__) && __STDC_VERSION__ >= 199901L)
#define POCKET_INLINE static inline
#else
#define POCKET_INLINE static __inline
#endif

typedef enum pocket_status {
  POCKET_OK = 0,
  POCKET_ERR_INVALID_ARGUMENT = 1,
  POCKET_ERR_NOT_FOUND = 2,     /* e.g. a model file that does not exist */
  POCKET_ERR_DATA_LOSS = 3,     /* corrupt or truncated file */
  POCKET_ERR_UNIMPLEMENTED = 4, /* valid input pocket does not support */
  POCKET_ERR_OUT_OF_RANGE = 5,  /* e.g. a prompt longer than the context */
  POCKET_ERR_RESOURCE_EXHAUSTED = 6,
  POCKET_ERR_CANCELLED = 7,
  POCKET_ERR_FAILED_PRECONDITION = 8,
  POCKET_ERR_IO = 9, /* the operating system refused (a file that exists but cannot be read) */
  POCKET_ERR_INTERNAL = 10,
  POCKET_ERR_BUFFER_TOO_SMALL = 11 /* the *_needed output says how much is needed */
} pocket_status;

typedef struct pocket_error {
  pocket_status code;
  char message[1024];
} pocket_error;

typedef struct pocket_model pocket_model;
typedef struct pocket_session pocket_session;

/* One turn of a conversation, formatted with the model's chat template (its Jinja source in the
 * model; the ChatML family of Qwen2, Qwen2.5 and Qwen3 is supported, others are an error). */
typedef struct pocket_chat_message {
  const char* role;    /* "system", "user" or "assistant" */
  const char* content; /* UTF-8, NUL-terminated */
} pocket_chat_message;

/* The library's version, "MAJOR.MINOR.PATCH" (the header's is POCKET_VERSION_STRING). */
POCKET_API const char* pocket_version(void);
POCKET_API const char* pocket_status_name(pocket_status status);

/* ---- model ---- */
typedef struct pocket_model_params {
  size_t struct_size;         /* set by pocket_model_default_params() */
  const char* tokenizer_path; /* NULL: the model's own tokenizer */
} pocket_model_params;

POCKET_API void pocket_model_params_init(pocket_model_params* params, size_t struct_size);
POCKET_INLINE pocket_model_params pocket_model_default_params(void) {
  pocket_model_params params;
  pocket_model_params_init(&params, sizeof(params));
  return params;
}
/* path: a .pocket file (pocket's own format, made by `pocket convert`: weights, tokenizer, chat
 * template and an optional classification head in one memory-mappable file), a GGUF file, a
 * Hugging Face directory (config.json, *.safetensors, tokenizer.json) or a llama2.c checkpoint
 * (which has no tokenizer inside: pass tokenizer_path). */
POCKET_API pocket_status pocket_model_load(const char* path, const pocket_model_params* params,
                                           pocket_model** out_model, pocket_error* err);
POCKET_API void pocket_model_free(pocket_model* model);
POCKET_API int32_t pocket_model_vocab_size(const pocket_model* model);
POCKET_API int32_t pocket_model_context_length(const pocket_model* model);
/* The kernel table the model runs on ("avx512", "avx2", "reference", "neon", ...): the best one
 * the CPU offers, or the one the environment variable POCKET_KERNELS names (as the CLI's
 * --kernels; a name the CPU cannot run makes pocket_model_load fail with
 * POCKET_ERR_INVALID_ARGUMENT). A static string; NULL for a NULL model. */
POCKET_API const char* pocket_model_kernels(const pocket_model* model);

/* ---- tokens ---- */
/* Writes up to `capacity` ids; *n_ids receives the number the text needs (if it exceeds
 * capacity the call returns POCKET_ERR_BUFFER_TOO_SMALL and writes nothing). Special-token strings
 * in the text are recognised when parse_special is true. Invalid UTF-8 is an error. */
POCKET_API pocket_status pocket_tokenize(const pocket_model* model, const char* text,
                                         size_t text_len, bool parse_special, int32_t* ids,
                                         size_t capacity, size_t* n_ids, pocket_error* err);
/* The tokens pocket_generate and pocket_score evaluate for a conversation: the messages formatted
 * with the model's chat template (generation prompt appended; BOS first when the tokenizer adds
 * one), special-token strings in their content recognised only when parse_special is true.
 * Buffer rules as pocket_tokenize; a model without a chat template gives
 * POCKET_ERR_FAILED_PRECONDITION. */
POCKET_API pocket_status pocket_tokenize_chat(const pocket_model* model,
                                              const pocket_chat_message* messages,
                                              size_t n_messages, bool enable_thinking,
                                              bool parse_special, int32_t* ids, size_t capacity,
                                              size_t* n_ids, pocket_error* err);
/* Writes the bytes of the ids (not NUL-terminated); *n_bytes receives the size needed. */
POCKET_API pocket_status pocket_detokenize(const pocket_model* model, const int32_t* ids,
                                           size_t n_ids, char* text, size_t capacity,
                                           size_t* n_bytes, pocket_error* err);

/* ---- sessions ---- */
typedef struct pocket_session_params {
  size_t struct_size; /* set by pocket_session_default_params() */
  int32_t n_ctx;      /* context tokens (default 4096, clamped to the model's) */
  int32_t n_batch;    /* prefill chunk (default 512) */
  int32_t n_threads;  /* compute threads of this session: 0 = one per hardware thread (default) */
} pocket_session_params;

POCKET_API void pocket_session_params_init(pocket_session_params* params, size_t struct_size);
POCKET_INLINE pocket_session_params pocket_session_default_params(void) {
  pocket_session_params params;
  pocket_session_params_init(&params, sizeof(params));
  return params;
}
POCKET_API pocket_status pocket_session_create(const pocket_model* model,
                                               const pocket_session_params* params,
                                               pocket_session** out_session, pocket_error* err);
POCKET_API void pocket_session_free(pocket_session* session);
/* The session's compute threads (n_threads resolved: never 0). */
POCKET_API int32_t pocket_session_n_threads(const pocket_session* session);
/* Thread-safe (any thread may call it while another uses the session). One call stops one
 * pocket_generate, pocket_score or pocket_classify: the one running now (generate within one
 * token or one prefill chunk, with stop reason POCKET_STOP_CANCELLED; score and classify between
 * prefill chunks, with POCKET_ERR_CANCELLED), or, when none is running, the next one to start,
 * which then returns at once. A request is never lost to a race with the call's start, and it is
 * used up by the call it stops: the call after that runs normally. */
POCKET_API void pocket_session_cancel(pocket_session* session);
/* Makes the session's context the token ids (the longest common prefix with what it holds is
 * kept, the rest evaluated) and points *logits at the vocab_size logits after the last id: owned
 * by the session, valid until its next call. An empty list or an id outside the vocabulary is
 * POCKET_ERR_INVALID_ARGUMENT naming it; more ids than the context, POCKET_ERR_OUT_OF_RANGE;
 * pocket_session_cancel stops it between prefill chunks (POCKET_ERR_CANCELLED). */
POCKET_API pocket_status pocket_session_eval(pocket_session* session, const int32_t* ids,
                                             size_t n_ids, const float** logits, pocket_error* err);
/* Forgets the conversation and frees its KV memory (the next prompt is evaluated from scratch). */
POCKET_API void pocket_session_reset(pocket_session* session);
/* Saved sessions: the conversation's context (its tokens, their keys and values in the cache's
 * type, the last logits) and `user_data` (n_user_data bytes of the app's own state, may be NULL
 * when 0) written to `path` (versioned, checksummed; a temporary file renamed at the end). */
POCKET_API pocket_status pocket_session_save(const pocket_session* session, const char* path,
                                             const void* user_data, size_t n_user_data,
                                             pocket_error* err);
/* Makes the session's context the one `path` holds: the same model, KV type and adapter set
 * (else POCKET_ERR_FAILED_PRECONDITION or POCKET_ERR_INVALID_ARGUMENT naming the field), fitting
 * the session's context (POCKET_ERR_OUT_OF_RANGE); a truncated or corrupt file is
 * POCKET_ERR_DATA_LOSS. On any error the session is unchanged. The saved user data is copied to
 * `user_data` (capacity bytes; may be NULL when 0) and its size to *n_user_data (may be NULL):
 * with too small a capacity the call returns POCKET_ERR_BUFFER_TOO_SMALL and leaves the session
 * unchanged, so a caller can ask for the size with capacity 0 first. */
POCKET_API pocket_status pocket_session_load(pocket_session* session, const char* path,
                                             void* user_data, size_t capacity, size_t* n_user_data,
                                             pocket_error* err);

/* ---- Task adapters (LoRA) ----
 * An adapter is loaded once for a model (a PEFT directory: adapter_config.json +
 * adapter_model.safetensors; a llama.cpp LoRA .gguf; a pocket adapter package) and is immutable:
 * any number of sessions may use it at once, each with its own scale. It must outlive the sessions
 * that use it (free it after them). */
typedef struct pocket_adapter pocket_adapter;
POCKET_API pocket_status pocket_adapter_load(const pocket_model* model, const char* path,
                                             pocket_adapter** out_adapter, pocket_error* err);
POCKET_API void pocket_adapter_free(pocket_adapter* adapter);
/* What the adapter holds: the largest rank, the number of adapted matrices, the bytes of its
 * factors and the targets ("q,k,v,o,gate,up,down", then "embed" and "lm_head" when it adapts the
 * token embedding or the output matrix; valid while the adapter lives). */
POCKET_API int32_t pocket_adapter_max_rank(const pocket_adapter* adapter);
POCKET_API int32_t pocket_adapter_n_matrices(const pocket_adapter* adapter);
POCKET_API uint64_t pocket_adapter_bytes(const pocket_adapter* adapter);
POCKET_API const char* pocket_adapter_targets(const pocket_adapter* adapter);
/* A pocket adapter package may carry a classification head (a task = adapter + head; `pocket
 * convert MODEL --lora DIR --classifier-head FILE --classifier-labels a,b -o task.pocket`): its
 * number of labels (0: none) and their names (owned by the adapter). A session using the adapter
 * classifies with that head instead of the model's. */
POCKET_API size_t pocket_adapter_n_labels(const pocket_adapter* adapter);
POCKET_API const char* pocket_adapter_label(const pocket_adapter* adapter, size_t index);
/* The adapters the session applies from its next call on, all at once, each with its scale
 * (scales may be NULL: 1 each; n = 0 removes them). The same set as before keeps the session's
 * context; another set forgets it (its keys and values were computed with the old set). Takes
 * well under a millisecond. */
POCKET_API pocket_status pocket_session_set_adapters(pocket_session* session,
                                                     const pocket_adapter* const* adapters,
                                                     const float* scales, size_t n,
                                                     pocket_error* err);
/* The number of adapters the session applies now. */
POCKET_API size_t pocket_session_n_adapters(const pocket_session* session);

/* The seed that means "draw one from the system" (std::random_device): the default. The seed
 * used is reported in pocket_generate_result.seed; passing it back reproduces the run. */
#define POCKET_SEED_RANDOM UINT64_MAX

typedef struct pocket_generate_params {
  size_t struct_size;       /* set by pocket_generate_default_params() */
  int32_t max_tokens;       /* default 256 */
  float temperature;        /* 0 = greedy; default 0.8 */
  int32_t top_k;            /* 0 = off; default 40 */
  float top_p;              /* 1 = off; default 0.95 */
  float min_p;              /* 0 = off; default 0.05 */
  float repetition_penalty; /* 1 = off */
  float presence_penalty;
  float frequency_penalty;
  uint64_t seed; /* POCKET_SEED_RANDOM (default) or a fixed seed: same seed and inputs, same
                  * output (on the same build and CPU) */
  const char* const* stop_strings; /* may be NULL */
  size_t n_stop_strings;
  /* When n_choices > 0 the output is exactly one of these strings (UTF-8, NUL-terminated): only
   * tokens that continue a choice are sampled, the model stops only on a whole choice, and a
   * max_tokens that would cut the output makes the call fail with POCKET_ERR_RESOURCE_EXHAUSTED.
   * n_choices = 0 means no choices. n_choices > 0 with choices NULL, or a choice that is NULL,
   * empty or only whitespace, is POCKET_ERR_INVALID_ARGUMENT naming it ("choices[1] is empty"). */
  const char* const* choices;
  size_t n_choices;
  /* Other constraints, with the same guarantees (NULL = none; at most one of choices, regex,
   * json_schema and grammar): a regular expression the whole output matches; a JSON Schema (its
   * JSON text; draft 2020-12 subset, unsupported keywords are an error naming them) the output is
   * valid JSON against; a GBNF grammar (llama.cpp syntax) the output is a sentence of.
   * Only NULL means none: a non-NULL one that is empty ("") or only ASCII whitespace is never
   * read as "unconstrained" but is POCKET_ERR_INVALID_ARGUMENT naming the field ("regex is
   * empty: ..."), so an empty file or unset variable cannot silently drop the guarantee. */
  const char* regex;
  const char* json_schema;
  const char* grammar;
  /* Span fields: with json_schema, string properties marked "x-pocket-span": true; with grammar,
   * the rule named "span": their values are substrings of this text (NULL = none). */
  const char* span_source;
  /* A conversation instead of a prompt (pass prompt = NULL): the messages are formatted with the
   * model's chat template, ending with the assistant's turn to speak. A model without a chat
   * template gives POCKET_ERR_FAILED_PRECONDITION. enable_thinking (default true): false asks a
   * Qwen3 model to answer without reasoning (an empty <think></think> block). */
  const pocket_chat_message* messages;
  size_t n_messages;
  bool enable_thinking;
  /* Recognise special-token strings in the prompt or message contents (default false: they are
   * plain text; the chat template's own special tokens are special either way). */
  bool parse_special;
  /* Speculative decoding, lossless (greedy and seeded outputs are those of plain decoding; a
   * sampled draft model keeps the distribution): NULL or "none" (default); "lookup" (drafts
   * copied from earlier text); "draft:FILE" (a draft model with the model's vocabulary);
   * "dflash:DIR" (a DFlash block drafter directory); "auto" (lookup, verified only while it
   * pays); "auto:MODE". The session keeps the drafter (a draft model's session, a block
   * drafter's context) for later calls with the same spec. Up to draft_max (default 8, at most 30:
   * longer passes would round differently from plain decoding) tokens per verification pass;
   * shorter drafts than draft_min (default 1) are not verified; a draft model stops drafting below
   * draft_p_min top probability (default 0). */
  const char* spec;
  int32_t draft_max;
  int32_t draft_min;
  float draft_p_min;
  /* "lookup": verify the continuations of up to draft_branches (1 to 8, default 1) earlier
   * matches at once, as a draft tree. */
  int32_t draft_branches;
} pocket_generate_params;

typedef enum pocket_stop_reason {
  POCKET_STOP_EOS = 0,
  POCKET_STOP_STRING = 1,
  POCKET_STOP_MAX_TOKENS = 2,
  POCKET_STOP_CANCELLED = 3,
  POCKET_STOP_CALLBACK = 4,
  POCKET_STOP_CONTEXT_FULL = 5
} pocket_stop_reason;

typedef struct pocket_generate_result {
  pocket_stop_reason stop_reason;
  int32_t n_prompt_tokens; /* evaluated (not reused from the previous call) */
  int32_t n_generated_tokens;
  double prefill_ms;
  double decode_ms;
  double constraint_ms; /* of decode_ms: computing token masks under a constraint */
  uint64_t seed;        /* the sampler's seed: params.seed, or the one drawn for
                         * POCKET_SEED_RANDOM; never POCKET_SEED_RANDOM itself */
  /* Speculative decoding: verification passes, drafted tokens verified, those accepted (their
   * ratio is the acceptance rate; accepted / passes the mean accepted length), decode steps taken
   * without a draft, and the drafter's share of decode_ms. Zero without params.spec. */
  int32_t n_verify_passes;
  int32_t n_drafted_tokens;
  int32_t n_accepted_draft_tokens;
  int32_t n_plain_decode_steps;
  double draft_ms;
  int32_t n_tree_passes; /* of n_verify_passes, those over a draft tree of several branches */
} pocket_generate_result;

/* Called with each piece of text (whole UTF-8 characters, not NUL-terminated); return false to
 * stop generation. */
typedef bool (*pocket_text_callback)(const char* text, size_t len, void* user_data);

POCKET_API void pocket_generate_params_init(pocket_generate_params* params, size_t struct_size);
POCKET_INLINE pocket_generate_params pocket_generate_default_params(void) {
  pocket_generate_params params;
  pocket_generate_params_init(&params, sizeof(params));
  return params;
}
/* Generates a continuation of `prompt` (UTF-8), or of params->messages when prompt is NULL:
 * exactly one of the two. Special-token strings in the text are plain text unless
 * params->parse_special. The KV cache of the previous call is reused for the common prefix.
 * A pending pocket_session_cancel makes the call return POCKET_OK at once with stop reason
 * POCKET_STOP_CANCELLED. `result` may be NULL; every call first sets all of it to zero, so after an
 * error it holds no figures of an earlier call. */
POCKET_API pocket_status pocket_generate(pocket_session* session, const char* prompt,
                                         const pocket_generate_params* params,
                                         pocket_text_callback on_text, void* user_data,
                                         pocket_generate_result* result, pocket_error* err);

/* ---- batches: several sessions generating together ----
 * A batch runs the requests of several sessions of one model together (continuous batching, the
 * engine pocket serve runs): each pocket_batch_step is ONE forward pass over every active request
 * (a decode row each, or the next prefill chunk of a new prompt), so N conversations or an agent's
 * parallel calls read the weights once per token instead of N times. A request computes exactly
 * what pocket_generate computes alone: the same tokens and text. Requests join (submit) and leave
 * (they finish, or pocket_session_cancel stops one within a step) between steps. A batch and its
 * calls belong to one thread; pocket_session_cancel may come from any. */
typedef struct pocket_batch pocket_batch;
/* A batch for sessions of `model` created with the same n_threads (they share its threads; 0 =
 * one per hardware thread), at most max_requests at once (0: 8), whose prefill chunk (n_batch) is
 * at most max_chunk (0: 512). */
POCKET_API pocket_status pocket_batch_create(const pocket_model* model, int32_t n_threads,
                                             int32_t max_requests, int32_t max_chunk,
                                             pocket_batch** out, pocket_error* err);
/* Requests never taken are dropped; their sessions stay usable. */
POCKET_API void pocket_batch_free(pocket_batch* batch);
/* Starts generating on `session` as pocket_generate would (prompt or params->messages; the
 * session's context reused), and returns the request's id in *id. The session is the request's
 * until pocket_batch_take (pocket_generate on it fails meanwhile). on_text is called from
 * pocket_batch_step. Speculative decoding (params->spec) is not batched: POCKET_ERR_UNIMPLEMENTED.
 * A full batch is POCKET_ERR_RESOURCE_EXHAUSTED. */
POCKET_API pocket_status pocket_batch_submit(pocket_batch* batch, pocket_session* session,
                                             const char* prompt,
                                             const pocket_generate_params* params,
                                             pocket_text_callback on_text, void* user_data,
                                             int64_t* id, pocket_error* err);
/* One forward pass over every active request, and their token steps (on_text calls); *n_active
 * (may be NULL) receives the number still running. Call until it is 0, taking finished requests
 * as they come, submitting new ones whenever. */
POCKET_API pocket_status pocket_batch_step(pocket_batch* batch, int32_t* n_active,
                                           pocket_error* err);
/* 1 when request `id` has finished (its result waits for pocket_batch_take), else 0. */
POCKET_API int pocket_batch_done(const pocket_batch* batch, int64_t id);
/* The result of a finished request (as pocket_generate's), handing its session back; a request
 * still running is POCKET_ERR_FAILED_PRECONDITION, an unknown id POCKET_ERR_NOT_FOUND. */
POCKET_API pocket_status pocket_batch_take(pocket_batch* batch, int64_t id,
                                           pocket_generate_result* result, pocket_error* err);

/* ---- candidate scoring ---- */
typedef struct pocket_candidate_score {
  size_t index;       /* position in the caller's candidate list */
  int32_t n_tokens;   /* tokens the candidate was scored as */
  double logprob;     /* log p(candidate | prompt): the sum over its tokens */
  double probability; /* exp(logprob), normalized over the candidates */
} pocket_candidate_score;

typedef struct pocket_score_params {
  size_t struct_size; /* set by pocket_score_default_params() */
  /* A conversation instead of a prompt (pass prompt = NULL), formatted as for pocket_generate:
   * the candidates continue the assistant's turn. */
  const pocket_chat_message* messages;
  size_t n_messages;
  bool enable_thinking; /* default true */
  /* Recognise special-token strings in the prompt, message contents and candidates (default
   * false: plain text). */
  bool parse_special;
} pocket_score_params;

POCKET_API void pocket_score_params_init(pocket_score_params* params, size_t struct_size);
POCKET_INLINE pocket_score_params pocket_score_default_params(void) {
  pocket_score_params params;
  pocket_score_params_init(&params, sizeof(params));
  return params;
}
/* Log-probabilities of candidate continuations of `prompt` (or of params->messages when prompt is
 * NULL: exactly one of the two), all candidates in one forward pass after the prompt. Writes
 * n_candidates entries to `scores`, best first. The session's context becomes the prompt.
 *
 * Candidate tokens: a candidate is scored as the tokens it adds in running text, those of
 * tokenize(prompt + candidate) after the tokens of tokenize(prompt). So " positive" after
 * "Sentiment:" is scored as the model would see it, whatever the vocabulary does with leading
 * spaces. When the boundary merges (the joint tokens do not start with the prompt's, as
 * "Answer: " + "yes" gives " yes"), the candidate is tokenized on its own instead. An empty
 * candidate is an error. pocket_candidate_score.n_tokens reports the count used. */
POCKET_API pocket_status pocket_score(pocket_session* session, const char* prompt,
                                      const pocket_score_params* params,
                                      const char* const* candidates, size_t n_candidates,
                                      pocket_candidate_score* scores, pocket_error* err);

/* ---- classification head ---- */
/* A model file may carry a classification head: a matrix [n_labels, hidden] (tensor
 * cls_head.weight) and the names of its labels (made by `pocket convert --classifier-head`).
 * Returns the number of labels, 0 when the model has no head. */
POCKET_API size_t pocket_model_n_labels(const pocket_model* model);
/* The name of label `index` (NUL-terminated, owned by the model); NULL when out of range. */
POCKET_API const char* pocket_model_label(const pocket_model* model, size_t index);

typedef struct pocket_label_score {
  size_t index;       /* the label's row in the head: pocket_model_label(model, index) */
  const char* label;  /* its name (owned by the model or the adapter whose head it is) */
  double logit;       /* head row . final-norm hidden state of the prompt's last token */
  double logprob;     /* log-softmax over the labels */
  double probability; /* exp(logprob); the labels' probabilities sum to 1 */
} pocket_label_score;

typedef struct pocket_classify_params {
  size_t struct_size; /* set by pocket_classify_default_params() */
  /* A conversation instead of a prompt (pass prompt = NULL), formatted as for pocket_generate
   * (the tokens pocket_tokenize_chat gives: generation prompt appended), so the head reads the
   * hidden state where the assistant's turn begins. */
  const pocket_chat_message* messages;
  size_t n_messages;
  bool enable_thinking; /* default true */
  /* Recognise special-token strings in the prompt or message contents (default false: plain
   * text, so user text cannot inject control tokens; the chat template's own are special either
   * way). */
  bool parse_special;
} pocket_classify_params;

POCKET_API void pocket_classify_params_init(pocket_classify_params* params, size_t struct_size);
POCKET_INLINE pocket_classify_params pocket_classify_default_params(void) {
  pocket_classify_params params;
  pocket_classify_params_init(&params, sizeof(params));
  return params;
}
/* Scores the labels of the model's classification head for `prompt` (UTF-8), or for
 * params->messages when prompt is NULL: exactly one of the two. The input is tokenized as
 * pocket_generate and pocket_score tokenize it (BOS by the tokenizer's rule; special-token strings
 * plain text unless params->parse_special; NULL params = pocket_classify_default_params()), and
 * the labels come from one forward pass of it alone. Writes up to `capacity` entries to `scores`,
 * best first; *n_scores receives the number of labels (if it exceeds capacity the call returns
 * POCKET_ERR_BUFFER_TOO_SMALL and writes nothing). A model without a head:
 * POCKET_ERR_FAILED_PRECONDITION. The session's context becomes the input. */
POCKET_API pocket_status pocket_classify(pocket_session* session, const char* prompt,
                                         const pocket_classify_params* params,
                                         pocket_label_score* scores, size_t capacity,
                                         size_t* n_scores, pocket_error* err);

#ifdef __cplusplus
}
#endif

#endif /* POCKET_POCKET_H_ */
