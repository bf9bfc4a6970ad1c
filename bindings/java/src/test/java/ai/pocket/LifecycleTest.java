package ai.pocket;

import static ai.pocket.TestSupport.PROMPT;
import static ai.pocket.TestSupport.greedy;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** Closed objects, argument checks and the errors pocket reports. */
class LifecycleTest {
  private static void assertClosed(String what, Executable call) {
    IllegalStateException e = assertThrows(IllegalStateException.class, call, what);
    assertTrue(e.getMessage().contains("closed"), e.getMessage());
  }

  @Test
  void closedModelThrows() {
    Model m = TestSupport.loadStories();
    m.close();
    m.close();
    assertTrue(m.isClosed());
    assertClosed("vocabSize", m::vocabSize);
    assertClosed("contextLength", m::contextLength);
    assertClosed("kernels", m::kernels);
    assertClosed("labels", m::labels);
    assertClosed("tokenize", () -> m.tokenize("x", false));
    assertClosed("detokenize", () -> m.detokenize(new int[] {1}));
    assertClosed("newSession", () -> m.newSession());
    assertClosed("loadAdapter", () -> m.loadAdapter("x"));
  }

  @Test
  void closedSessionThrows() {
    try (Model m = TestSupport.loadStories()) {
      Session s = m.newSession();
      s.close();
      s.close();
      assertClosed("generate", () -> s.generate(PROMPT));
      assertClosed("generate messages",
          () -> s.generate(Arrays.asList(ChatMessage.user("x")), null));
      assertClosed("score", () -> s.score(PROMPT, " a"));
      assertClosed("classify", () -> s.classify(PROMPT));
      assertClosed("logits", () -> s.logits(new int[] {1}));
      assertClosed("reset", s::reset);
      assertClosed("save", () -> s.save("/tmp/x"));
      assertClosed("load", () -> s.load("/tmp/x"));
      assertClosed("setAdapters", () -> s.setAdapters(new Adapter[0], null));
      assertClosed("threadCount", s::threadCount);
      s.cancel(); // documented as a no-op
    }
  }

  @Test
  void aSessionKeepsItsModelAlive() {
    Model m = TestSupport.loadStories();
    try (Session s = m.newSession()) {
      m.close();
      assertClosed("tokenize", () -> m.tokenize("x", false));
      assertEquals(16, s.generate(PROMPT, greedy(16)).generatedTokens());
      assertEquals(m, s.model());
    }
  }

  @Test
  void missingModelIsNotFoundNamingThePath() {
    String path = new File(System.getProperty("java.io.tmpdir"), "nö-such-модель-😀.bin").getPath();
    PocketException e = assertThrows(PocketException.class, () -> Model.load(path));
    assertEquals(Status.NOT_FOUND, e.status());
    assertTrue(e.pocketMessage().contains(path), e.pocketMessage());
    assertTrue(e.getMessage().startsWith("NOT_FOUND: "), e.getMessage());
    PocketException t = assertThrows(PocketException.class,
        () -> Model.load(TestSupport.modelPath(), path));
    assertEquals(Status.NOT_FOUND, t.status());
  }

  @Test
  void nullAndInvalidArguments() {
    assertThrows(NullPointerException.class, () -> Model.load(null));
    try (Model m = TestSupport.loadStories(); Session s = m.newSession()) {
      NullPointerException npe =
          assertThrows(NullPointerException.class, () -> s.generate((String) null));
      assertTrue(npe.getMessage().contains("prompt"), npe.getMessage());
      assertThrows(NullPointerException.class, () -> s.generate((List<ChatMessage>) null, null));
      assertThrows(NullPointerException.class,
          () -> s.generate(Arrays.asList(ChatMessage.user("a"), null), null));
      assertThrows(NullPointerException.class, () -> s.score(PROMPT, (String[]) null));
      assertThrows(NullPointerException.class, () -> s.logits(null));
      assertThrows(NullPointerException.class, () -> m.tokenize(null, false));
      assertThrows(NullPointerException.class, () -> new ChatMessage("user", null));
      IllegalArgumentException nul =
          assertThrows(IllegalArgumentException.class, () -> s.generate("a\0b"));
      assertTrue(nul.getMessage().contains("NUL"), nul.getMessage());
      assertThrows(IllegalArgumentException.class,
          () -> s.generate(PROMPT, GenerateOptions.builder().stop("x\0").build()));
      // tokenize is length-delimited: NUL is text there.
      assertTrue(m.tokenize("a\0b", false).length > 0);
      PocketException e = assertThrows(PocketException.class, () -> m.newSession(-1));
      assertEquals(Status.INVALID_ARGUMENT, e.status());
      assertEquals(Status.INVALID_ARGUMENT, assertThrows(PocketException.class,
          () -> s.generate(PROMPT, GenerateOptions.builder().topP(2f).build())).status());
      try (Session three = m.newSession(3)) {
        assertEquals(3, three.threadCount());
      }
    }
  }

  @Test
  void defaultsAreTheLibrarys() {
    GenerateOptions d = GenerateOptions.defaults();
    assertEquals(256, d.maxTokens());
    assertEquals(0.8f, d.temperature());
    assertEquals(40, d.topK());
    assertEquals(0.95f, d.topP());
    assertEquals(0.05f, d.minP());
    assertEquals(1f, d.repetitionPenalty());
    assertEquals(GenerateOptions.SEED_RANDOM, d.seed());
    assertTrue(d.enableThinking());
    assertTrue(!d.parseSpecial());
    assertTrue(d.stopStrings().isEmpty() && d.choices().isEmpty());
    assertEquals(null, d.jsonSchema());
  }
}
