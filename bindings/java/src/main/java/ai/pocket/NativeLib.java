package ai.pocket;

// The JNI library's entry points (registered by its JNI_OnLoad; their C++ side is
// jni/pocket_jni.cc). Strings travel as UTF-8 byte arrays; errors are thrown as PocketException.
final class NativeLib {
  private NativeLib() {}

  static {
    // An explicit path serves desktop tests and apps that ship the library outside
    // java.library.path; on Android, loadLibrary finds it in the APK.
    String path = System.getProperty("pocket.jni.library");
    if (path != null && !path.isEmpty()) {
      System.load(path);
    } else {
      // Android's linker before API 23 does not resolve a library's dependencies from the app's
      // own directory: load libpocket.so first there.
      if ("Dalvik".equals(System.getProperty("java.vm.name"))) System.loadLibrary("pocket");
      System.loadLibrary("pocket_jni");
    }
  }

  /** Forces the library to load (and its natives to register) before first use. */
  static void init() {}

  // Indices into the int[] and float[] arrays that carry pocket_generate_params.
  static final int I_MAX_TOKENS = 0;
  static final int I_TOP_K = 1;
  static final int I_DRAFT_MAX = 2;
  static final int I_DRAFT_MIN = 3;
  static final int I_DRAFT_BRANCHES = 4;
  static final int I_ENABLE_THINKING = 5;
  static final int I_PARSE_SPECIAL = 6;
  static final int N_INTS = 7;
  static final int F_TEMPERATURE = 0;
  static final int F_TOP_P = 1;
  static final int F_MIN_P = 2;
  static final int F_REPETITION_PENALTY = 3;
  static final int F_PRESENCE_PENALTY = 4;
  static final int F_FREQUENCY_PENALTY = 5;
  static final int F_DRAFT_P_MIN = 6;
  static final int N_FLOATS = 7;
  // Indices into generate's result arrays.
  static final int R_STOP_REASON = 0;
  static final int R_PROMPT_TOKENS = 1;
  static final int R_GENERATED_TOKENS = 2;
  static final int R_SEED = 3;
  static final int R_VERIFY_PASSES = 4;
  static final int R_DRAFTED_TOKENS = 5;
  static final int R_ACCEPTED_DRAFT_TOKENS = 6;
  static final int R_PLAIN_DECODE_STEPS = 7;
  static final int R_TREE_PASSES = 8;
  static final int N_RESULT_LONGS = 9;
  static final int R_PREFILL_MS = 0;
  static final int R_DECODE_MS = 1;
  static final int R_CONSTRAINT_MS = 2;
  static final int R_DRAFT_MS = 3;
  static final int N_RESULT_DOUBLES = 4;

  static native byte[] version();

  static native void generateDefaults(int[] ints, float[] floats, long[] seed);

  static native long modelLoad(byte[] path, byte[] tokenizerPath);

  static native void modelFree(long model);

  static native int modelVocabSize(long model);

  static native int modelContextLength(long model);

  static native byte[] modelKernels(long model);

  static native int modelLabelCount(long model);

  static native byte[] modelLabel(long model, int index);

  static native int[] tokenize(long model, byte[] text, boolean parseSpecial);

  static native int[] tokenizeChat(
      long model, byte[][] roles, byte[][] contents, boolean enableThinking, boolean parseSpecial);

  static native byte[] detokenize(long model, int[] ids);

  static native long adapterLoad(long model, byte[] path);

  static native void adapterFree(long adapter);

  static native int adapterMaxRank(long adapter);

  static native int adapterMatrixCount(long adapter);

  static native long adapterBytes(long adapter);

  static native byte[] adapterTargets(long adapter);

  static native int adapterLabelCount(long adapter);

  static native byte[] adapterLabel(long adapter, int index);

  static native long sessionCreate(long model, int nThreads, int nCtx, int nBatch);

  static native void sessionFree(long session);

  static native int sessionThreadCount(long session);

  static native void sessionCancel(long session);

  static native void sessionReset(long session);

  static native void sessionSetAdapters(long session, long[] adapters, float[] scales);

  static native float[] sessionEval(long session, int[] ids, int vocabSize);

  static native void sessionSave(long session, byte[] path, byte[] userData);

  static native byte[] sessionLoad(long session, byte[] path);

  /**
   * Returns the whole text; sink (may be null) receives each piece. resultLongs and resultDoubles
   * receive the figures of pocket_generate_result.
   */
  static native byte[] generate(
      long session,
      byte[] prompt,
      byte[][] roles,
      byte[][] contents,
      int[] ints,
      float[] floats,
      long seed,
      byte[][] stopStrings,
      byte[][] choices,
      byte[] regex,
      byte[] jsonSchema,
      byte[] grammar,
      byte[] spanSource,
      byte[] spec,
      TextSink sink,
      long[] resultLongs,
      double[] resultDoubles);

  /** Fills indexAndTokens (2 per score) and logprobAndProbability (2 per score), best first. */
  static native void score(
      long session,
      byte[] prompt,
      byte[][] roles,
      byte[][] contents,
      boolean enableThinking,
      boolean parseSpecial,
      byte[][] candidates,
      long[] indexAndTokens,
      double[] logprobAndProbability);

  /** Returns {long[] indices, double[] logit/logprob/probability triples, byte[][] labels}. */
  static native Object[] classify(
      long session,
      byte[] prompt,
      byte[][] roles,
      byte[][] contents,
      boolean enableThinking,
      boolean parseSpecial);
}
