package ai.pocket;

/** The text of one generation and its figures ({@code pocket_generate_result}). */
public final class GenerateResult {
  private final String text;
  private final StopReason stopReason;
  private final long[] longs;
  private final double[] doubles;

  GenerateResult(String text, long[] longs, double[] doubles) {
    this.text = text;
    this.stopReason = StopReason.fromCode((int) longs[NativeLib.R_STOP_REASON]);
    this.longs = longs;
    this.doubles = doubles;
  }

  /** Everything generated (what a listener received, concatenated). */
  public String text() {
    return text;
  }

  public StopReason stopReason() {
    return stopReason;
  }

  /** Prompt tokens evaluated (not reused from the session's previous call). */
  public int promptTokens() {
    return (int) longs[NativeLib.R_PROMPT_TOKENS];
  }

  public int generatedTokens() {
    return (int) longs[NativeLib.R_GENERATED_TOKENS];
  }

  public double prefillMs() {
    return doubles[NativeLib.R_PREFILL_MS];
  }

  public double decodeMs() {
    return doubles[NativeLib.R_DECODE_MS];
  }

  /** Of decodeMs, the time spent computing token masks for a constraint. */
  public double constraintMs() {
    return doubles[NativeLib.R_CONSTRAINT_MS];
  }

  /** The seed used (unsigned 64 bits; never {@link GenerateOptions#SEED_RANDOM}). */
  public long seed() {
    return longs[NativeLib.R_SEED];
  }

  /** Speculative decoding: verification passes (0 without a spec). */
  public int verifyPasses() {
    return (int) longs[NativeLib.R_VERIFY_PASSES];
  }

  public int draftedTokens() {
    return (int) longs[NativeLib.R_DRAFTED_TOKENS];
  }

  public int acceptedDraftTokens() {
    return (int) longs[NativeLib.R_ACCEPTED_DRAFT_TOKENS];
  }

  public int plainDecodeSteps() {
    return (int) longs[NativeLib.R_PLAIN_DECODE_STEPS];
  }

  public int treePasses() {
    return (int) longs[NativeLib.R_TREE_PASSES];
  }

  public double draftMs() {
    return doubles[NativeLib.R_DRAFT_MS];
  }

  @Override
  public String toString() {
    return "GenerateResult{" + stopReason + ", " + promptTokens() + " prompt + "
        + generatedTokens() + " generated tokens, seed " + Long.toUnsignedString(seed()) + ": \""
        + text + "\"}";
  }
}
