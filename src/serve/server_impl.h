// Server::Impl, the server's state and its routes (server.cc: start, listen, stop;
// server_routes.cc: the HTTP handlers and /metrics). For those two files only.
#pragma once

#include <errno.h>
#include <httplib.h>
#include <sys/socket.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>
#include "base/json_nesting.h"
#include "base/memory.h"
#include "base/output_file.h"
#include "base/str.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "runtime/request.h"
#include "runtime/session.h"
#include "serve/connections.h"
#include "serve/dispatcher.h"
#include "serve/http_policy.h"
#include "serve/openai.h"
#include "serve/score_worker.h"
#include "serve/server.h"
#include "serve/session_store.h"

namespace pocket::serve {

// Compares without an early exit (the time does not tell how much of a key was right).
inline bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

// The method a route takes ("GET" or "POST"); "" for paths pocket serve does not serve.
inline std::string AllowedMethods(const std::string& path) {
  if (path == "/health" || path == "/metrics" || path == "/v1/models") return "GET";
  if (path == "/v1/chat/completions" || path == "/v1/completions" || path == "/v1/score" ||
      path == "/v1/classify" || path == "/tokenize" || path == "/detokenize") {
    return "POST";
  }
  return "";
}

inline void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (e.http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorJson(e), "application/json");
}

// cpp-httplib's task queue over the server's connection table (serve/connections.h).
class ConnectionQueue : public httplib::TaskQueue {
 public:
  explicit ConnectionQueue(Connections* connections) : connections_(connections) {}
  void enqueue(std::function<void()> fn) override { connections_->Enqueue(std::move(fn)); }
  void shutdown() override { connections_->Shutdown(); }

 private:
  Connections* connections_;
};

struct Server::Impl {
  std::shared_ptr<const Model> model;
  ServeOptions options;
  Metrics metrics;  // before the dispatcher, whose scheduler writes it until it ends
  ModelLoader load;
  // Set by Start on the loader thread (Serve): requests are served once ready says so; until then
  // /health answers "loading" and everything else a 503.
  std::atomic<bool> ready{false};
  std::mutex start_mu;   // Start's handing over of the dispatcher, against CancelAll
  bool stopped = false;  // under start_mu: CancelAll came
  Status Start(ServeModel loaded);
  // --spec: one drafter for the server's life, made at start with the server's pool, context
  // and KV type (null: plain decoding); only the scheduler's thread drafts with it.
  std::unique_ptr<Drafter> drafter;
  bool spec_auto = false;
  bool spec_guard = false;
  std::unique_ptr<Dispatcher> dispatcher;
  std::unique_ptr<ScoreWorker> scorer;
  // Before http, which serves its connections (and is stopped before it goes).
  std::unique_ptr<Connections> connections;
  httplib::Server http;
  std::mt19937_64 ids_rng{std::random_device{}()};
  std::mutex ids_mu;
  int bound_port = -1;
  HttpPolicy policy;
  // When each request in flight arrived (the access log's duration), by its Request's address:
  // cpp-httplib routes and logs a request on one thread with the same object.
  // And its tokens, for the same line (-1: not a generation or scoring request, or not known).
  struct Arrival {
    std::chrono::steady_clock::time_point at;
    int64_t prompt_tokens = -1;
    int64_t completion_tokens = -1;
  };
  std::mutex arrivals_mu;
  std::unordered_map<const httplib::Request*, Arrival> arrivals;

  void NoteTokens(const httplib::Request& req, int64_t prompt, int64_t completion) {
    std::lock_guard<std::mutex> lock(arrivals_mu);
    auto it = arrivals.find(&req);
    if (it == arrivals.end()) return;
    it->second.prompt_tokens = prompt;
    it->second.completion_tokens = completion;
  }
  // The drain (Stop): new requests get a 503 while the requests in flight, counted from their
  // routing to their logging (after a stream's last byte), finish; then the listener stops.
  // cpp-httplib ends every stream the moment it stops, so it must not stop before they do.
  std::atomic<bool> draining{false};
  std::mutex drain_mu;
  std::condition_variable drain_cv;
  int64_t in_flight = 0;      // under drain_mu
  bool cancel_drain = false;  // under drain_mu: CancelAll came, streams end with what they have
  std::thread drainer;
  std::atomic<int64_t> last_trim_ms{0};  // TrimHeap's last call (steady clock)

  void Drain() {
    std::unique_lock<std::mutex> lock(drain_mu);
    drain_cv.wait(lock, [&] { return in_flight == 0 || cancel_drain; });
    // Cancelled requests still write their last chunks: a short grace for them.
    drain_cv.wait_for(lock, std::chrono::seconds(5), [&] { return in_flight == 0; });
    lock.unlock();
    http.stop();
  }

  std::string NewId(std::string_view prefix) {
    std::lock_guard<std::mutex> lock(ids_mu);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id(prefix);
    for (int i = 0; i < 24; ++i) id.push_back(kHex[ids_rng() & 15]);
    return id;
  }

  // ErrorFromStatus without this machine's file paths: a client sees the model's name (and an
  // adapter's), never where the files are.
  ApiError FromStatus(const Status& status, std::string_view param = "") const {
    ApiError e = ErrorFromStatus(status, param);
    auto scrub = [&e](const std::string& path, const std::string& name) {
      if (path.empty()) return;
      for (const std::string& p : {path, std::filesystem::absolute(path).string()}) {
        for (size_t at = e.message.find(p); at != std::string::npos;
             at = e.message.find(p, at + name.size())) {
          e.message.replace(at, p.size(), name);
        }
      }
    };
    scrub(model->source().path(), StrCat("model '", options.model_name, "'"));
    for (const auto& [name, set] : options.adapters) {
      for (const AdapterUse& u : set) scrub(u.adapter->path(), StrCat("adapter '", name, "'"));
    }
    return e;
  }

  // A body nesting deeper than kMaxJsonNesting is a 400 before it is parsed (the OpenAI routes
  // check in ParseRequest / ParseScoreRequest).
  bool NestsTooDeep(const httplib::Request& req, httplib::Response& res) {
    Status nesting = CheckJsonNesting(req.body, "the request body");
    if (nesting.ok()) return false;
    ApiError e;
    e.message = nesting.message();
    SendError(res, e);
    return true;
  }

  bool Authorized(const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty()) return true;
    const std::string auth = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool ok =
        auth.size() > kBearer.size() && auth.compare(0, kBearer.size(), kBearer) == 0 &&
        ConstantTimeEquals(std::string_view(auth).substr(kBearer.size()), options.api_key);
    if (!ok) {
      ApiError e;
      e.http_status = 401;
      e.message = auth.empty() ? "No API key provided (Authorization: Bearer KEY)"
                               : "Incorrect API key provided";
      e.code = "invalid_api_key";
      SendError(res, e);
    }
    return ok;
  }

  AdapterSet AdaptersOf(const std::string& name) const {
    for (const auto& [n, set] : options.adapters) {
      if (n == name) return set;
    }
    return {};
  }

  ApiLimits Limits() const {
    ApiLimits limits;
    limits.max_tokens = options.max_tokens;
    limits.n_ctx = options.n_ctx;
    limits.max_n = options.parallel;
    limits.max_tool_calls = options.max_tool_calls;
    limits.vocab_size = model->tokenizer()->vocab_size();
    for (const auto& [name, set] : options.adapters) limits.adapters.push_back(name);
    return limits;
  }

  // /v1/score and /v1/classify.
  void Score(bool classify, const httplib::Request& req, httplib::Response& res);

  // A choice of the response from its finished job: text, tool calls, finish reason, logprobs.
  Choice ChoiceOf(const ApiRequest& api, Job& job, int32_t index);

  void Generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);

  // Prometheus' text exposition format.
  std::string MetricsText();

  // A POST route: its request has arrived once cpp-httplib read the body and calls it.
  template <typename Handler>
  void Post(const char* path, Handler handler) {
    http.Post(path, [this, handler](const httplib::Request& req, httplib::Response& res) {
      connections->RequestArrived();
      handler(req, res);
    });
  }

  void Routes();
};

}  // namespace pocket::serve
