package ai.pocket;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/** Paths of the test fixtures and the pocket CLI, a process runner and a small JSON reader. */
final class TestSupport {
  private TestSupport() {}

  static final String PROMPT = "Once upon a time";

  static File root() {
    String r = setting("pocket.root", "POCKET_ROOT");
    return new File(r != null ? r : "../..").getAbsoluteFile();
  }

  private static String setting(String property, String env) {
    String v = System.getProperty(property);
    if (v == null || v.isEmpty()) v = System.getenv(env);
    return v == null || v.isEmpty() ? null : v;
  }

  /** The stories260K directory: POCKET_TESTDATA (its testdata dir, or stories260K itself). */
  static File stories() {
    String d = setting("pocket.testdata", "POCKET_TESTDATA");
    File base = d != null ? new File(d) : new File(root(), "../shared/testdata");
    for (File f : new File[] {new File(base, "stories260K"), base,
             new File(base, "testdata/stories260K")}) {
      if (new File(f, "stories260K.bin").isFile()) return f.getAbsoluteFile();
    }
    throw new IllegalStateException("stories260K.bin not found under " + base.getAbsolutePath()
        + " (set -Dpocket.testdata or POCKET_TESTDATA)");
  }

  static String modelPath() {
    return new File(stories(), "stories260K.bin").getPath();
  }

  static String tokenizerPath() {
    return new File(stories(), "tok512.bin").getPath();
  }

  static Model loadStories() {
    return Model.load(modelPath(), tokenizerPath());
  }

  static File cli() {
    String c = setting("pocket.cli", "POCKET_CLI");
    return c != null ? new File(c) : new File(root(), "build/bin/pocket");
  }

  /** Skips the calling test when the CLI is absent (an installed libpocket without it). */
  static void assumeCli() {
    assumeTrue(cli().canExecute(), "no pocket CLI at " + cli() + " (-Dpocket.cli)");
  }

  /** Runs the CLI with args; returns its stdout, failing on a non-zero exit. */
  static String runCli(String... args) throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>();
    cmd.add(cli().getPath());
    cmd.addAll(Arrays.asList(args));
    ProcessBuilder pb = new ProcessBuilder(cmd);
    pb.redirectError(ProcessBuilder.Redirect.INHERIT);
    Process p = pb.start();
    p.getOutputStream().close();
    String out = readAll(p.getInputStream());
    if (!p.waitFor(60, TimeUnit.SECONDS)) {
      p.destroyForcibly();
      throw new IOException("timed out: " + cmd);
    }
    if (p.exitValue() != 0) throw new IOException("exit " + p.exitValue() + ": " + cmd);
    return out;
  }

  private static String readAll(InputStream in) throws IOException {
    ByteArrayOutputStream buf = new ByteArrayOutputStream();
    byte[] chunk = new byte[8192];
    for (int n; (n = in.read(chunk)) > 0;) buf.write(chunk, 0, n);
    return new String(buf.toByteArray(), StandardCharsets.UTF_8);
  }

  static GenerateOptions greedy(int maxTokens) {
    return GenerateOptions.builder().temperature(0).maxTokens(maxTokens).build();
  }

  /** Resident memory of this process in kB (Linux). */
  static long rssKb() throws IOException {
    for (String line : java.nio.file.Files.readAllLines(new File("/proc/self/status").toPath())) {
      if (line.startsWith("VmRSS:")) {
        return Long.parseLong(line.replaceAll("[^0-9]", ""));
      }
    }
    throw new IOException("no VmRSS in /proc/self/status");
  }

  // ---- JSON: objects as LinkedHashMap, arrays as List, numbers as Double ----

  static Object parseJson(String text) {
    Json j = new Json(text);
    j.ws();
    Object v = j.value();
    j.ws();
    if (j.pos != text.length()) throw j.error("trailing characters");
    return v;
  }

  private static final class Json {
    final String s;
    int pos;

    Json(String s) {
      this.s = s;
    }

    IllegalArgumentException error(String what) {
      return new IllegalArgumentException("JSON: " + what + " at " + pos + " in " + s);
    }

    void ws() {
      while (pos < s.length() && " \t\r\n".indexOf(s.charAt(pos)) >= 0) pos++;
    }

    void expect(char c) {
      if (pos >= s.length() || s.charAt(pos) != c) throw error("expected '" + c + "'");
      pos++;
    }

    Object value() {
      if (pos >= s.length()) throw error("unexpected end");
      char c = s.charAt(pos);
      if (c == '{') return object();
      if (c == '[') return array();
      if (c == '"') return string();
      for (String word : new String[] {"true", "false", "null"}) {
        if (s.startsWith(word, pos)) {
          pos += word.length();
          return word.equals("null") ? null : Boolean.valueOf(word);
        }
      }
      int start = pos;
      while (pos < s.length() && "+-0123456789.eE".indexOf(s.charAt(pos)) >= 0) pos++;
      if (start == pos) throw error("unexpected '" + c + "'");
      return Double.valueOf(s.substring(start, pos));
    }

    Map<String, Object> object() {
      Map<String, Object> m = new LinkedHashMap<>();
      expect('{');
      ws();
      if (pos < s.length() && s.charAt(pos) == '}') {
        pos++;
        return m;
      }
      while (true) {
        ws();
        String key = string();
        ws();
        expect(':');
        ws();
        m.put(key, value());
        ws();
        if (pos < s.length() && s.charAt(pos) == ',') {
          pos++;
          continue;
        }
        expect('}');
        return m;
      }
    }

    List<Object> array() {
      List<Object> list = new ArrayList<>();
      expect('[');
      ws();
      if (pos < s.length() && s.charAt(pos) == ']') {
        pos++;
        return list;
      }
      while (true) {
        ws();
        list.add(value());
        ws();
        if (pos < s.length() && s.charAt(pos) == ',') {
          pos++;
          continue;
        }
        expect(']');
        return list;
      }
    }

    String string() {
      expect('"');
      StringBuilder b = new StringBuilder();
      while (true) {
        if (pos >= s.length()) throw error("unterminated string");
        char c = s.charAt(pos++);
        if (c == '"') return b.toString();
        if (c != '\\') {
          b.append(c);
          continue;
        }
        char e = s.charAt(pos++);
        switch (e) {
          case 'n': b.append('\n'); break;
          case 't': b.append('\t'); break;
          case 'r': b.append('\r'); break;
          case 'b': b.append('\b'); break;
          case 'f': b.append('\f'); break;
          case 'u':
            b.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
            pos += 4;
            break;
          default: b.append(e);
        }
      }
    }
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> asObject(Object o) {
    return (Map<String, Object>) o;
  }

  @SuppressWarnings("unchecked")
  static List<Object> asList(Object o) {
    return (List<Object>) o;
  }
}
