package ai.pocket;

import static ai.pocket.TestSupport.PROMPT;
import static ai.pocket.TestSupport.asList;
import static ai.pocket.TestSupport.asObject;
import static ai.pocket.TestSupport.greedy;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Generation, streaming, constraints, tokens and saved sessions on stories260K. */
class GenerateTest {
  private static Model model;
  private static Map<String, Object> cliRun; // pocket run --json of PROMPT, 32 greedy tokens

  @BeforeAll
  static void load() throws Exception {
    model = TestSupport.loadStories();
    if (TestSupport.cli().canExecute()) {
      cliRun = asObject(TestSupport.parseJson(TestSupport.runCli("run", "-m",
          TestSupport.modelPath(), "--tokenizer", TestSupport.tokenizerPath(), "-p", PROMPT, "-n",
          "32", "--temp", "0", "--json")));
    }
  }

  @AfterAll
  static void close() {
    model.close();
  }

  private static String cliText() {
    TestSupport.assumeCli();
    return (String) cliRun.get("text");
  }

  @Test
  void modelProperties() {
    assertEquals(512, model.vocabSize());
    assertTrue(model.contextLength() > 0);
    assertTrue(!model.kernels().isEmpty());
    assertEquals(0, model.labels().length);
    assertTrue(Model.libraryVersion().matches("\\d+\\.\\d+\\.\\d+"), Model.libraryVersion());
  }

  @Test
  void greedyGenerateEqualsCli() {
    try (Session s = model.newSession()) {
      GenerateResult r = s.generate(PROMPT, greedy(32));
      assertEquals(cliText(), r.text());
      assertEquals(StopReason.MAX_TOKENS, r.stopReason());
      assertEquals(32, r.generatedTokens());
      assertEquals(((Double) cliRun.get("n_prompt_tokens")).intValue(), r.promptTokens());
      assertTrue(r.decodeMs() > 0 && r.prefillMs() > 0, r.toString());
    }
  }

  @Test
  void streamEqualsGenerate() {
    try (Session s = model.newSession()) {
      String whole = s.generate(PROMPT, greedy(32)).text();
      s.reset();
      StringBuilder streamed = new StringBuilder();
      List<String> pieces = new ArrayList<>();
      GenerateResult r = s.generate(PROMPT, greedy(32), piece -> {
        pieces.add(piece);
        streamed.append(piece);
        return true;
      });
      assertEquals(whole, streamed.toString());
      assertEquals(whole, r.text());
      assertTrue(pieces.size() > 1, "pieces: " + pieces);
    }
  }

  @Test
  void listenerReturningFalseStopsAndSessionStaysUsable() {
    try (Session s = model.newSession()) {
      List<String> pieces = new ArrayList<>();
      GenerateResult r = s.generate(PROMPT, greedy(32), piece -> {
        pieces.add(piece);
        return pieces.size() < 3;
      });
      assertEquals(StopReason.CALLBACK, r.stopReason());
      assertEquals(3, pieces.size());
      assertEquals(String.join("", pieces), r.text());
      GenerateResult again = s.generate(PROMPT, greedy(32));
      assertEquals(StopReason.MAX_TOKENS, again.stopReason());
      assertEquals(cliText(), again.text());
    }
  }

  @Test
  void listenerExceptionPropagatesAfterGenerationStops() {
    try (Session s = model.newSession()) {
      IllegalStateException thrown = new IllegalStateException("from the listener");
      int[] calls = {0};
      IllegalStateException e = assertThrows(IllegalStateException.class,
          () -> s.generate(PROMPT, greedy(32), piece -> {
            if (++calls[0] == 2) throw thrown;
            return true;
          }));
      assertSame(thrown, e);
      assertEquals(2, calls[0], "the listener was called after it threw");
      assertEquals(cliText(), s.generate(PROMPT, greedy(32)).text());
    }
  }

  @Test
  void seedIsReportedAndReproduces() {
    try (Session s = model.newSession()) {
      GenerateOptions sampled = GenerateOptions.builder().temperature(1).maxTokens(24).build();
      assertEquals(GenerateOptions.SEED_RANDOM, sampled.seed());
      GenerateResult a = s.generate(PROMPT, sampled);
      assertNotEquals(GenerateOptions.SEED_RANDOM, a.seed());
      GenerateResult b = s.generate(PROMPT, sampled.toBuilder().seed(a.seed()).build());
      assertEquals(a.seed(), b.seed());
      assertEquals(a.text(), b.text());
    }
  }

  @Test
  void stopString() {
    try (Session s = model.newSession()) {
      GenerateResult r =
          s.generate(PROMPT, greedy(32).toBuilder().stop("Lily").build());
      assertEquals(StopReason.STOP_STRING, r.stopReason());
      assertTrue(cliText().startsWith(r.text()) || r.text().contains("Lily"), r.text());
    }
  }

  @Test
  void logitsArgmaxIsTheFirstGreedyToken() {
    try (Session s = model.newSession()) {
      int[] ids = model.tokenize(PROMPT, false);
      float[] logits = s.logits(ids);
      assertEquals(model.vocabSize(), logits.length);
      int best = 0;
      for (int i = 1; i < logits.length; i++) {
        if (logits[i] > logits[best]) best = i;
      }
      assertArrayEquals(logits, s.logits(ids), 0f);
      GenerateResult first = s.generate(PROMPT, greedy(1));
      assertEquals(model.detokenize(new int[] {best}), first.text());
      TestSupport.assumeCli();
      assertEquals(((Double) asList(cliRun.get("tokens")).get(0)).intValue(), best);
      PocketException e =
          assertThrows(PocketException.class, () -> s.logits(new int[] {ids[0], 512}));
      assertEquals(Status.INVALID_ARGUMENT, e.status());
      assertEquals(Status.INVALID_ARGUMENT,
          assertThrows(PocketException.class, () -> s.logits(new int[0])).status());
    }
  }

  @Test
  void choicesConstrainTheOutput() {
    List<String> choices = Arrays.asList(" happy", " sad", " big dog");
    try (Session s = model.newSession()) {
      for (float temperature : new float[] {0f, 1f}) {
        GenerateResult r = s.generate(PROMPT, GenerateOptions.builder()
            .choices(choices).temperature(temperature).seed(7).maxTokens(16).build());
        assertTrue(choices.contains(r.text()), "'" + r.text() + "' is no choice");
      }
    }
  }

  @Test
  void jsonSchemaConstrainsTheOutput() {
    String schema = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\","
        + "\"maxLength\":12}},\"required\":[\"name\"],\"additionalProperties\":false}";
    try (Session s = model.newSession()) {
      GenerateResult r = s.generate(PROMPT,
          GenerateOptions.builder().jsonSchema(schema).temperature(0).maxTokens(48).build());
      assertTrue(r.text().startsWith("{"), r.text());
      Map<String, Object> answer = asObject(TestSupport.parseJson(r.text()));
      assertTrue(answer.get("name") instanceof String, r.text());
      assertTrue(r.constraintMs() > 0);
    }
  }

  @Test
  void invalidConstraintsAreInvalidArgument() {
    try (Session s = model.newSession()) {
      for (GenerateOptions bad : new GenerateOptions[] {
               GenerateOptions.builder().jsonSchema("{\"type\":").build(),
               GenerateOptions.builder().jsonSchema("").build(),
               GenerateOptions.builder().regex("a").grammar("root ::= \"a\"").build(),
               GenerateOptions.builder().choices(" yes", " ").build()}) {
        PocketException e = assertThrows(PocketException.class, () -> s.generate(PROMPT, bad));
        assertEquals(Status.INVALID_ARGUMENT, e.status(), e.getMessage());
      }
      PocketException e = assertThrows(PocketException.class,
          () -> s.generate(PROMPT, GenerateOptions.builder().jsonSchema("{\"type\":").build()));
      assertTrue(e.pocketMessage().contains("JSON"), e.pocketMessage());
      assertEquals(cliText(), s.generate(PROMPT, greedy(32)).text());
    }
  }

  @Test
  void tokensRoundTripUtf8OutsideTheBmp() {
    String text = "Once upon a time: ü, 世界, 😀 and 𝄞";
    int[] ids = model.tokenize(text, false);
    String back = model.detokenize(ids);
    // SentencePiece adds its leading space.
    assertTrue(back.equals(text) || back.equals(" " + text), back);
    // The emoji is in no vocabulary of 512 tokens: byte fallback, whole again in the text.
    assertTrue(ids.length > text.length() / 2);
    assertTrue(model.detokenize(new int[0]).isEmpty());
    assertEquals(Status.INVALID_ARGUMENT,
        assertThrows(PocketException.class, () -> model.detokenize(new int[] {1, 512})).status());
    try (Session s = model.newSession()) {
      GenerateResult r = s.generate(text + " 😀", greedy(8), piece -> true);
      assertEquals(8, r.generatedTokens());
    }
  }

  @Test
  void saveAndLoadRoundTrip(@TempDir Path dir) throws Exception {
    String path = dir.resolve("chat-😀.session").toString();
    byte[] state = "turn 1: é".getBytes(StandardCharsets.UTF_8);
    try (Session a = model.newSession(); Session b = model.newSession()) {
      String first = a.generate(PROMPT, greedy(16)).text();
      a.save(path, state);
      assertArrayEquals(state, b.load(path));
      String next = PROMPT + first + ". The end";
      GenerateResult ra = a.generate(next, greedy(16));
      GenerateResult rb = b.generate(next, greedy(16));
      assertEquals(ra.text(), rb.text());
      assertEquals(ra.promptTokens(), rb.promptTokens(), "the loaded context was not reused");
      assertTrue(rb.promptTokens() < model.tokenize(next, false).length);
      a.save(path);
      assertEquals(0, b.load(path).length);
      // A damaged file is data loss, named; the session is unchanged.
      byte[] bytes = Files.readAllBytes(dir.resolve("chat-😀.session"));
      bytes[bytes.length - 8] ^= 0x5a;
      Files.write(dir.resolve("chat-😀.session"), bytes);
      PocketException e = assertThrows(PocketException.class, () -> b.load(path));
      assertEquals(Status.DATA_LOSS, e.status());
      assertTrue(e.pocketMessage().contains(path), e.pocketMessage());
      PocketException missing =
          assertThrows(PocketException.class, () -> b.load(new File(dir.toFile(), "no").getPath()));
      assertEquals(Status.NOT_FOUND, missing.status());
    }
  }
}
