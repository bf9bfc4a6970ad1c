package ai.pocket;

import static ai.pocket.TestSupport.PROMPT;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * Load, generate (streamed), score and close the tiny model 1,000 times: resident memory after a
 * warm-up of 50 cycles must not grow by more than 5 MB. Run in a JVM with a fixed heap (-Xms =
 * -Xmx, as the build's test command does), so that heap growth does not read as a leak.
 */
class LeakTest {
  private static final int WARM_UP = 50;
  private static final int CYCLES = 1000;
  private static final long LIMIT_KB = 5 * 1024;

  @Test
  void thousandCyclesKeepRssFlat() throws Exception {
    GenerateOptions options = TestSupport.greedy(8);
    String modelPath = TestSupport.modelPath();
    String tokenizerPath = TestSupport.tokenizerPath();
    long before = 0;
    long start = System.nanoTime();
    for (int i = 0; i < WARM_UP + CYCLES; i++) {
      if (i == WARM_UP) before = settledRssKb();
      try (Model m = Model.load(modelPath, tokenizerPath); Session s = m.newSession(1)) {
        int[] pieces = {0};
        GenerateResult r = s.generate(PROMPT, options, piece -> ++pieces[0] > 0);
        assertEquals(8, r.generatedTokens());
        s.score(PROMPT, " there", " a");
      }
    }
    long after = settledRssKb();
    double seconds = (System.nanoTime() - start) / 1e9;
    System.out.printf("LeakTest: %d cycles in %.1f s, VmRSS %d kB -> %d kB (%+d kB)%n", CYCLES,
        seconds, before, after, after - before);
    assertTrue(after - before <= LIMIT_KB,
        "VmRSS grew by " + (after - before) + " kB over " + CYCLES + " cycles");
  }

  private static long settledRssKb() throws Exception {
    System.gc();
    Thread.sleep(50);
    return TestSupport.rssKb();
  }
}
