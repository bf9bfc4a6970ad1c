package ai.pocket;

import java.nio.charset.StandardCharsets;

/**
 * An error reported by pocket: its {@link Status} and the message pocket wrote (which names the
 * offending argument, file or field). Programming errors on the Java side (null arguments, a closed
 * object) are reported with the standard Java exceptions instead.
 */
public class PocketException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final Status status;
  private final String pocketMessage;

  public PocketException(Status status, String pocketMessage) {
    super(status + ": " + pocketMessage);
    this.status = status;
    this.pocketMessage = pocketMessage;
  }

  // Thrown by the JNI library: the message is pocket's UTF-8 bytes, decoded here so that
  // characters outside the BMP (in a file name, say) survive, which JNI's modified UTF-8 would not.
  PocketException(int code, byte[] utf8Message) {
    this(Status.fromCode(code), new String(utf8Message, StandardCharsets.UTF_8));
  }

  public Status status() {
    return status;
  }

  /** The message as pocket wrote it, without the status prefix of {@link #getMessage()}. */
  public String pocketMessage() {
    return pocketMessage;
  }
}
