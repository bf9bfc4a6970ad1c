package ai.pocket;

/** One turn of a conversation, formatted with the model's chat template. */
public final class ChatMessage {
  private final String role;
  private final String content;

  /**
   * @param role "system", "user" or "assistant" (pocket checks it)
   * @param content the turn's text
   */
  public ChatMessage(String role, String content) {
    this.role = Utf8.requireNonNull(role, "role");
    this.content = Utf8.requireNonNull(content, "content");
  }

  public static ChatMessage system(String content) {
    return new ChatMessage("system", content);
  }

  public static ChatMessage user(String content) {
    return new ChatMessage("user", content);
  }

  public static ChatMessage assistant(String content) {
    return new ChatMessage("assistant", content);
  }

  public String role() {
    return role;
  }

  public String content() {
    return content;
  }

  @Override
  public String toString() {
    return role + ": " + content;
  }
}
