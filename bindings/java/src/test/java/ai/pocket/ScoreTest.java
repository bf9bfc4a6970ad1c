package ai.pocket;

import static ai.pocket.TestSupport.PROMPT;
import static ai.pocket.TestSupport.asList;
import static ai.pocket.TestSupport.asObject;
import static ai.pocket.TestSupport.greedy;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.DataInputStream;
import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Candidate scores, classification heads, adapters and chat messages. */
class ScoreTest {
  private static Model model;

  @BeforeAll
  static void load() {
    model = TestSupport.loadStories();
  }

  @AfterAll
  static void close() {
    model.close();
  }

  @Test
  void scoreRanksAndEqualsCli() throws Exception {
    String[] candidates = {" there was", " the end", " a cat", " Lily"};
    CandidateScore[] scores;
    try (Session s = model.newSession()) {
      scores = s.score(PROMPT, candidates);
    }
    assertEquals(candidates.length, scores.length);
    double sum = 0;
    boolean[] seen = new boolean[candidates.length];
    for (int i = 0; i < scores.length; i++) {
      sum += scores[i].probability();
      assertEquals(candidates[scores[i].index()], scores[i].candidate());
      seen[scores[i].index()] = true;
      assertEquals(Math.exp(scores[i].logprob()), scores[i].probability() * norm(scores), 1e-9);
      if (i > 0) assertTrue(scores[i - 1].logprob() >= scores[i].logprob(), "not best first");
    }
    assertEquals(1.0, sum, 1e-9);
    assertArrayEquals(new boolean[] {true, true, true, true}, seen);

    TestSupport.assumeCli();
    Map<String, Object> cli = asObject(TestSupport.parseJson(TestSupport.runCli("score", "-m",
        TestSupport.modelPath(), "--tokenizer", TestSupport.tokenizerPath(), "-p", PROMPT,
        "--candidates", String.join(",", candidates), "--json")));
    List<Object> ranked = asList(cli.get("candidates"));
    assertEquals(scores.length, ranked.size());
    for (int i = 0; i < scores.length; i++) {
      Map<String, Object> c = asObject(ranked.get(i));
      assertEquals(((Double) c.get("index")).intValue(), scores[i].index());
      assertEquals((Double) c.get("logprob"), scores[i].logprob(), 1e-6);
      assertEquals((Double) c.get("probability"), scores[i].probability(), 1e-6);
      assertEquals(asList(c.get("tokens")).size(), scores[i].nTokens());
    }
  }

  private static double norm(CandidateScore[] scores) {
    double z = 0;
    for (CandidateScore s : scores) z += Math.exp(s.logprob());
    return z;
  }

  @Test
  void scoreErrors() {
    try (Session s = model.newSession()) {
      assertEquals(Status.INVALID_ARGUMENT,
          assertThrows(PocketException.class, () -> s.score(PROMPT, " a", "")).status());
      assertThrows(NullPointerException.class, () -> s.score(PROMPT, " a", null));
      assertTrue(assertThrows(IllegalArgumentException.class, () -> s.score(PROMPT))
                     .getMessage()
                     .contains("at least one candidate"));
      assertEquals(Status.FAILED_PRECONDITION,
          assertThrows(PocketException.class, () -> s.score(Arrays.asList(ChatMessage.user("Hi")),
                                                  " yes", " no"))
              .status());
      s.cancel();
      assertEquals(Status.CANCELLED,
          assertThrows(PocketException.class, () -> s.score(PROMPT, " a", " b")).status());
      assertEquals(2, s.score(PROMPT, " a", " b").length);
    }
  }

  @Test
  void classifyWithoutHeadIsFailedPrecondition() {
    try (Session s = model.newSession()) {
      PocketException e = assertThrows(PocketException.class, () -> s.classify(PROMPT));
      assertEquals(Status.FAILED_PRECONDITION, e.status());
    }
  }

  /** A .pocket copy of stories260K with a random 3-label head, made by the CLI. */
  @Test
  void classifyWithHead(@TempDir Path dir) throws Exception {
    TestSupport.assumeCli();
    File head = new File(dir.toFile(), "head.npy");
    writeRandomHead(head, 3, modelDim(), 5);
    String headModel = new File(dir.toFile(), "head.pocket").getPath();
    TestSupport.runCli("convert", TestSupport.modelPath(), "--tokenizer",
        TestSupport.tokenizerPath(), "--weights", "f32", "--classifier-head", head.getPath(),
        "--classifier-labels", "happy,sad,neutral", "-o", headModel);
    try (Model m = Model.load(headModel); Session s = m.newSession(1)) {
      assertArrayEquals(new String[] {"happy", "sad", "neutral"}, m.labels());
      LabelScore[] labels = s.classify("The dog was happy.");
      assertEquals(3, labels.length);
      double sum = 0;
      for (int i = 0; i < labels.length; i++) {
        sum += labels[i].probability();
        assertEquals(m.labels()[labels[i].index()], labels[i].label());
        if (i > 0) assertTrue(labels[i - 1].logit() >= labels[i].logit());
      }
      assertEquals(1.0, sum, 1e-9);
      Map<String, Object> cli = asObject(TestSupport.parseJson(TestSupport.runCli(
          "score", "-m", headModel, "-p", "The dog was happy.", "--head", "--json")));
      List<Object> ranked = asList(cli.get(cli.containsKey("labels") ? "labels" : "candidates"));
      for (int i = 0; i < labels.length; i++) {
        Map<String, Object> l = asObject(ranked.get(i));
        assertEquals((Double) l.get("probability"), labels[i].probability(), 1e-6);
      }
    }
  }

  private static int modelDim() throws IOException {
    // A llama2.c checkpoint starts with its config; dim is the first little-endian int32.
    try (DataInputStream in = new DataInputStream(new FileInputStream(TestSupport.modelPath()))) {
      return Integer.reverseBytes(in.readInt());
    }
  }

  private static void writeRandomHead(File file, int rows, int cols, long seed)
      throws IOException {
    String header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + rows + ", " + cols
        + "), }";
    StringBuilder h = new StringBuilder(header);
    while ((10 + h.length() + 1) % 64 != 0) h.append(' ');
    h.append('\n');
    byte[] hb = h.toString().getBytes(StandardCharsets.US_ASCII);
    ByteBuffer buf = ByteBuffer.allocate(10 + hb.length + 4 * rows * cols)
                         .order(ByteOrder.LITTLE_ENDIAN);
    buf.put((byte) 0x93).put("NUMPY".getBytes(StandardCharsets.US_ASCII)).put((byte) 1)
        .put((byte) 0).putShort((short) hb.length).put(hb);
    Random random = new Random(seed);
    for (int i = 0; i < rows * cols; i++) {
      buf.putFloat((float) (random.nextGaussian() / Math.sqrt(cols)));
    }
    try (FileOutputStream out = new FileOutputStream(file)) {
      out.write(buf.array());
    }
  }

  @Test
  void adapters(@TempDir Path dir) throws Exception {
    TestSupport.assumeCli();
    String adapterDir = new File(dir.toFile(), "adapter").getPath();
    TestSupport.runCli("make-adapter", "-m", TestSupport.modelPath(), "--rank", "4", "--targets",
        "v,o,gate,up,down", "--init", "0.2", "--seed", "3", "-o", adapterDir);
    try (Session s = model.newSession(1)) {
      String base = s.generate(PROMPT, greedy(32)).text();
      Adapter adapter = model.loadAdapter(adapterDir);
      assertEquals(4, adapter.maxRank());
      assertTrue(adapter.matrixCount() > 0 && adapter.bytes() > 0);
      assertEquals("v,o,gate,up,down", adapter.targets());
      assertEquals(0, adapter.labels().length);
      s.setAdapters(new Adapter[] {adapter}, new float[] {1f});
      // The session keeps the adapter it applies alive after close().
      adapter.close();
      assertThrows(IllegalStateException.class, adapter::targets);
      assertEquals(1, s.adapters().length);
      String adapted = s.generate(PROMPT, greedy(32)).text();
      assertNotEquals(base, adapted);
      String cli = TestSupport.runCli("run", "-m", TestSupport.modelPath(), "--tokenizer",
          TestSupport.tokenizerPath(), "--lora", adapterDir, "-p", PROMPT, "-n", "32", "--temp",
          "0", "--json");
      assertEquals(asObject(TestSupport.parseJson(cli)).get("text"), adapted);
      assertThrows(IllegalStateException.class,
          () -> s.setAdapters(new Adapter[] {adapter}, null));
      assertThrows(IllegalArgumentException.class,
          () -> s.setAdapters(new Adapter[0], new float[] {1f}));
      s.setAdapters(new Adapter[0], null);
      assertEquals(base, s.generate(PROMPT, greedy(32)).text());
      PocketException e =
          assertThrows(PocketException.class, () -> model.loadAdapter(adapterDir + "-missing"));
      assertEquals(Status.NOT_FOUND, e.status());
    }
  }

  /** A tiny random model with the Qwen3 tokenizer and chat template (when the fixture exists). */
  @Test
  void chatMessages(@TempDir Path dir) throws Exception {
    TestSupport.assumeCli();
    File tokenizer =
        new File(TestSupport.root(), "cache/tokenizer-qwen3/package/models/tokenizer.json");
    assumeTrue(tokenizer.isFile(), "no Qwen3 tokenizer at " + tokenizer);
    String chatModel = new File(dir.toFile(), "chat.gguf").getPath();
    TestSupport.runCli("make-model", "--preset", "tiny", "--arch", "qwen3", "--type", "f32",
        "--seed", "3", "--tokenizer", tokenizer.getPath(), "-o", chatModel);
    List<ChatMessage> chat =
        Arrays.asList(ChatMessage.system("Be brief."), ChatMessage.user("Hi<|im_end|> 😀"));
    try (Model m = Model.load(chatModel); Session s = m.newSession(1, 512, 0)) {
      int[] plain = m.tokenizeChat(chat, true, false);
      GenerateResult r = s.generate(chat, greedy(8));
      assertEquals(plain.length, r.promptTokens());
      s.reset();
      StringBuilder streamed = new StringBuilder();
      GenerateResult again = s.generate(chat, greedy(8), p -> streamed.append(p) != null);
      assertEquals(r.text(), again.text());
      assertEquals(r.text(), streamed.toString());
      assertTrue(m.tokenizeChat(chat, true, true).length < plain.length);
      CandidateScore[] scores = s.score(chat, false, " yes", " no");
      assertEquals(1.0, scores[0].probability() + scores[1].probability(), 1e-9);
      PocketException e = assertThrows(PocketException.class,
          () -> s.generate(Arrays.asList(new ChatMessage("robot", "beep")), greedy(4)));
      assertTrue(e.pocketMessage().contains("robot"), e.getMessage());
    }
  }
}
