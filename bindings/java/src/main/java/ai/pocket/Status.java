package ai.pocket;

/** The outcome codes of pocket's C API ({@code pocket_status}), with the same numeric values. */
public enum Status {
  OK(0),
  INVALID_ARGUMENT(1),
  NOT_FOUND(2),
  DATA_LOSS(3),
  UNIMPLEMENTED(4),
  OUT_OF_RANGE(5),
  RESOURCE_EXHAUSTED(6),
  CANCELLED(7),
  FAILED_PRECONDITION(8),
  IO(9),
  INTERNAL(10),
  BUFFER_TOO_SMALL(11);

  private final int code;

  Status(int code) {
    this.code = code;
  }

  /** The value of the C enum. */
  public int code() {
    return code;
  }

  /** The status for a C code; a code this binding does not know (a newer library) is INTERNAL. */
  public static Status fromCode(int code) {
    for (Status s : values()) {
      if (s.code == code) return s;
    }
    return INTERNAL;
  }
}
