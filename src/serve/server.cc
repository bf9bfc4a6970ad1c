#include "serve/server.h"

#include <filesystem>
#include <thread>

#include "serve/server_impl.h"
#include "serve/session_store.h"

namespace pocket::serve {
using nlohmann::json;

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  Stop();
  CancelAll();
  if (impl_->drainer.joinable()) impl_->drainer.join();
}

StatusOr<std::unique_ptr<Server>> Server::Create(std::shared_ptr<const Model> model,
                                                 const ServeOptions& options) {
  if (!model) return InvalidArgumentError("no model");
  return Create(
      [model, adapters = options.adapters]() -> StatusOr<ServeModel> {
        return ServeModel{model, adapters};
      },
      options);
}

StatusOr<std::unique_ptr<Server>> Server::Create(ModelLoader load, const ServeOptions& options) {
  if (!load) return InvalidArgumentError("no model loader");
  if (options.parallel < 1 || options.parallel > 256) {
    return InvalidArgumentError("--parallel must be 1 to 256, got ", options.parallel);
  }
  if (options.queue_limit < 0) return InvalidArgumentError("the queue limit must be >= 0");
  if (!options.spec.empty() && options.spec != "none") {
    GenerateRequest spec_request;
    spec_request.spec = options.spec;
    spec_request.draft_max = options.draft_max;
    POCKET_RETURN_IF_ERROR(ParseSpec(spec_request).status());
    if (options.parallel != 1) {
      return InvalidArgumentError(
          "--spec needs --parallel 1 (the engine batches plain decoding "
          "only; a speculative request runs alone), got --parallel ",
          options.parallel);
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->load = std::move(load);
  impl->options = options;
  impl->Routes();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

// The model's part of the server (on the loader thread while /health says "loading").
Status Server::Impl::Start(ServeModel loaded) {
  std::shared_ptr<const Model> model = std::move(loaded.model);
  if (!model) return InvalidArgumentError("no model");
  if (model->tokenizer() == nullptr) {
    return FailedPreconditionError("the model has no tokenizer (give one with --tokenizer)");
  }
  options.adapters = std::move(loaded.adapters);
  GenerateRequest spec_request;
  if (!options.spec.empty() && options.spec != "none") {
    spec_request.spec = options.spec;
    spec_request.draft_max = options.draft_max;
  }
  POCKET_ASSIGN_OR_RETURN(std::shared_ptr<ThreadPool> pool, MakeThreadPool(options.n_threads));
  SessionOptions so;
  so.n_ctx = options.n_ctx;
  so.n_batch = options.n_batch;
  so.kv_type = options.kv_type;
  so.pool = pool;
  // Scoring's own session (ScoreWorker). Under --kv-budget its whole context is set aside from
  // the budget (at most half of it: a longer context is cut to fit), and the engine gets the rest,
  // so that generation, idle contexts, the prefix cache and scoring together stay within it.
  SessionOptions score_so = so;
  size_t engine_budget = options.kv_budget_bytes;
  if (options.kv_budget_bytes > 0) {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> probe, Session::Create(model, so));
    const size_t page = probe->kv_page_bytes();
    const int64_t pages_max = static_cast<int64_t>(options.kv_budget_bytes / 2 / page);
    if (pages_max < 1) {
      return InvalidArgumentError("--kv-budget ", options.kv_budget_bytes,
                                  " bytes is too small: it must hold two KV pages of ", page,
                                  " bytes");
    }
    const int64_t pages =
        std::min<int64_t>(pages_max, (probe->n_ctx() + kKvPagePositions - 1) / kKvPagePositions);
    score_so.n_ctx =
        static_cast<int32_t>(std::min<int64_t>(probe->n_ctx(), pages * kKvPagePositions));
    engine_budget -= static_cast<size_t>(pages) * page;
  }
  EngineOptions eo;
  eo.max_requests = options.parallel + 1;  // and /v1/score's request
  eo.max_chunk = options.n_batch;
  eo.kv_budget_bytes = engine_budget;
  eo.swap_dir = options.swap_dir;
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, pool, eo));
  PrefixCacheOptions po;
  po.max_bytes = options.prefix_cache_bytes;
  auto cache = std::make_shared<PrefixCache>(po);
  std::vector<std::unique_ptr<Session>> sessions;
  if (options.prefix_cache_bytes > 0) so.prefix_cache = cache;
  for (int32_t i = 0; i < options.parallel; ++i) {
    POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> s, Session::Create(model, so));
    sessions.push_back(std::move(s));
  }
  options.n_ctx = sessions.front()->n_ctx();  // clamped to the model's
  if (!spec_request.spec.empty()) {
    SessionOptions dso = so;
    dso.n_ctx = options.n_ctx;
    dso.prefix_cache = nullptr;
    POCKET_ASSIGN_OR_RETURN(drafter, MakeDrafter(spec_request, *model, dso));
    POCKET_ASSIGN_OR_RETURN(SpecMode mode, ParseSpec(spec_request));
    spec_auto = mode.automatic;
    spec_guard = mode.guarded();
  }
  if (!options.session_dir.empty()) LoadSessions(options, sessions);
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Session> score_session, Session::Create(model, score_so));
  this->model = model;
  std::lock_guard<std::mutex> lock(start_mu);
  if (stopped) return CancelledError("stopped while loading");
  scorer = std::make_unique<ScoreWorker>(std::move(score_session), options.queue_limit,
                                         /*release_kv=*/options.kv_budget_bytes > 0);
  dispatcher = std::make_unique<Dispatcher>(std::move(engine), std::move(sessions), cache,
                                            options.queue_limit, options.log, &metrics, model);
  ready.store(true);
  return Status::Ok();
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
  m.connections->SetListenPort(m.bound_port);
  return Status::Ok();
}

int Server::port() const {
  return impl_->bound_port;
}

Status Server::Serve() {
  Impl& m = *impl_;
  if (m.bound_port < 0) POCKET_RETURN_IF_ERROR(Bind());
  // The model loads while the listener answers /health with "loading"; a load that fails stops
  // the listener and is Serve's error.
  Status loaded;
  std::thread loader([&m, &loaded] {
    StatusOr<ServeModel> model = m.load();
    loaded = model.ok() ? m.Start(std::move(*model)) : model.status();
    if (loaded.ok()) {
      if (m.options.on_ready) m.options.on_ready();
      return;
    }
    // The listener starts beside this thread: stop it once it runs (or gave up).
    for (int i = 0; i < 5000 && !m.http.is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    m.http.stop();
  });
  const bool listened = m.http.listen_after_bind();
  loader.join();
  if (m.drainer.joinable()) m.drainer.join();
  if (!loaded.ok()) return loaded;
  if (!listened && m.http.is_running()) {
    return InternalError("the HTTP server stopped unexpectedly");
  }
  impl_->dispatcher->Stop();
  impl_->scorer->Stop();
  if (!impl_->options.session_dir.empty()) {
    POCKET_RETURN_IF_ERROR(SaveSessions(impl_->options, impl_->dispatcher->sessions()));
  }
  return Status::Ok();
}

void Server::Stop() {
  Impl& m = *impl_;
  if (m.draining.exchange(true)) return;
  m.drainer = std::thread([&m] { m.Drain(); });
}

void Server::CancelAll() {
  Impl& m = *impl_;
  {
    std::lock_guard<std::mutex> lock(m.start_mu);
    m.stopped = true;  // a load still running ends there
    if (m.dispatcher)
      m.dispatcher->Stop();  // running requests end as cancelled ("length"),
                             // queued ones with an error
    if (m.scorer) m.scorer->Stop();
  }
  {
    std::lock_guard<std::mutex> lock(m.drain_mu);
    m.cancel_drain = true;
  }
  m.drain_cv.notify_all();
}

}  // namespace pocket::serve
