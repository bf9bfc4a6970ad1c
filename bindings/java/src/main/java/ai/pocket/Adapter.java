package ai.pocket;

/**
 * A task adapter (LoRA) loaded for one {@link Model}; immutable, so any number of sessions may
 * apply it at once, each with its own scale ({@link Session#setAdapters}). It keeps its model
 * alive, and sessions applying it keep it alive: {@link #close()} makes this object unusable at
 * once and frees it when no session applies it any more.
 */
public final class Adapter extends NativeResource {
  private final Model model;
  private final String path;

  Adapter(Model model, byte[] pathBytes, String path) {
    super("Adapter " + path, load(model, pathBytes));
    this.model = model;
    this.path = path;
  }

  // Takes the model's reference before the native adapter exists, so that it is dropped exactly
  // once whether the load succeeds (in free) or fails (here).
  private static long load(Model model, byte[] path) {
    long m = model.acquire();
    try {
      return NativeLib.adapterLoad(m, path);
    } catch (RuntimeException | Error e) {
      model.release();
      throw e;
    }
  }

  public Model model() {
    return model;
  }

  public String path() {
    return path;
  }

  /** The largest rank of its matrices. */
  public int maxRank() {
    long h = acquire();
    try {
      return NativeLib.adapterMaxRank(h);
    } finally {
      release();
    }
  }

  /** The number of adapted matrices. */
  public int matrixCount() {
    long h = acquire();
    try {
      return NativeLib.adapterMatrixCount(h);
    } finally {
      release();
    }
  }

  /** Bytes of its factors. */
  public long bytes() {
    long h = acquire();
    try {
      return NativeLib.adapterBytes(h);
    } finally {
      release();
    }
  }

  /** The adapted targets, e.g. "v,o,gate,up,down". */
  public String targets() {
    long h = acquire();
    try {
      return Utf8.string(NativeLib.adapterTargets(h));
    } finally {
      release();
    }
  }

  /** The labels of the adapter's classification head (empty when it has none). */
  public String[] labels() {
    long h = acquire();
    try {
      String[] labels = new String[NativeLib.adapterLabelCount(h)];
      for (int i = 0; i < labels.length; i++) {
        labels[i] = Utf8.string(NativeLib.adapterLabel(h, i));
      }
      return labels;
    } finally {
      release();
    }
  }

  @Override
  void free(long handle) {
    NativeLib.adapterFree(handle);
    model.release();
  }

  @Override
  public String toString() {
    return "Adapter{" + path + (isClosed() ? ", closed}" : "}");
  }
}
