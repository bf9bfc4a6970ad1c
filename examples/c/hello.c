/* hello.c: an app on pocket's C library. Loads a model, continues a prompt and prints the text
 * as it comes. Usage: hello MODEL [TOKENIZER] (a llama2.c checkpoint has no tokenizer inside). */
#include <pocket/pocket.h>
#include <stdio.h>

static bool print_text(const char* text, size_t len, void* user_data) {
  (void)user_data;
  fwrite(text, 1, len, stdout);
  return true; /* false stops the generation */
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL [TOKENIZER]\n", argv[0]);
    return 2;
  }
  printf("pocket %s (header %s)\n", pocket_version(), POCKET_VERSION_STRING);

  pocket_error err;
  pocket_model_params mp = pocket_model_default_params(); /* not a zeroed struct */
  if (argc > 2) mp.tokenizer_path = argv[2];
  pocket_model* model = NULL;
  if (pocket_model_load(argv[1], &mp, &model, &err) != POCKET_OK) {
    fprintf(stderr, "%s: %s\n", pocket_status_name(err.code), err.message);
    return 1;
  }
  pocket_session* session = NULL;
  if (pocket_session_create(model, NULL, &session, &err) != POCKET_OK) {
    fprintf(stderr, "%s: %s\n", pocket_status_name(err.code), err.message);
    pocket_model_free(model);
    return 1;
  }

  pocket_generate_params gp = pocket_generate_default_params();
  gp.max_tokens = 32;
  gp.temperature = 0.0f; /* greedy: the same text every run */
  pocket_generate_result result;
  pocket_status st =
      pocket_generate(session, "Once upon a time", &gp, print_text, NULL, &result, &err);
  if (st == POCKET_OK) {
    printf("\n[%d tokens]\n", result.n_generated_tokens);
  } else {
    fprintf(stderr, "%s: %s\n", pocket_status_name(err.code), err.message);
  }

  pocket_session_free(session);
  pocket_model_free(model);
  return st == POCKET_OK ? 0 : 1;
}
