package ai.pocket;

/** Why a generation ended ({@code pocket_stop_reason}). */
public enum StopReason {
  /** The model produced its end-of-text token. */
  EOS(0),
  /** One of the stop strings appeared. */
  STOP_STRING(1),
  /** {@link GenerateOptions#maxTokens()} tokens were generated. */
  MAX_TOKENS(2),
  /** {@link Session#cancel()} stopped it. */
  CANCELLED(3),
  /** The {@link TokenListener} returned false. */
  CALLBACK(4),
  /** The session's context is full. */
  CONTEXT_FULL(5);

  private final int code;

  StopReason(int code) {
    this.code = code;
  }

  public int code() {
    return code;
  }

  static StopReason fromCode(int code) {
    for (StopReason r : values()) {
      if (r.code == code) return r;
    }
    throw new IllegalStateException("pocket returned an unknown stop reason " + code);
  }
}
