package ai.pocket;

import java.util.List;

/**
 * A loaded model: weights, tokenizer, chat template and optional classification head. Thread-safe:
 * any number of {@link Session}s on any threads may share it.
 *
 * <p>Lifetime: {@link #close()} makes this object unusable at once (its methods then throw {@link
 * IllegalStateException}), but the native model is freed only when its last Session and Adapter
 * are closed too, so closing in any order is safe. Objects not closed leak their native memory
 * until the process ends: use try-with-resources.
 */
public final class Model extends NativeResource {
  private final String path;
  private final int vocabSize;
  private final int contextLength;

  private Model(long handle, String path) {
    super("Model " + path, handle);
    this.path = path;
    this.vocabSize = NativeLib.modelVocabSize(handle);
    this.contextLength = NativeLib.modelContextLength(handle);
  }

  /**
   * Loads a .pocket package, a GGUF file or a Hugging Face directory (each with its tokenizer).
   *
   * @throws PocketException NOT_FOUND when the path does not exist, DATA_LOSS for a corrupt file,
   *     UNIMPLEMENTED for an architecture pocket does not run, ...
   */
  public static Model load(String path) {
    return load(path, null);
  }

  /**
   * Loads a model with a separate tokenizer (tokenizer.json, or the tokenizer.bin a llama2.c
   * checkpoint needs); a null tokenizerPath means the model's own.
   */
  public static Model load(String path, String tokenizerPath) {
    byte[] p = Utf8.cString(path, "path");
    byte[] t = Utf8.optionalCString(tokenizerPath, "tokenizerPath");
    return new Model(NativeLib.modelLoad(p, t), path);
  }

  /** The version of the libpocket this binding runs with ("MAJOR.MINOR.PATCH"). */
  public static String libraryVersion() {
    return Utf8.string(NativeLib.version());
  }

  /** The path the model was loaded from. */
  public String path() {
    return path;
  }

  public int vocabSize() {
    ensureOpen();
    return vocabSize;
  }

  // For sessions, which may outlive this object's close().
  int vocabSizeUnchecked() {
    return vocabSize;
  }

  /** The model's trained context length in tokens. */
  public int contextLength() {
    ensureOpen();
    return contextLength;
  }

  /** The kernel table the model runs on ("avx2", "neon", ...). */
  public String kernels() {
    long h = acquire();
    try {
      return Utf8.string(NativeLib.modelKernels(h));
    } finally {
      release();
    }
  }

  /** The labels of the model's classification head (empty when it has none). */
  public String[] labels() {
    long h = acquire();
    try {
      String[] labels = new String[NativeLib.modelLabelCount(h)];
      for (int i = 0; i < labels.length; i++) labels[i] = Utf8.string(NativeLib.modelLabel(h, i));
      return labels;
    } finally {
      release();
    }
  }

  /** Token ids of text, the tokenizer's BOS included when it adds one. */
  public int[] tokenize(String text, boolean parseSpecial) {
    byte[] t = Utf8.bytes(text, "text");
    long h = acquire();
    try {
      return NativeLib.tokenize(h, t, parseSpecial);
    } finally {
      release();
    }
  }

  /** The tokens generate and score evaluate for a conversation (needs a chat template). */
  public int[] tokenizeChat(List<ChatMessage> messages, boolean enableThinking,
      boolean parseSpecial) {
    byte[][][] m = Utf8.messages(messages);
    long h = acquire();
    try {
      return NativeLib.tokenizeChat(h, m[0], m[1], enableThinking, parseSpecial);
    } finally {
      release();
    }
  }

  /**
   * The text of token ids. Ids that end inside a UTF-8 character give U+FFFD for the incomplete
   * bytes (Java strings cannot hold them).
   */
  public String detokenize(int[] ids) {
    Utf8.requireNonNull(ids, "ids");
    long h = acquire();
    try {
      return Utf8.string(NativeLib.detokenize(h, ids));
    } finally {
      release();
    }
  }

  /** A session with one compute thread per hardware thread and the default context. */
  public Session newSession() {
    return newSession(0, 0, 0);
  }

  /** A session with nThreads compute threads (0: one per hardware thread). */
  public Session newSession(int nThreads) {
    return newSession(nThreads, 0, 0);
  }

  /**
   * A session.
   *
   * @param nThreads compute threads, 0: one per hardware thread
   * @param contextSize context tokens, 0: pocket's default (4096, clamped to the model's)
   * @param batchSize prefill chunk in tokens, 0: pocket's default (512)
   */
  public Session newSession(int nThreads, int contextSize, int batchSize) {
    return new Session(this, nThreads, contextSize, batchSize);
  }

  /** Loads a LoRA adapter (or a pocket adapter package) for this model. */
  public Adapter loadAdapter(String path) {
    return new Adapter(this, Utf8.cString(path, "path"), path);
  }

  @Override
  void free(long handle) {
    NativeLib.modelFree(handle);
  }

  @Override
  public String toString() {
    return "Model{" + path + (isClosed() ? ", closed}" : "}");
  }
}
