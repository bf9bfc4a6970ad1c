package ai.pocket;

import java.nio.charset.StandardCharsets;
import java.util.List;

// Strings cross JNI as UTF-8 byte arrays made here: JNI's own string functions speak modified
// UTF-8, which encodes characters outside the BMP as surrogate pairs that pocket would reject.
final class Utf8 {
  private Utf8() {}

  static <T> T requireNonNull(T value, String name) {
    if (value == null) throw new NullPointerException(name + " must not be null");
    return value;
  }

  /** Length-delimited text (may hold NUL). */
  static byte[] bytes(String s, String name) {
    return requireNonNull(s, name).getBytes(StandardCharsets.UTF_8);
  }

  /**
   * Text pocket reads as a NUL-terminated C string: an embedded NUL would silently cut it short
   * (a stop string, a schema), so it is refused.
   */
  static byte[] cString(String s, String name) {
    if (requireNonNull(s, name).indexOf('\0') >= 0) {
      throw new IllegalArgumentException(name + " contains a NUL character");
    }
    return s.getBytes(StandardCharsets.UTF_8);
  }

  /** As cString, with null passed on as "none". */
  static byte[] optionalCString(String s, String name) {
    return s == null ? null : cString(s, name);
  }

  static byte[][] cStrings(List<String> list, String name) {
    byte[][] out = new byte[list.size()][];
    for (int i = 0; i < out.length; i++) out[i] = cString(list.get(i), name + "[" + i + "]");
    return out;
  }

  static byte[][] cStrings(String[] array, String name) {
    requireNonNull(array, name);
    byte[][] out = new byte[array.length][];
    for (int i = 0; i < out.length; i++) out[i] = cString(array[i], name + "[" + i + "]");
    return out;
  }

  static String string(byte[] utf8) {
    return utf8 == null ? null : new String(utf8, StandardCharsets.UTF_8);
  }

  /** Roles and contents of a conversation, as two parallel arrays. */
  static byte[][][] messages(List<ChatMessage> messages) {
    requireNonNull(messages, "messages");
    byte[][] roles = new byte[messages.size()][];
    byte[][] contents = new byte[messages.size()][];
    for (int i = 0; i < roles.length; i++) {
      ChatMessage m = requireNonNull(messages.get(i), "messages[" + i + "]");
      roles[i] = cString(m.role(), "messages[" + i + "].role");
      contents[i] = cString(m.content(), "messages[" + i + "].content");
    }
    return new byte[][][] {roles, contents};
  }
}
