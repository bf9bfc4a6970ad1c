import ai.pocket.GenerateOptions;
import ai.pocket.GenerateResult;
import ai.pocket.Model;
import ai.pocket.Session;

/** Streams a greedy generation through the Java bindings and reports tokens/s by the wall clock
 *  of the whole call, as bench/capi_stream.c does for the C API (scripts/bindings-bench.sh).
 *  java -Dpocket.jni.library=libpocket_jni.so -cp pocket.jar:. JavaStream MODEL [N [REPS [THREADS]]] */
public class JavaStream {
  public static void main(String[] args) {
    int n = args.length > 1 ? Integer.parseInt(args[1]) : 256;
    int reps = args.length > 2 ? Integer.parseInt(args[2]) : 5;
    int threads = args.length > 3 ? Integer.parseInt(args[3]) : 2;
    GenerateOptions options = GenerateOptions.builder().maxTokens(n).temperature(0).build();
    try (Model model = Model.load(args[0]); Session session = model.newSession(threads)) {
      // A warm-up generation first, unreported: the JIT compiles the callback path.
      session.generate("Once upon a time", options.toBuilder().maxTokens(32).build(), p -> true);
      for (int r = 0; r < reps; ++r) {
        session.reset();
        long[] bytes = {0};
        long t0 = System.nanoTime();
        GenerateResult res = session.generate("Once upon a time", options, piece -> {
          bytes[0] += piece.length();
          return true;
        });
        double s = (System.nanoTime() - t0) * 1e-9;
        System.out.printf("{\"api\": \"java\", \"tokens\": %d, \"seconds\": %.6f, "
            + "\"tokens_per_s\": %.3f}%n", res.generatedTokens(), s, res.generatedTokens() / s);
      }
    }
  }
}
