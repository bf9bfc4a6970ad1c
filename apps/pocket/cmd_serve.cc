// pocket serve: the OpenAI-compatible server (src/serve). SIGTERM and SIGINT stop it: it stops
// accepting, lets the requests in flight finish (--drain-timeout; a second signal cancels them),
// saves the sessions (--session-dir) and exits 0.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "base/memory.h"
#include "base/str.h"
#include "common.h"
#include "serve/http_policy.h"
#include "serve/server.h"

namespace pocket::cli {

Command AddServeCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "serve", "an OpenAI-compatible HTTP server (/v1/chat/completions, /v1/completions, ...)");
  struct Flags {
    std::string model;
    EngineFlags engine;
    serve::ServeOptions serve;
    std::string api_key_file, alias, kv_budget, prefix_cache = "256M";
    std::vector<std::string> lora;  // NAME=FILE|DIR[:SCALE]
    int32_t drain_timeout = 30;     // seconds
    double request_timeout = 10;    // seconds
  };
  auto f = std::make_shared<Flags>();
  app->add_option("-m,--model", f->model, "the model to serve")->required();
  f->engine.Register(app);
  app->add_option("--host", f->serve.host, "address to listen on (loopback unless you say so)")
      ->capture_default_str();
  app->add_option("--port", f->serve.port, "port to listen on (0: any free port)")
      ->capture_default_str();
  app->add_option("--parallel", f->serve.parallel,
                  "requests generating at once, batched in one forward pass")
      ->capture_default_str();
  app->add_option("--queue", f->serve.queue_limit,
                  "requests waiting beyond --parallel; more are refused with 503 + Retry-After")
      ->capture_default_str();
  app->add_option("--api-key", f->serve.api_key,
                  "require 'Authorization: Bearer KEY' (default: no key). Other users of this "
                  "machine can read a command line (/proc/PID/cmdline): prefer --api-key-file");
  app->add_option("--allowed-host", f->serve.allowed_hosts,
                  "a name the Host header may give besides loopback addresses and localhost, "
                  "while bound to a loopback address (repeatable; other names: 403, against DNS "
                  "rebinding)");
  app->add_option("--cors-origin", f->serve.cors_origins,
                  "serve cross-origin (browser) requests from this origin, e.g. "
                  "https://app.example (repeatable; * for any); requests with another Origin "
                  "get a 403, requests without one (curl, SDKs) are served");
  app->add_option("--lora", f->lora,
                  "an adapter clients pick per request: NAME=FILE|DIR[:SCALE] (repeatable); a "
                  "request names it as \"model\": \"MODEL:NAME\" or \"lora\": \"NAME\"");
  app->add_option("--spec", f->serve.spec,
                  "speculative decoding for every request (needs --parallel 1): lookup, "
                  "draft:FILE, dflash:DIR, dflash (the package's drafter), auto; none: off")
      ->capture_default_str();
  app->add_option("--draft-max", f->serve.draft_max, "tokens drafted per verification pass")
      ->capture_default_str();
  app->add_option("--api-key-file", f->api_key_file, "read the key from this file (first line)");
  app->add_option("--alias", f->alias,
                  "the model id clients send as \"model\" (default: the file name without its "
                  "extension)");
  app->add_option("--kv-budget", f->kv_budget,
                  "cap on KV cache bytes (e.g. 256M; sessions beyond it are saved to disk)");
  app->add_option("--score-chunk", f->serve.score_chunk,
                  "rows of a /v1/score prompt a step takes beside the streams (small: scoring "
                  "slows them a little instead of stalling them; 0: --batch)")
      ->check(CLI::Range(0, 65536))
      ->capture_default_str();
  app->add_option("--stream-interval", f->serve.stream_interval_ms,
                  "milliseconds between a stream's sends after its first piece (0: every piece as "
                  "it comes; more sends cost a thread switch each)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app->add_option("--prefix-cache", f->prefix_cache,
                  "bytes of finished requests' contexts kept for later turns and shared prompts, "
                  "least recently used dropped beyond it (0: none)")
      ->capture_default_str();
  app->add_option("--swap-dir", f->serve.swap_dir,
                  "where sessions are saved under --kv-budget, created 0700 if missing (default: "
                  "a fresh private directory under $TMPDIR, removed at exit)");
  app->add_option("--session-dir", f->serve.session_dir,
                  "save each session's conversation here on SIGTERM and load it at start, so "
                  "clients continue where they were without evaluating it again (files 0600; "
                  "the directory is created 0700 if missing)");
  app->add_option("--drain-timeout", f->drain_timeout,
                  "seconds SIGTERM lets the requests in flight finish before it cancels them (a "
                  "second signal cancels them at once)")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400));
  app->add_option("--max-tokens", f->serve.max_tokens,
                  "the most tokens a request may generate (and chat's default)")
      ->capture_default_str();
  app->add_option("--max-tool-calls", f->serve.max_tool_calls,
                  "the most tool calls one turn may hold when a request allows parallel calls "
                  "(0: no limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  app->add_option("--max-body", f->serve.max_body_bytes, "largest request body in bytes (413)")
      ->capture_default_str();
  app->add_option("--max-connections,--http-threads", f->serve.max_connections,
                  "connections served at once, each on its own thread; 8 more may ask only "
                  "/health and /metrics, more get a 503 with Retry-After")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  app->add_option("--request-timeout", f->request_timeout,
                  "seconds a client has to send a request's headers and body (slower ones are "
                  "closed)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
  SetExamples(app, {"pocket serve -m model.pocket --port 9000 --parallel 8 --api-key-file key.txt",
                    "pocket serve -m model.pocket --lora reviews=reviews.pocket --session-dir "
                    "~/.pocket/sessions",
                    "curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: "
                    "application/json' -d '{\"model\": \"model\", \"messages\": [{\"role\": "
                    "\"user\", \"content\": \"Hi\"}]}'"});
  return {app, [=]() -> int {
            if (!f->serve.api_key.empty() && !f->api_key_file.empty()) {
              return ReportUsageError("give --api-key or --api-key-file, not both");
            }
            if (!f->api_key_file.empty()) {
              std::ifstream in(f->api_key_file);
              if (!in) {
                return ReportError(IoError("cannot read --api-key-file ", f->api_key_file));
              }
              std::getline(in, f->serve.api_key);
              while (!f->serve.api_key.empty() &&
                     (f->serve.api_key.back() == '\r' || f->serve.api_key.back() == ' ')) {
                f->serve.api_key.pop_back();
              }
              if (f->serve.api_key.empty()) {
                return ReportUsageError(StrCat("--api-key-file ", f->api_key_file, " is empty"));
              }
            }
            if (!f->kv_budget.empty()) {
              StatusOr<uint64_t> bytes = ParseByteCount(f->kv_budget);
              if (!bytes.ok())
                return ReportUsageError(StrCat("--kv-budget: ", bytes.status().message()));
              f->serve.kv_budget_bytes = static_cast<size_t>(*bytes);
            }
            {
              StatusOr<uint64_t> bytes = ParseByteCount(f->prefix_cache);
              if (!bytes.ok())
                return ReportUsageError(StrCat("--prefix-cache: ", bytes.status().message()));
              f->serve.prefix_cache_bytes = static_cast<size_t>(*bytes);
            }
            // A server lives long: memory a large request freed goes back to the OS (with
            // the server's trimming when it falls idle, serve/server.cc).
            LimitHeapRetention(uint64_t{4} << 20);
            // SIGTERM and SIGINT go to one thread (blocked here, before any thread starts).
            sigset_t signals;
            sigemptyset(&signals);
            sigaddset(&signals, SIGTERM);
            sigaddset(&signals, SIGINT);
            pthread_sigmask(SIG_BLOCK, &signals, nullptr);
            StatusOr<SessionOptions> so = f->engine.Session();
            if (!so.ok()) return ReportUsageError(so.status().message());
            serve::ServeOptions o = f->serve;
            o.request_timeout_ms = static_cast<int32_t>(f->request_timeout * 1000);
            o.n_threads = so->n_threads;
            o.n_ctx = so->n_ctx;
            o.n_batch = so->n_batch;
            o.kv_type = so->kv_type;
            o.model_name =
                f->alias.empty() ? std::filesystem::path(f->model).stem().string() : f->alias;
            o.log = [](std::string_view line) {
              std::fprintf(stderr, "pocket serve: %.*s\n", static_cast<int>(line.size()),
                           line.data());
            };
            // --lora NAME=FILE[:SCALE]: the names are checked now, the files with the model.
            std::vector<std::pair<std::string, std::string>> loras;
            for (const std::string& arg : f->lora) {
              const size_t eq = arg.find('=');
              if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
                return ReportUsageError(StrCat("--lora ", arg, ": expected NAME=FILE[:SCALE]"));
              }
              const std::string name = arg.substr(0, eq);
              if (name.find(':') != std::string::npos) {
                return ReportUsageError(StrCat("--lora ", arg, ": the name cannot hold ':'"));
              }
              for (const auto& [other, file] : loras) {
                if (other == name)
                  return ReportUsageError(StrCat("--lora: two adapters named ", name));
              }
              loras.emplace_back(name, arg.substr(eq + 1));
            }
            // The model loads while the server listens (/health: "loading"); a missing file is
            // an error before that.
            if (std::error_code ec; !std::filesystem::exists(f->model, ec)) {
              return ReportError(IoError("cannot open ", f->model, ": no such file"));
            }
            serve::ModelLoader load = [f, loras]() -> StatusOr<serve::ServeModel> {
              serve::ServeModel m;
              POCKET_ASSIGN_OR_RETURN(m.model, LoadModel(f->model, f->engine));
              for (const auto& [name, file] : loras) {
                EngineFlags one;
                one.lora.push_back(file);
                POCKET_ASSIGN_OR_RETURN(AdapterSet set, LoadAdapters(*m.model, one));
                m.adapters.emplace_back(name, std::move(set));
              }
              return m;
            };
            auto bound_port = std::make_shared<int>(0);
            o.on_ready = [o, bound_port] {
              std::fprintf(stderr, "pocket serve: listening on http://%s:%d (model \"%s\")\n",
                           o.host.c_str(), *bound_port, o.model_name.c_str());
              if (!serve::IsLoopbackHost(o.host) && o.api_key.empty()) {
                std::fprintf(stderr,
                             "pocket serve: warning: %s is reachable from other machines and no "
                             "--api-key-file is set: anyone who reaches it can use the model\n",
                             o.host.c_str());
              }
              std::fflush(stderr);
            };
            StatusOr<std::unique_ptr<serve::Server>> server = serve::Server::Create(load, o);
            if (!server.ok()) return ReportError(server.status());
            if (Status b = (*server)->Bind(); !b.ok()) return ReportError(b);
            *bound_port = (*server)->port();
            std::fprintf(stderr,
                         "pocket serve: loading %s (http://%s:%d/health says \"loading\" "
                         "meanwhile)\n",
                         f->model.c_str(), o.host.c_str(), *bound_port);
            std::fflush(stderr);
            serve::Server* s = server->get();
            // The first signal stops accepting and lets the requests in flight finish; a second
            // one, or --drain-timeout, cancels them.
            auto served_all = std::make_shared<std::atomic<bool>>(false);
            const int32_t drain = f->drain_timeout;
            std::thread watcher([signals, s, served_all, drain] {
              int sig = 0;
              sigwait(&signals, &sig);
              if (served_all->load()) return;
              std::fprintf(stderr,
                           "pocket serve: %s, stopping: the requests in flight finish (at most "
                           "%d s; a second signal cancels them)\n",
                           sig == SIGTERM ? "SIGTERM" : "SIGINT", drain);
              s->Stop();
              const timespec wait{drain, 0};
              const int again = sigtimedwait(&signals, nullptr, &wait);
              if (served_all->load()) return;
              std::fprintf(stderr, "pocket serve: %s, cancelling the requests in flight\n",
                           again > 0 ? "a second signal" : "--drain-timeout passed");
              s->CancelAll();
            });
            const Status served = s->Serve();
            // The watcher waits for a signal: send one to end it when the server stopped itself.
            served_all->store(true);
            pthread_kill(watcher.native_handle(), SIGTERM);
            watcher.join();
            server->reset();
            if (!served.ok()) return ReportError(served);
            std::fprintf(stderr, "pocket serve: stopped\n");
            return 0;
          }};
}

}  // namespace pocket::cli
