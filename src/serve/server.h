// pocket serve: an OpenAI-compatible HTTP server over one model's engine (docs/architecture.md,
// "Server"). HTTP threads (cpp-httplib) parse and validate requests, encode their prompts and
// compile their constraints, then hand them to ONE scheduler thread that owns the Engine and a
// fixed set of sessions (--parallel): it admits queued requests to free sessions, steps the engine
// (every running request batched in one forward pass), and hands each request's streamed text and
// result back to its HTTP thread. A streaming client that goes away cancels its request within a
// step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "model/adapter.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace pocket::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;           // 0: any free port (Server::port() says which)
  std::string model_name;    // the id clients send as "model" (and /v1/models lists)
  std::string api_key;       // empty: no key required
  int32_t parallel = 4;      // requests generating at once (the engine's batch)
  int32_t queue_limit = 64;  // requests waiting beyond those (more: 503 with Retry-After)
  int32_t n_threads = 0;     // compute threads (0: one per hardware thread)
  int32_t n_ctx = 4096;      // each session's context
  int32_t n_batch = 512;     // prefill chunk
  KvType kv_type = KvType::kF16;
  size_t kv_budget_bytes = 0;  // 0: none (EngineOptions::kv_budget_bytes)
  std::string swap_dir;        // where sessions are saved under a budget
  // The prefix cache's entries (finished requests' contexts, for later turns and shared
  // prompts), least recently used dropped beyond it (0: no cache).
  size_t prefix_cache_bytes = size_t{256} << 20;
  // Rows of a /v1/score prompt (and of a group of its candidates) a step takes beside the
  // streams' decode rows: small, so that scoring a long prompt slows the streams a little
  // instead of stalling them (0: the prefill chunk, --batch).
  int32_t score_chunk = 8;
  // How often a stream's HTTP thread sends what came (after the first piece, sent at once): 40 ms
  // spares a thread switch per token on busy cores; 0 sends every piece as it comes (measuring
  // inter-token latency: scripts/score-itl.py).
  int32_t stream_interval_ms = 40;
  // Where each session's context (the conversation it served last) is saved when the server
  // stops (slot-N.session) and loaded from when it starts, shared through the prefix cache;
  // empty: none.
  std::string session_dir;
  int32_t max_tokens = 4096;                // the most a request may ask for
  int32_t max_tool_calls = 0;               // tool calls in one turn at most (0: no limit)
  size_t max_body_bytes = size_t{8} << 20;  // larger bodies: 413
  // Connections served at once (each on its own thread); 8 more may ask only /health and
  // /metrics; beyond those a connection gets a 503 with Retry-After (serve/connections.h).
  int32_t max_connections = 64;
  // A request's headers and body must arrive within this (slow senders are closed).
  int32_t request_timeout_ms = 10000;
  // Speculative decoding for every request (GenerateRequest::spec: "lookup", "draft:FILE",
  // "dflash:DIR", "dflash", "auto", ...; empty or "none": off), up to draft_max tokens a pass.
  // Needs parallel == 1: the engine batches plain decoding only, so a speculative request runs
  // alone on the scheduler thread.
  std::string spec;
  int32_t draft_max = 8;
  // Adapters a request may pick by name ("model": "MODEL:NAME" or "lora": "NAME").
  std::vector<std::pair<std::string, AdapterSet>> adapters;
  // Browser policy (serve/http_policy.h): more names the Host header may give while bound to a
  // loopback address (--allowed-host), and the origins whose cross-origin requests are served
  // (--cors-origin; "*": any). A request with an Origin not listed is a 403.
  std::vector<std::string> allowed_hosts;
  std::vector<std::string> cors_origins;
  // One line per finished request (id, tokens, finish reason, milliseconds) and an access-log
  // line per HTTP request (request id, method, path, status, milliseconds); null: none.
  std::function<void(std::string_view line)> log;
  // Called once the model is loaded and requests are served (from the loader thread).
  std::function<void()> on_ready;
};

// What the server loads while /health says "loading": the model, and the adapters clients may
// pick by name (ServeOptions::adapters when the model is given whole).
struct ServeModel {
  std::shared_ptr<const Model> model;
  std::vector<std::pair<std::string, AdapterSet>> adapters;
};
using ModelLoader = std::function<StatusOr<ServeModel>()>;

class Server {
 public:
  // `load` runs on its own thread when Serve starts listening: meanwhile /health answers 503
  // {"status":"loading"} and every other request a 503 with Retry-After; its error ends Serve.
  static StatusOr<std::unique_ptr<Server>> Create(ModelLoader load, const ServeOptions& options);
  // A model loaded already (and ServeOptions::adapters).
  static StatusOr<std::unique_ptr<Server>> Create(std::shared_ptr<const Model> model,
                                                  const ServeOptions& options);
  // Binds host:port (Unavailable naming them when it cannot).
  Status Bind();
  int port() const;
  // Loads the model (Create's loader) and serves until Stop(): then lets the requests in flight
  // finish, saves the sessions (ServeOptions::session_dir) and returns. A load that fails is its
  // error.
  Status Serve();
  // Starts the drain: new requests get a 503 (/health says "draining"), the requests in flight
  // finish, streams to their last chunk, then the listener stops and Serve() returns. Returns at
  // once. Thread-safe; not from a signal handler.
  void Stop();
  // Cancels the requests in flight and those queued, for a drain that must not wait longer: a
  // running request ends with what it has (finish_reason "length"), a queued one with an error
  // (streams: an error event), every stream with [DONE]. Thread-safe.
  void CancelAll();
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pocket::serve
