package ai.pocket;

import java.util.List;

/**
 * A conversation's state on a {@link Model}: its context (KV cache), reused between calls for the
 * common prefix of the next prompt. One call at a time: a call made while another thread is inside
 * one throws {@link IllegalStateException} (pocket's session is single-threaded); only {@link
 * #cancel()} and {@link #close()} may come from any thread at any time.
 *
 * <p>A Session keeps its Model (and the Adapters it applies) alive: closing the Model first is
 * allowed, its native memory is freed after this session's. {@link #close()} while another thread
 * is generating cancels that generation; the native session is freed when it returns.
 */
public final class Session extends NativeResource {
  private final Model model;
  private final int vocabSize;
  private Adapter[] adapters = new Adapter[0];
  private boolean busy; // guarded by this

  Session(Model model, int nThreads, int contextSize, int batchSize) {
    super("Session", create(model, nThreads, contextSize, batchSize));
    this.model = model;
    this.vocabSize = model.vocabSizeUnchecked();
  }

  // The model's reference is taken before the native session exists and dropped in free() (or
  // here, when creating fails), so the model outlives the session whatever the order of close().
  private static long create(Model model, int nThreads, int contextSize, int batchSize) {
    Utf8.requireNonNull(model, "model");
    long m = model.acquire();
    try {
      return NativeLib.sessionCreate(m, nThreads, contextSize, batchSize);
    } catch (RuntimeException | Error e) {
      model.release();
      throw e;
    }
  }

  public Model model() {
    return model;
  }

  // Marks the session busy for one call and returns its handle; the reference keeps the native
  // session alive even if another thread closes this object meanwhile.
  private synchronized long enter() {
    long h = acquire();
    if (busy) {
      release();
      throw new IllegalStateException(
          "Session is in use by another thread (one call at a time; cancel() and close() may come"
              + " from any thread)");
    }
    busy = true;
    return h;
  }

  private void exit() {
    synchronized (this) {
      busy = false;
    }
    release();
  }

  @Override
  void beforeRelease(long handle) {
    // Closing while another thread generates: stop it soon rather than wait for its end.
    if (busy) NativeLib.sessionCancel(handle);
  }

  /** The session's compute threads. */
  public int threadCount() {
    long h = enter();
    try {
      return NativeLib.sessionThreadCount(h);
    } finally {
      exit();
    }
  }

  /** Generates a continuation of prompt with the default options. */
  public GenerateResult generate(String prompt) {
    return generate(prompt, null, null);
  }

  public GenerateResult generate(String prompt, GenerateOptions options) {
    return generate(prompt, options, null);
  }

  /**
   * Generates a continuation of prompt (plain text: special-token strings are text unless {@link
   * GenerateOptions.Builder#parseSpecial}), streaming the pieces to listener (may be null).
   *
   * @param options null for the defaults
   * @throws PocketException for an invalid option, a prompt longer than the context, ...
   */
  public GenerateResult generate(String prompt, GenerateOptions options, TokenListener listener) {
    return run(Utf8.cString(prompt, "prompt"), null, null, options, listener);
  }

  /** Generates the assistant's reply to a conversation (the model's chat template). */
  public GenerateResult generate(List<ChatMessage> messages, GenerateOptions options) {
    return generate(messages, options, null);
  }

  public GenerateResult generate(
      List<ChatMessage> messages, GenerateOptions options, TokenListener listener) {
    byte[][][] m = Utf8.messages(messages);
    return run(null, m[0], m[1], options, listener);
  }

  private GenerateResult run(byte[] prompt, byte[][] roles, byte[][] contents,
      GenerateOptions options, TokenListener listener) {
    GenerateOptions o = options != null ? options : GenerateOptions.defaults();
    byte[][] stops = o.stopStringBytes();
    byte[][] choices = o.choiceBytes();
    byte[] regex = Utf8.optionalCString(o.regex(), "regex");
    byte[] schema = Utf8.optionalCString(o.jsonSchema(), "jsonSchema");
    byte[] grammar = Utf8.optionalCString(o.grammar(), "grammar");
    byte[] spanSource = Utf8.optionalCString(o.spanSource(), "spanSource");
    byte[] spec = Utf8.optionalCString(o.spec(), "spec");
    TextSink sink = listener != null ? new TextSink(listener) : null;
    long[] longs = new long[NativeLib.N_RESULT_LONGS];
    double[] doubles = new double[NativeLib.N_RESULT_DOUBLES];
    byte[] text;
    long h = enter();
    try {
      text = NativeLib.generate(h, prompt, roles, contents, o.ints, o.floats, o.seed(), stops,
          choices, regex, schema, grammar, spanSource, spec, sink, longs, doubles);
    } catch (Throwable nativeError) {
      // The listener's exception, when there is one, is the cause: it stopped the generation.
      if (sink != null) sink.rethrowWithSuppressed(nativeError);
      throw nativeError;
    } finally {
      exit();
    }
    if (sink != null) sink.rethrow();
    return new GenerateResult(Utf8.string(text), longs, doubles);
  }

  /**
   * Stops the call running on this session (generate within one token, with stop reason {@link
   * StopReason#CANCELLED}; score, classify and logits between prefill chunks, with a {@link
   * PocketException} CANCELLED), or, when none runs, the next one, which then returns at once.
   * Callable from any thread. On a closed session it does nothing: the work it would stop can no
   * longer run, and a cancel racing a close is ordinary UI behaviour, not a bug.
   */
  public void cancel() {
    long h;
    try {
      h = acquire();
    } catch (IllegalStateException closed) {
      return;
    }
    try {
      NativeLib.sessionCancel(h);
    } finally {
      release();
    }
  }

  /**
   * Ranks candidate continuations of prompt by log-probability, all in one forward pass; best
   * first. A candidate is scored as the tokens it adds to the prompt's in running text.
   */
  public CandidateScore[] score(String prompt, String... candidates) {
    return score(Utf8.cString(prompt, "prompt"), null, null, true, candidates);
  }

  /** Ranks candidate continuations of the assistant's turn in a conversation. */
  public CandidateScore[] score(List<ChatMessage> messages, String... candidates) {
    return score(messages, true, candidates);
  }

  /** As {@link #score(List, String...)}; enableThinking false for a Qwen3 answer without it. */
  public CandidateScore[] score(
      List<ChatMessage> messages, boolean enableThinking, String... candidates) {
    byte[][][] m = Utf8.messages(messages);
    return score(null, m[0], m[1], enableThinking, candidates);
  }

  private CandidateScore[] score(byte[] prompt, byte[][] roles, byte[][] contents,
      boolean enableThinking, String[] candidates) {
    if (candidates != null && candidates.length == 0) {
      throw new IllegalArgumentException("score needs at least one candidate");
    }
    byte[][] c = Utf8.cStrings(candidates, "candidates");
    long[] indexAndTokens = new long[2 * c.length];
    double[] logprobAndProbability = new double[2 * c.length];
    long h = enter();
    try {
      NativeLib.score(h, prompt, roles, contents, enableThinking, false, c, indexAndTokens,
          logprobAndProbability);
    } finally {
      exit();
    }
    CandidateScore[] scores = new CandidateScore[c.length];
    for (int i = 0; i < scores.length; i++) {
      int index = (int) indexAndTokens[2 * i];
      scores[i] = new CandidateScore(index, candidates[index], (int) indexAndTokens[2 * i + 1],
          logprobAndProbability[2 * i], logprobAndProbability[2 * i + 1]);
    }
    return scores;
  }

  /**
   * Scores the labels of the classification head (the model's, or that of an applied adapter) for
   * text; best first.
   *
   * @throws PocketException FAILED_PRECONDITION when there is no head
   */
  public LabelScore[] classify(String text) {
    return classify(Utf8.cString(text, "text"), null, null, true);
  }

  /** Classifies at the start of the assistant's turn in a conversation. */
  public LabelScore[] classify(List<ChatMessage> messages) {
    byte[][][] m = Utf8.messages(messages);
    return classify(null, m[0], m[1], true);
  }

  private LabelScore[] classify(byte[] prompt, byte[][] roles, byte[][] contents,
      boolean enableThinking) {
    Object[] out;
    long h = enter();
    try {
      out = NativeLib.classify(h, prompt, roles, contents, enableThinking, false);
    } finally {
      exit();
    }
    long[] indices = (long[]) out[0];
    double[] values = (double[]) out[1];
    byte[][] labels = (byte[][]) out[2];
    LabelScore[] scores = new LabelScore[indices.length];
    for (int i = 0; i < scores.length; i++) {
      scores[i] = new LabelScore((int) indices[i], Utf8.string(labels[i]), values[3 * i],
          values[3 * i + 1], values[3 * i + 2]);
    }
    return scores;
  }

  /**
   * Makes the session's context exactly these token ids (the prefix it already holds is kept) and
   * returns the vocabSize logits after the last one.
   */
  public float[] logits(int[] ids) {
    Utf8.requireNonNull(ids, "ids");
    long h = enter();
    try {
      return NativeLib.sessionEval(h, ids, vocabSize);
    } finally {
      exit();
    }
  }

  /**
   * The adapters applied from the next call on, each with its scale (scales null: 1 each; an
   * empty array removes them). The session keeps them alive until it applies another set or
   * closes. Another set than the current one forgets the context.
   */
  public void setAdapters(Adapter[] adapters, float[] scales) {
    Utf8.requireNonNull(adapters, "adapters");
    if (scales != null && scales.length != adapters.length) {
      throw new IllegalArgumentException("scales has " + scales.length + " entries for "
          + adapters.length + " adapters");
    }
    for (int i = 0; i < adapters.length; i++) {
      Utf8.requireNonNull(adapters[i], "adapters[" + i + "]");
    }
    Adapter[] next = adapters.clone();
    long h = enter();
    try {
      long[] handles = new long[next.length];
      int taken = 0;
      try {
        for (; taken < next.length; taken++) handles[taken] = next[taken].acquire();
        NativeLib.sessionSetAdapters(h, handles, scales);
      } catch (RuntimeException | Error e) {
        for (int i = 0; i < taken; i++) next[i].release();
        throw e;
      }
      Adapter[] previous;
      synchronized (this) {
        previous = this.adapters;
        this.adapters = next;
      }
      for (Adapter a : previous) a.release();
    } finally {
      exit();
    }
  }

  /** The adapters the session applies now. */
  public synchronized Adapter[] adapters() {
    ensureOpen();
    return adapters.clone();
  }

  /** Forgets the conversation and frees its KV memory. */
  public void reset() {
    long h = enter();
    try {
      NativeLib.sessionReset(h);
    } finally {
      exit();
    }
  }

  /** Saves the conversation's context to path. */
  public void save(String path) {
    save(path, null);
  }

  /** Saves the conversation's context and the app's own bytes (may be null) to path. */
  public void save(String path, byte[] userData) {
    byte[] p = Utf8.cString(path, "path");
    long h = enter();
    try {
      NativeLib.sessionSave(h, p, userData);
    } finally {
      exit();
    }
  }

  /**
   * Makes the session's context the one saved at path (same model, KV type and adapter set) and
   * returns the user data saved with it (empty when none). On an error the session is unchanged.
   */
  public byte[] load(String path) {
    byte[] p = Utf8.cString(path, "path");
    long h = enter();
    try {
      return NativeLib.sessionLoad(h, p);
    } finally {
      exit();
    }
  }

  @Override
  void free(long handle) {
    NativeLib.sessionFree(handle);
    Adapter[] applied;
    synchronized (this) {
      applied = adapters;
      adapters = new Adapter[0];
    }
    for (Adapter a : applied) a.release();
    model.release();
  }

  @Override
  public String toString() {
    return "Session{" + model.path() + (isClosed() ? ", closed}" : "}");
  }
}
