package ai.pocket;

// What the JNI callback calls for each piece: decodes the UTF-8 here (see Utf8) and keeps the
// listener's exception, since one must not stay pending across the C library's frames; generate
// rethrows it once pocket has stopped.
final class TextSink {
  private final TokenListener listener;
  private Throwable error;

  TextSink(TokenListener listener) {
    this.listener = listener;
  }

  // Called from native code.
  boolean accept(byte[] utf8) {
    if (error != null) return false;
    try {
      return listener.onText(Utf8.string(utf8));
    } catch (Throwable t) {
      error = t;
      return false;
    }
  }

  // The native call failed after the listener had thrown: the listener's exception is thrown,
  // carrying the native failure as suppressed (nothing is lost).
  void rethrowWithSuppressed(Throwable nativeError) {
    if (error == null) return;
    if (error != nativeError) error.addSuppressed(nativeError);
    rethrow();
  }

  void rethrow() {
    if (error == null) return;
    if (error instanceof RuntimeException) throw (RuntimeException) error;
    if (error instanceof Error) throw (Error) error;
    // A checked exception (possible from Kotlin or sneaky throws).
    throw new RuntimeException("TokenListener threw " + error, error);
  }
}
