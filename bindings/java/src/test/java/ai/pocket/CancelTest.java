package ai.pocket;

import static ai.pocket.TestSupport.PROMPT;
import static ai.pocket.TestSupport.greedy;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** cancel() and close() from other threads, and a session used by two threads at once. */
class CancelTest {
  private static Model model;
  private static ExecutorService pool;

  @BeforeAll
  static void load() {
    model = TestSupport.loadStories();
    pool = Executors.newCachedThreadPool();
  }

  @AfterAll
  static void close() {
    pool.shutdownNow();
    model.close();
  }

  // Long enough to run until the context is full, were it not cancelled.
  private static final GenerateOptions LONG = greedy(100_000);

  @Test
  void cancelFromAnotherThreadStopsBeforeTheNextToken() throws Exception {
    try (Session s = model.newSession()) {
      AtomicInteger pieces = new AtomicInteger();
      // At the 5th piece, wait until another thread has cancelled: the bound is then exact.
      GenerateResult r = s.generate(PROMPT, LONG, piece -> {
        if (pieces.incrementAndGet() == 5) {
          try {
            pool.submit(s::cancel).get(10, TimeUnit.SECONDS);
          } catch (Exception e) {
            throw new RuntimeException(e);
          }
        }
        return true;
      });
      assertEquals(StopReason.CANCELLED, r.stopReason());
      assertEquals(5, pieces.get());
      assertEquals(5, r.generatedTokens());
      // The request was used up: the next call runs normally.
      assertEquals(StopReason.MAX_TOKENS, s.generate(PROMPT, greedy(8)).stopReason());
    }
  }

  @Test
  void cancelWhileGeneratingInTheBackground() throws Exception {
    try (Session s = model.newSession()) {
      CountDownLatch started = new CountDownLatch(1);
      AtomicInteger afterCancel = new AtomicInteger();
      AtomicInteger pieces = new AtomicInteger();
      CountDownLatch cancelled = new CountDownLatch(1);
      Future<GenerateResult> running = pool.submit(() -> s.generate(PROMPT, LONG, piece -> {
        pieces.incrementAndGet();
        if (cancelled.getCount() == 0) afterCancel.incrementAndGet();
        started.countDown();
        sleep(2); // a slow model: ~500 tokens would take a second
        return true;
      }));
      assertTrue(started.await(10, TimeUnit.SECONDS));
      s.cancel();
      cancelled.countDown();
      GenerateResult r = running.get(10, TimeUnit.SECONDS);
      assertEquals(StopReason.CANCELLED, r.stopReason());
      assertTrue(afterCancel.get() <= 1, afterCancel.get() + " pieces after cancel()");
      assertTrue(pieces.get() < 50, pieces.get() + " pieces");
    }
  }

  @Test
  void cancelBeforeACallStopsThatCallOnly() {
    try (Session s = model.newSession()) {
      s.cancel();
      GenerateResult r = s.generate(PROMPT, greedy(8));
      assertEquals(StopReason.CANCELLED, r.stopReason());
      assertEquals(0, r.generatedTokens());
      assertEquals(8, s.generate(PROMPT, greedy(8)).generatedTokens());
    }
  }

  @Test
  void closeWhileGeneratingCancelsAndFreesAfterwards() throws Exception {
    Session s = model.newSession();
    CountDownLatch started = new CountDownLatch(1);
    Future<GenerateResult> running = pool.submit(() -> s.generate(PROMPT, LONG, piece -> {
      started.countDown();
      sleep(2);
      return true;
    }));
    assertTrue(started.await(10, TimeUnit.SECONDS));
    s.close();
    assertEquals(StopReason.CANCELLED, running.get(10, TimeUnit.SECONDS).stopReason());
    assertThrows(IllegalStateException.class, () -> s.generate(PROMPT, greedy(4)));
    s.cancel(); // a no-op on a closed session
  }

  @Test
  void aSecondThreadIsRefusedWhileOneGenerates() throws Exception {
    try (Session s = model.newSession()) {
      CountDownLatch inside = new CountDownLatch(1);
      CountDownLatch release = new CountDownLatch(1);
      Future<GenerateResult> running = pool.submit(() -> s.generate(PROMPT, greedy(16), piece -> {
        inside.countDown();
        try {
          release.await(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        return true;
      }));
      assertTrue(inside.await(10, TimeUnit.SECONDS));
      IllegalStateException e =
          assertThrows(IllegalStateException.class, () -> s.generate(PROMPT, greedy(4)));
      assertTrue(e.getMessage().contains("in use"), e.getMessage());
      assertThrows(IllegalStateException.class, () -> s.score(PROMPT, " a", " b"));
      release.countDown();
      assertEquals(16, running.get(10, TimeUnit.SECONDS).generatedTokens());
      assertEquals(4, s.generate(PROMPT, greedy(4)).generatedTokens());
    }
  }

  @Test
  void aListenerCallingItsOwnSessionGetsAnException() {
    try (Session s = model.newSession()) {
      IllegalStateException e = assertThrows(IllegalStateException.class,
          () -> s.generate(PROMPT, greedy(8), piece -> s.generate("x", greedy(1)) != null));
      assertTrue(e.getMessage().contains("in use"), e.getMessage());
      assertEquals(8, s.generate(PROMPT, greedy(8)).generatedTokens());
    }
  }

  @Test
  void sessionsOfOneModelRunOnSeveralThreads() throws Exception {
    String expected;
    try (Session s = model.newSession(1)) {
      expected = s.generate(PROMPT, greedy(24)).text();
    }
    Future<?>[] runs = new Future<?>[4];
    for (int i = 0; i < runs.length; i++) {
      runs[i] = pool.submit(() -> {
        try (Session s = model.newSession(1)) {
          for (int k = 0; k < 5; k++) assertEquals(expected, s.generate(PROMPT, greedy(24)).text());
        }
        return null;
      });
    }
    for (Future<?> f : runs) f.get(60, TimeUnit.SECONDS);
    assertNotEquals("", expected);
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
