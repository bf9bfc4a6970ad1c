// pocket chat: an interactive multi-turn conversation that keeps the KV cache between turns.
// Ctrl-C stops the reply being generated and the conversation goes on; Ctrl-C at the prompt
// exits. When the history outgrows the context, the oldest turns (never the system message) are
// dropped with a one-line notice; so are those of a --session resumed with a smaller context.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/mapped_file.h"
#include "common.h"
#include "generation.h"
#include "interrupt.h"
#include "model/dflash.h"

namespace pocket::cli {
namespace {

// Tokens of the formatted conversation (as Generate will encode it).
StatusOr<size_t> CountTokens(const Tokenizer& tok, const std::string& text) {
  EncodeOptions eo;
  eo.add_bos = tok.spec().add_bos;
  POCKET_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(text, eo));
  return ids.size();
}

// Drops the oldest turns after the first `n_fixed` messages (the system message) until the
// formatted conversation leaves `reserve` tokens of the context for the reply, keeping at least
// the last (user) message. Returns the formatted text; *n_dropped counts the messages dropped.
StatusOr<std::string> FitContext(const ChatTemplate& tmpl, const ChatOptions& co,
                                 const Tokenizer& tok, size_t n_fixed, size_t n_ctx, size_t reserve,
                                 std::vector<ChatMessage>* messages, size_t* n_dropped) {
  *n_dropped = 0;
  while (true) {
    POCKET_ASSIGN_OR_RETURN(std::string text, tmpl.Apply(*messages, co));
    POCKET_ASSIGN_OR_RETURN(size_t n_tokens, CountTokens(tok, text));
    if (n_tokens + reserve <= n_ctx) return text;
    if (messages->size() <= n_fixed + 1) {
      // Only the new message is left: it may still fit, with less room for the reply.
      if (n_tokens < n_ctx) return text;
      return OutOfRangeError("the message is ", n_tokens,
                             " tokens with the chat template, the "
                             "context holds ",
                             n_ctx, " (give a larger -c)");
    }
    // One turn: a user message and the assistant's reply after it.
    size_t n = 1;
    if (messages->size() > n_fixed + 2 && (*messages)[n_fixed + 1].role == "assistant") n = 2;
    messages->erase(messages->begin() + static_cast<ptrdiff_t>(n_fixed),
                    messages->begin() + static_cast<ptrdiff_t>(n_fixed + n));
    *n_dropped += n;
  }
}

// The /lora command: "/lora" shows the set in use, "/lora off" drops it, "/lora A[:S] B[:S] ..."
// makes those adapters the set. Each file is loaded once per chat (loaded, by path) and shared
// afterwards; the session's KV cache is invalidated only when the set changes (SetAdapters).
Status SwitchAdapters(std::string_view args, const Model& model, Session& s,
                      std::map<std::string, std::shared_ptr<const LoraAdapter>>* loaded) {
  std::vector<std::string> words;
  std::string word;
  for (char ch : args) {
    if (ch == ' ' || ch == '\t') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word.push_back(ch);
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  if (words.empty()) {
    const std::string name = AdapterSetName(s.adapters());
    std::fprintf(stderr, "pocket: adapters: %s\n", name.empty() ? "none" : name.c_str());
    return Status::Ok();
  }
  AdapterSet set;
  if (!(words.size() == 1 && words[0] == "off")) {
    for (const std::string& arg : words) {
      std::string path;
      float scale = 1.0f;
      POCKET_RETURN_IF_ERROR(ParseAdapterArg(arg, &path, &scale));
      auto it = loaded->find(path);
      if (it == loaded->end()) {
        POCKET_ASSIGN_OR_RETURN(std::shared_ptr<const LoraAdapter> a,
                                LoraAdapter::Load(path, model));
        it = loaded->emplace(path, std::move(a)).first;
      }
      set.push_back({it->second, scale});
    }
  }
  POCKET_RETURN_IF_ERROR(s.SetAdapters(std::move(set)));
  const std::string name = AdapterSetName(s.adapters());
  std::fprintf(stderr, "pocket: adapters: %s\n", name.empty() ? "none" : name.c_str());
  return Status::Ok();
}

// The chat's messages as a session file's user data (--session), and back.
std::string MessagesJson(const std::vector<ChatMessage>& messages) {
  nlohmann::json j = nlohmann::json::array();
  for (const ChatMessage& m : messages) j.push_back({{"role", m.role}, {"content", m.content}});
  return nlohmann::json{{"pocket_chat", 1}, {"messages", j}}.dump();
}
Status ParseMessages(const std::string& path, const std::string& text,
                     std::vector<ChatMessage>* messages) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array()) {
    return InvalidArgumentError(path,
                                ": not a pocket chat session (its user data holds no "
                                "\"messages\" array)");
  }
  messages->clear();
  for (const nlohmann::json& m : j["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      return InvalidArgumentError(path, ": message ", messages->size(),
                                  " has no string role and content");
    }
    messages->push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return Status::Ok();
}

}  // namespace

Command AddChatCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "chat",
      "interactive multi-turn chat (/reset clears the conversation, /lora A[:SCALE] ... switches "
      "adapters for the next turns, /lora off drops them, /lora shows them; /exit or EOF ends; "
      "Ctrl-C stops a reply, Ctrl-C at the prompt exits)");
  auto flags = std::make_shared<GenerationFlags>();
  flags->Register(app);
  auto session_path = std::make_shared<std::string>();
  app->add_option("--session", *session_path,
                  "resume the conversation saved in FILE when it exists, and save it there after "
                  "every reply (its messages and the model's keys and values: the next run "
                  "continues without evaluating the history again; the same model, --kv-type "
                  "and adapters are required; with a smaller -c the oldest turns are dropped)");
  SetExamples(app, {"pocket chat -m model.pocket --session chat.session",
                    "pocket chat -m model.gguf --system \"Answer briefly.\" --no-think",
                    "pocket chat -m model.pocket --lora task.pocket   (then /lora other.pocket "
                    "or /lora off between turns)"});
  return {
      app, [=]() -> int {
        auto options = flags->Options();
        if (!options.ok()) return ReportUsageError(options.status().message());
        auto request = flags->Request();
        if (!request.ok()) return ReportUsageError(request.status().message());
        auto so = flags->engine.Session();
        if (!so.ok()) return ReportUsageError(so.status().message());
        // Ctrl-C: stop the reply being generated; while loading or at the prompt, exit. Made
        // before any thread (the pool's threads inherit its blocked SIGINT).
        InterruptWatcher watcher;
        // One pool for the session and a draft model's session (they run in turn).
        auto pool = MakeThreadPool(so->n_threads);
        if (!pool.ok()) return ReportUsageError(pool.status().message());
        so->pool = *pool;
        auto model = LoadModel(flags->model, flags->engine);
        if (!model.ok()) return ReportError(model.status());
        auto tmpl = ModelTemplate(**model);
        if (!tmpl.ok()) return ReportError(tmpl.status());
        // No --spec: auto when the package holds a block drafter (it pays or is left idle).
        if (request->spec.empty() && HasPackagedDrafter(**model)) {
          request->spec = "auto";
          options->spec_auto = true;
        }
        // --spec: the drafter lives as long as the chat (options point to it).
        auto drafter = MakeDrafter(*request, **model, *so);
        if (!drafter.ok()) return ReportError(drafter.status());
        options->drafter = drafter->get();
        auto session = Session::Create(*model, *so);
        if (!session.ok()) return ReportError(session.status());
        Session& s = **session;
        if (Status a = ApplyAdapters(s, **model, flags->engine); !a.ok()) return ReportError(a);
        // Adapters loaded so far (--lora, then /lora), by path: a switch back reuses them.
        std::map<std::string, std::shared_ptr<const LoraAdapter>> loaded;
        for (const AdapterUse& u : s.adapters()) loaded.emplace(u.adapter->path(), u.adapter);
        const Tokenizer& tok = *(*model)->tokenizer();
        std::vector<ChatMessage> messages;
        if (!flags->system.empty()) messages.push_back({"system", flags->system});
        // Where the session goes must be writable before the first turn, not found out after it.
        if (!session_path->empty() && !FileExists(*session_path)) {
          if (Status st = CheckOutputPath("--session", *session_path); !st.ok()) {
            return ReportError(st);
          }
        }
        if (!session_path->empty() && FileExists(*session_path)) {
          // The saved conversation: its messages (a --system of this run is not used) and the
          // keys and values of its tokens.
          auto saved = s.Load(*session_path);
          // A context smaller than the saved one (OutOfRange, once the file has matched the
          // model, its KV type and adapters): the messages alone, the oldest turns dropped before
          // the next reply as when a chat outgrows its context, the rest evaluated again.
          int64_t saved_tokens = -1;
          if (!saved.ok() && saved.status().code() == StatusCode::kOutOfRange) {
            auto file = DescribeSessionFile(*session_path);
            if (!file.ok()) return ReportError(file.status());
            saved_tokens = file->n_tokens;
            saved = std::move(file->user_data);
          }
          if (!saved.ok()) return ReportError(saved.status());
          if (Status p = ParseMessages(*session_path, *saved, &messages); !p.ok()) {
            return ReportError(p);
          }
          if (saved_tokens >= 0) {
            std::fprintf(stderr,
                         "pocket: resumed %s: %zu messages; their %lld tokens do not fit the "
                         "context of %d (-c), so the oldest turns are dropped before the next "
                         "reply (never the system message) and the rest evaluated again\n",
                         session_path->c_str(), messages.size(),
                         static_cast<long long>(saved_tokens), s.n_ctx());
          } else {
            std::fprintf(stderr, "pocket: resumed %s: %zu messages, %zu tokens in the context\n",
                         session_path->c_str(), messages.size(), s.history().size());
          }
          // The saved conversation keeps its own system message: say so when --system differs.
          const std::string saved_system =
              !messages.empty() && messages[0].role == "system" ? messages[0].content : "";
          if (!flags->system.empty() && flags->system != saved_system) {
            std::fprintf(stderr,
                         "pocket: warning: --system is not used: the resumed conversation keeps "
                         "%s (start a new --session to change it)\n",
                         saved_system.empty() ? "no system message" : "its own system message");
          }
        }
        // A save that fails is reported at once and makes the exit status 1.
        bool save_failed = false;
        auto save = [&] {
          if (session_path->empty()) return;
          if (Status st = s.Save(*session_path, MessagesJson(messages)); !st.ok()) {
            ReportError(st);
            save_failed = true;
          }
        };
        const size_t n_fixed = !messages.empty() && messages[0].role == "system" ? 1 : 0;
        ChatOptions co;
        co.enable_thinking = !flags->no_think;
        const size_t n_ctx = static_cast<size_t>(s.n_ctx());
        // Room kept for the reply when old turns are dropped.
        const size_t reserve = flags->n_predict < 0
                                   ? n_ctx / 4
                                   : std::min(static_cast<size_t>(flags->n_predict), n_ctx / 2);
        std::string line;
        while (true) {
          std::fprintf(stderr, "> ");
          if (!std::getline(std::cin, line) || line == "/exit") break;
          if (line == "/reset") {
            messages.resize(n_fixed);
            s.Reset();
            save();
            std::fprintf(stderr, "pocket: conversation cleared%s\n",
                         n_fixed > 0 ? " (the system message stays)" : "");
            continue;
          }
          if (line == "/lora" || line.rfind("/lora ", 0) == 0) {
            // A switch that fails (a missing file, an adapter for another base) keeps the set.
            if (Status a = SwitchAdapters(std::string_view(line).substr(5), **model, s, &loaded);
                !a.ok()) {
              ReportError(a);
            }
            continue;
          }
          if (line.empty()) continue;
          messages.push_back({"user", line});
          size_t n_dropped = 0;
          auto formatted =
              FitContext(*tmpl, co, tok, n_fixed, n_ctx, reserve, &messages, &n_dropped);
          if (!formatted.ok()) {
            // This message cannot be answered; the conversation goes on without it.
            messages.pop_back();
            ReportError(formatted.status());
            continue;
          }
          if (n_dropped > 0) {
            std::fprintf(stderr,
                         "pocket: dropped the %zu oldest message%s to fit the context of %zu "
                         "tokens\n",
                         n_dropped, n_dropped == 1 ? "" : "s", n_ctx);
          }
          watcher.Cancel(&s);
          auto result = s.Generate(std::string_view(*formatted), *options, PrintPiece);
          watcher.Exit();
          if (!result.ok()) {
            messages.pop_back();
            ReportError(result.status());
            continue;
          }
          std::fputc('\n', stdout);
          std::fflush(stdout);
          if (result->stop_reason == StopReason::kCancelled) {
            std::fprintf(stderr, "pocket: reply stopped (Ctrl-C at the prompt exits)\n");
          }
          if (flags->engine.verbose) PrintStats(*result);
          messages.push_back({"assistant", result->text});
          save();
        }
        return save_failed ? 1 : 0;
      }};
}

}  // namespace pocket::cli
