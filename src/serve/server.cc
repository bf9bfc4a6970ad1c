#include "serve/server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "base/str.h"
#include "runtime/engine.h"
#include "runtime/prefix_cache.h"
#include "runtime/request.h"
#include "runtime/session.h"
#include "serve/openai.h"

namespace pocket::serve {
namespace {

using nlohmann::json;

// One request between its HTTP thread and the scheduler.
struct Job {
  std::string id;  // the response's id (chatcmpl-..., cmpl-...)
  PreparedRequest prepared;
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;  // streamed text the HTTP thread has not sent yet
  bool finished = false;
  Status status;
  GenerateResult result;
  std::atomic<bool> cancelled{false};  // the client went away
};

void FinishJob(Job& job, Status status, GenerateResult result) {
  std::lock_guard<std::mutex> lock(job.mu);
  job.status = std::move(status);
  job.result = std::move(result);
  job.finished = true;
  job.cv.notify_all();
}

// Owns the engine and the sessions; one thread admits, steps and finishes requests.
class Scheduler {
 public:
  Scheduler(std::unique_ptr<Engine> engine, std::vector<std::unique_ptr<Session>> sessions,
            int32_t queue_limit, std::function<void(std::string_view)> log)
      : engine_(std::move(engine)),
        sessions_(std::move(sessions)),
        queue_limit_(queue_limit),
        log_(std::move(log)) {
    for (auto& s : sessions_) free_.push_back(s.get());
    thread_ = std::thread([this] { Loop(); });
  }
  ~Scheduler() { Stop(); }

  // Queues a prepared job; ResourceExhausted when the queue is full or the server stops.
  Status Enqueue(const std::shared_ptr<Job>& job) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return ResourceExhaustedError("the server is shutting down");
    if (static_cast<int32_t>(queue_.size()) >= queue_limit_) {
      return ResourceExhaustedError("the request queue is full (", queue_limit_,
                                    " requests waiting)");
    }
    queue_.push_back(job);
    cv_.notify_one();
    return Status::Ok();
  }
  void Wake() { cv_.notify_one(); }
  // Cancels what runs, fails what waits, and ends the thread.
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }
  int32_t queued() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int32_t>(queue_.size());
  }

 private:
  struct Running {
    std::shared_ptr<Job> job;
    Session* session = nullptr;
    int64_t id = 0;
  };

  void Loop() {
    std::vector<std::pair<std::shared_ptr<Job>, Session*>> admitted;
    while (true) {
      bool stopping = false;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !running_.empty(); });
        stopping = stopping_;
        if (stopping) {
          for (auto& job : queue_) {
            FinishJob(*job, ResourceExhaustedError("the server is shutting down"), {});
          }
          queue_.clear();
        }
        while (!queue_.empty() && !free_.empty()) {
          admitted.emplace_back(std::move(queue_.front()), free_.back());
          queue_.pop_front();
          free_.pop_back();
        }
      }
      for (auto& [job, session] : admitted) {
        if (job->cancelled.load()) {
          GenerateResult r;
          r.stop_reason = StopReason::kCancelled;
          FinishJob(*job, Status::Ok(), std::move(r));
          Release(session);
          continue;
        }
        std::shared_ptr<Job> j = job;
        StreamCallback on_text = [j](std::string_view piece) {
          std::lock_guard<std::mutex> lock(j->mu);
          j->pending.append(piece);
          j->cv.notify_all();
          return !j->cancelled.load();
        };
        StatusOr<int64_t> id = engine_->Submit(session, job->prepared.prompt.ids,
                                               job->prepared.options, std::move(on_text));
        if (!id.ok()) {
          FinishJob(*job, id.status(), {});
          Release(session);
          continue;
        }
        running_.push_back({std::move(job), session, *id});
      }
      admitted.clear();
      if (running_.empty()) {
        if (stopping) return;
        continue;
      }
      for (Running& r : running_) {
        if (stopping || r.job->cancelled.load()) r.session->Cancel();
      }
      const StatusOr<int32_t> active = engine_->Step();
      static_cast<void>(active);  // Step fails only when called from a stream callback
      for (size_t i = 0; i < running_.size();) {
        Running& r = running_[i];
        if (!engine_->done(r.id)) {
          ++i;
          continue;
        }
        StatusOr<GenerateResult> result = engine_->Take(r.id);
        if (log_) {
          log_(result.ok()
                   ? StrCat(r.job->id, ": ", r.job->prepared.prompt.ids.size(), " prompt tokens (",
                            result->n_reused_tokens, " reused), ", result->tokens.size(),
                            " generated, ",
                            r.job->cancelled.load() ? std::string_view("the client went away")
                                                    : StopReasonName(result->stop_reason),
                            ", ", (result->prefill_us + result->decode_us) / 1000, " ms")
                   : StrCat(r.job->id, ": error: ", result.status().message()));
        }
        if (result.ok()) {
          FinishJob(*r.job, Status::Ok(), std::move(*result));
        } else {
          FinishJob(*r.job, result.status(), {});
        }
        Release(r.session);
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
  }

  void Release(Session* s) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(s);
  }

  std::unique_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Session>> sessions_;
  const int32_t queue_limit_;
  std::function<void(std::string_view)> log_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<Session*> free_;
  bool stopping_ = false;
  std::vector<Running> running_;  // the scheduler thread's own
  std::thread thread_;
};

// Compares without an early exit (the time does not tell how much of a key was right).
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

void SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  if (e.http_status == 503) res.set_header("Retry-After", "1");
  res.set_content(ErrorJson(e), "application/json");
}

}  // namespace

struct Server::Impl {
  std::shared_ptr<const Model> model;
  ServeOptions options;
  std::unique_ptr<Scheduler> scheduler;
  httplib::Server http;
  std::mt19937_64 ids_rng{std::random_device{}()};
  std::mutex ids_mu;
  int bound_port = -1;

  std::string NewId(std::string_view prefix) {
    std::lock_guard<std::mutex> lock(ids_mu);
    static constexpr char kHex[] = "0123456789abcdef";
    std::string id(prefix);
    for (int i = 0; i < 24; ++i) id.push_back(kHex[ids_rng() & 15]);
    return id;
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

  void Generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    ApiLimits limits;
    limits.max_tokens = options.max_tokens;
    limits.n_ctx = options.n_ctx;
    ApiRequest api;
    if (auto e = ParseRequest(endpoint, req.body, options.model_name, limits, &api)) {
      return SendError(res, *e);
    }
    StatusOr<PreparedRequest> prepared = PrepareRequest(*model, api.generate);
    if (!prepared.ok()) return SendError(res, ErrorFromStatus(prepared.status()));
    const size_t n_prompt = prepared->prompt.ids.size();
    const size_t n_ctx = static_cast<size_t>(options.n_ctx);
    if (n_prompt >= n_ctx) {
      ApiError e;
      e.param = endpoint == Endpoint::kChat ? "messages" : "prompt";
      e.code = "context_length_exceeded";
      e.message = StrCat("the prompt is ", n_prompt, " tokens; the context holds ", n_ctx,
                         " tokens (prompt + completion)");
      return SendError(res, e);
    }
    if (api.max_tokens_given && n_prompt + static_cast<size_t>(api.generate.max_tokens) > n_ctx) {
      ApiError e;
      e.param = "max_tokens";
      e.code = "context_length_exceeded";
      e.message = StrCat("the prompt is ", n_prompt, " tokens and max_tokens ",
                         api.generate.max_tokens, ": more than the context of ", n_ctx, " tokens");
      return SendError(res, e);
    }
    ResponseIds ids;
    ids.id = NewId(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
    ids.created = static_cast<int64_t>(std::time(nullptr));
    ids.model = options.model_name;
    auto job = std::make_shared<Job>();
    job->id = ids.id;
    job->prepared = std::move(*prepared);
    // A budget that ends a constrained output early: finish_reason "length" (OpenAI's answer).
    job->prepared.options.partial_constrained_output = true;
    job->prepared.options.ignore_stop_tokens = api.ignore_eos;
    if (Status q = scheduler->Enqueue(job); !q.ok()) return SendError(res, ErrorFromStatus(q));
    if (!api.stream) {
      std::unique_lock<std::mutex> lock(job->mu);
      job->cv.wait(lock, [&] { return job->finished; });
      if (!job->status.ok()) return SendError(res, ErrorFromStatus(job->status));
      res.set_content(CompletionJson(endpoint, ids, job->result, UsageOf(job->result, n_prompt)),
                      "application/json");
      return;
    }
    // Streaming: the provider runs on this connection's thread until the job ends or the client
    // goes away (a write fails: the job is cancelled, the scheduler stops it within a step).
    res.set_header("Cache-Control", "no-cache");
    struct StreamState {
      bool started = false;
      bool done = false;
    };
    auto state = std::make_shared<StreamState>();
    Scheduler* sched = scheduler.get();
    const bool include_usage = api.include_usage;
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, state, ids, endpoint, include_usage, n_prompt, sched](size_t,
                                                                    httplib::DataSink& sink) {
          auto write = [&](const std::string& s) {
            if (sink.write(s.data(), s.size())) return true;
            job->cancelled.store(true);
            sched->Wake();
            return false;
          };
          if (!state->started) {
            state->started = true;
            if (endpoint == Endpoint::kChat && !write(StreamRoleEvent(ids))) return false;
          }
          std::string text;
          bool finished = false;
          {
            std::unique_lock<std::mutex> lock(job->mu);
            job->cv.wait_for(lock, std::chrono::milliseconds(200),
                             [&] { return job->finished || !job->pending.empty(); });
            text.swap(job->pending);
            finished = job->finished;
          }
          if (!text.empty() && !write(StreamTextEvent(endpoint, ids, text))) return false;
          if (!finished) {
            // Nothing new: a probe that the client is still there.
            if (text.empty() && !sink.is_writable()) {
              job->cancelled.store(true);
              sched->Wake();
              return false;
            }
            return true;
          }
          if (!job->status.ok()) {
            ApiError e = ErrorFromStatus(job->status);
            write(StrCat("data: ", ErrorJson(e), "\n\n"));
            sink.done();
            return true;
          }
          if (!write(StreamFinishEvent(endpoint, ids, job->result.stop_reason))) return false;
          if (include_usage &&
              !write(StreamUsageEvent(endpoint, ids, UsageOf(job->result, n_prompt)))) {
            return false;
          }
          if (!write(std::string(kStreamDone))) return false;
          sink.done();
          return true;
        },
        [job, sched](bool success) {
          if (!success) {
            job->cancelled.store(true);
            sched->Wake();
          }
        });
  }

  void Routes() {
    http.set_payload_max_length(options.max_body_bytes);
    const int threads = std::max(1, options.http_threads);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;
      ApiError e;
      e.http_status = res.status;
      if (res.status == 413) {
        e.message = "the request body is larger than this server's limit";
      } else if (res.status == 404) {
        e.message = "no such endpoint";
        e.code = "not_found";
      } else {
        e.message = StrCat("HTTP ", res.status);
      }
      res.set_content(ErrorJson(e), "application/json");
    });
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
          ApiError e;
          e.http_status = 500;
          e.type = "server_error";
          e.message = "internal error";
          SendError(res, e);
        });
    http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"status":"ok"})", "application/json");
    });
    http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res)) return;
      json m = {
          {"id", options.model_name}, {"object", "model"}, {"created", 0}, {"owned_by", "pocket"}};
      res.set_content(json{{"object", "list"}, {"data", json::array({m})}}.dump(
                          -1, ' ', false, json::error_handler_t::replace),
                      "application/json");
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Endpoint::kChat, req, res);
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      Generate(Endpoint::kCompletion, req, res);
    });
    http.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res)) return;
      const json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object() || !body.contains("content") ||
          !body["content"].is_string()) {
        ApiError e;
        e.param = "content";
        e.message = "the body must be a JSON object with a string 'content'";
        return SendError(res, e);
      }
      bool add_special = false;
      if (body.contains("add_special")) {
        if (!body["add_special"].is_boolean()) {
          ApiError e;
          e.param = "add_special";
          e.message = "'add_special' must be a boolean";
          return SendError(res, e);
        }
        add_special = body["add_special"].get<bool>();
      }
      const Tokenizer* tok = model->tokenizer();
      if (tok == nullptr) return SendError(res, ErrorFromStatus(InternalError("no tokenizer")));
      EncodeOptions eo;
      eo.add_bos = add_special && tok->spec().add_bos;
      eo.parse_special = false;
      StatusOr<std::vector<int32_t>> ids = tok->Encode(body["content"].get<std::string>(), eo);
      if (!ids.ok()) return SendError(res, ErrorFromStatus(ids.status(), "content"));
      res.set_content(json{{"tokens", *ids}}.dump(), "application/json");
    });
    http.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res)) return;
      const json body = json::parse(req.body, nullptr, false);
      ApiError bad;
      bad.param = "tokens";
      bad.message = "the body must be a JSON object with 'tokens', an array of token ids";
      if (body.is_discarded() || !body.is_object() || !body.contains("tokens") ||
          !body["tokens"].is_array()) {
        return SendError(res, bad);
      }
      const Tokenizer* tok = model->tokenizer();
      if (tok == nullptr) return SendError(res, ErrorFromStatus(InternalError("no tokenizer")));
      std::vector<int32_t> ids;
      for (const json& t : body["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
            t.get<int64_t>() >= tok->vocab_size()) {
          bad.message = StrCat("'tokens' must hold token ids from 0 to ", tok->vocab_size() - 1);
          return SendError(res, bad);
        }
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      StatusOr<std::string> text = tok->Decode(ids);
      if (!text.ok()) return SendError(res, ErrorFromStatus(text.status(), "tokens"));
      res.set_content(json{{"content", *text}}.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                                                    json::error_handler_t::replace),
                      "application/json");
    });
  }
};

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  Stop();
  if (impl_->scheduler) impl_->scheduler->Stop();
}

StatusOr<std::unique_ptr<Server>> Server::Create(std::shared_ptr<const Model> model,
                                                 const ServeOptions& options) {
  if (!model) return InvalidArgumentError("no model");
  if (model->tokenizer() == nullptr) {
    return FailedPreconditionError("the model has no tokenizer (give one with --tokenizer)");
  }
  if (options.parallel < 1 || options.parallel > 256) {
    return InvalidArgumentError("--parallel must be 1 to 256, got ", options.parallel);
  }
  if (options.queue_limit < 0) return InvalidArgumentError("the queue limit must be >= 0");
  auto impl = std::make_unique<Impl>();
  impl->model = model;
  impl->options = options;
  POCKET_ASSIGN_OR_RETURN(std::shared_ptr<ThreadPool> pool, MakeThreadPool(options.n_threads));
  EngineOptions eo;
  eo.max_requests = options.parallel;
  eo.max_chunk = options.n_batch;
  eo.kv_budget_bytes = options.kv_budget_bytes;
  eo.swap_dir = options.swap_dir;
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, pool, eo));
  auto cache = std::make_shared<PrefixCache>();
  std::vector<std::unique_ptr<Session>> sessions;
  SessionOptions so;
  so.n_ctx = options.n_ctx;
  so.n_batch = options.n_batch;
  so.kv_type = options.kv_type;
  so.pool = pool;
  so.prefix_cache = cache;
  for (int32_t i = 0; i < options.parallel; ++i) {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::Create(model, so));
    sessions.push_back(std::move(s));
  }
  impl->options.n_ctx = sessions.front()->n_ctx();  // clamped to the model's
  impl->scheduler = std::make_unique<Scheduler>(std::move(engine), std::move(sessions),
                                                options.queue_limit, options.log);
  impl->Routes();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Status Server::Bind() {
  Impl& m = *impl_;
  if (m.options.port == 0) {
    m.bound_port = m.http.bind_to_any_port(m.options.host);
  } else if (m.http.bind_to_port(m.options.host, m.options.port)) {
    m.bound_port = m.options.port;
  }
  if (m.bound_port < 0) {
    return IoError("cannot listen on ", m.options.host, ":", m.options.port,
                   " (in use, or not an address of this machine)");
  }
  return Status::Ok();
}

int Server::port() const {
  return impl_->bound_port;
}

Status Server::Serve() {
  if (impl_->bound_port < 0) POCKET_RETURN_IF_ERROR(Bind());
  if (!impl_->http.listen_after_bind()) {
    if (impl_->http.is_running()) return InternalError("the HTTP server stopped unexpectedly");
  }
  impl_->scheduler->Stop();
  return Status::Ok();
}

void Server::Stop() {
  impl_->http.stop();
}

}  // namespace pocket::serve
