package ai.pocket;

// A native handle shared by its owner and by the objects and calls that need it alive: a Session
// holds its Model, an Adapter its Model, a Session the Adapters it applies, and each native call
// the handle it is using. close() drops the owner's reference and makes the object unusable; the
// native object is freed when the last reference goes, so closing from one thread while another
// is inside a call, or closing a Model before its Sessions, never frees memory in use.
abstract class NativeResource implements AutoCloseable {
  private final String kind;
  private long handle;
  private int refs = 1;
  private boolean closed;

  NativeResource(String kind, long handle) {
    this.kind = kind;
    this.handle = handle;
  }

  /** Takes a reference and returns the handle; pair with {@link #release()}. */
  final synchronized long acquire() {
    if (closed) throw new IllegalStateException(kind + " is closed");
    refs++;
    return handle;
  }

  final void release() {
    long h;
    synchronized (this) {
      if (--refs > 0) return;
      h = handle;
      handle = 0;
    }
    free(h);
  }

  /** Throws IllegalStateException when closed. */
  final synchronized void ensureOpen() {
    if (closed) throw new IllegalStateException(kind + " is closed");
  }

  public final synchronized boolean isClosed() {
    return closed;
  }

  /**
   * Makes the object unusable (later calls throw IllegalStateException) and frees its native
   * memory, at once or, while it is in use, when the last user lets go. Closing twice is harmless.
   */
  @Override
  public void close() {
    synchronized (this) {
      if (closed) return;
      closed = true;
      beforeRelease(handle);
    }
    release();
  }

  /** Runs under the lock when close() is first called; the handle is still valid. */
  void beforeRelease(long handle) {}

  /** Frees the native object and drops what it held; called once, without the lock. */
  abstract void free(long handle);
}
