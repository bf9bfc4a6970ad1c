package ai.pocket;

/**
 * Receives generated text while it is produced. Called on the thread that called {@code
 * Session.generate}, with whole UTF-8 characters (a piece never splits a character). An exception
 * thrown here stops the generation and is rethrown by {@code generate} once the native call has
 * returned.
 */
@FunctionalInterface
public interface TokenListener {
  /**
   * @param piece the next piece of text (one token's worth or more)
   * @return true to go on, false to stop (the stop reason is then {@link StopReason#CALLBACK})
   */
  boolean onText(String piece);
}
