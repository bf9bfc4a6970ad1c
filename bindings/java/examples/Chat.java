import ai.pocket.ChatMessage;
import ai.pocket.GenerateOptions;
import ai.pocket.GenerateResult;
import ai.pocket.Model;
import ai.pocket.Session;
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/** Chats (one user turn per line of stdin, streamed replies), then asks for a JSON answer.
 *  java -cp pocket.jar:. -Dpocket.jni.library=libpocket_jni.so Chat MODEL [CHAT_TOKENS [JSON_TOKENS]] */
public class Chat {
  public static void main(String[] args) throws IOException {
    PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8");
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    GenerateOptions chatOptions = GenerateOptions.builder().enableThinking(false)
        .maxTokens(args.length > 1 ? Integer.parseInt(args[1]) : 256).build();
    try (Model model = Model.load(args[0]); Session session = model.newSession()) {
      List<ChatMessage> chat = new ArrayList<>();
      for (String line; (line = in.readLine()) != null && !line.isEmpty(); ) {
        chat.add(ChatMessage.user(line));
        out.print("assistant: ");
        GenerateResult reply = session.generate(chat, chatOptions, piece -> {
          out.print(piece);
          return true; // false would stop the reply here
        });
        out.printf("%n[%d tokens, %s]%n", reply.generatedTokens(), reply.stopReason());
        chat.add(ChatMessage.assistant(reply.text()));
      }
      String schema = "{\"type\":\"object\",\"properties\":{\"mood\":{\"enum\":[\"happy\",\"sad\"]},"
          + "\"topic\":{\"type\":\"string\",\"maxLength\":16}},\"required\":[\"mood\",\"topic\"],"
          + "\"additionalProperties\":false}";
      chat.add(ChatMessage.user("Describe this chat as JSON: its mood and its topic."));
      GenerateResult json = session.generate(chat, chatOptions.toBuilder().jsonSchema(schema)
          .maxTokens(args.length > 2 ? Integer.parseInt(args[2]) : 256).build());
      out.println("json: " + json.text());
    }
  }
}
