// pocket serve's routes: the OpenAI endpoints, scoring, tokenizing, /health and /metrics.
#include <nlohmann/json.hpp>

#include "serve/server_impl.h"

namespace pocket::serve {

using nlohmann::json;

void Server::Impl::Score(bool classify, const httplib::Request& req, httplib::Response& res) {
  if (!Authorized(req, res)) return;
  ScoreRequest sr;
  if (auto e = ParseScoreRequest(classify, req.body, options.model_name, Limits(), &sr)) {
    return SendError(res, *e);
  }
  StatusOr<PromptTokens> prompt = EncodeRequestPrompt(*model, sr.prompt);
  if (!prompt.ok()) return SendError(res, FromStatus(prompt.status()));
  const std::string_view input_param = sr.chat ? "messages" : "prompt";
  const int32_t n_ctx = scorer->session().n_ctx();
  if (prompt->ids.size() >= static_cast<size_t>(n_ctx)) {
    ApiError e;
    e.param = std::string(input_param);
    e.code = "context_length_exceeded";
    e.message = StrCat("the prompt is ", prompt->ids.size(), " tokens; the context holds ", n_ctx,
                       " tokens");
    return SendError(res, e);
  }
  const int fd = connections->CurrentSocket();
  const auto client_gone = [fd] { return fd >= 0 && PeerClosed(fd); };
  json out = {{"model", options.model_name}, {"usage", {{"prompt_tokens", prompt->ids.size()}}}};
  NoteTokens(req, static_cast<int64_t>(prompt->ids.size()), 0);
  if (classify) {
    std::vector<LabelScore> labels;
    const Status s = scorer->Run(
        AdaptersOf(sr.adapter),
        [&](Session& session) -> Status {
          session.SetCacheSalt(sr.cache_salt);
          POCKET_ASSIGN_OR_RETURN(labels,
                                  dispatcher->Classify(&session, prompt->ids, options.score_chunk));
          return Status::Ok();
        },
        client_gone);
    if (!s.ok())
      return SendError(res,
                       FromStatus(s, s.code() == StatusCode::kFailedPrecondition ? "model" : ""));
    json results = json::array();
    for (const LabelScore& l : labels) {
      results.push_back({{"index", l.index},
                         {"label", l.label},
                         {"logit", l.logit},
                         {"logprob", l.logprob},
                         {"probability", l.probability}});
    }
    out["object"] = "classification";
    out["labels"] = std::move(results);
  } else {
    StatusOr<std::vector<std::vector<int32_t>>> candidates =
        EncodeCandidates(*model, sr.prompt, *prompt, sr.candidates);
    if (!candidates.ok()) return SendError(res, FromStatus(candidates.status(), "candidates"));
    std::vector<CandidateScore> scores;
    const Status s = scorer->Run(
        AdaptersOf(sr.adapter),
        [&](Session& session) -> Status {
          session.SetCacheSalt(sr.cache_salt);
          POCKET_ASSIGN_OR_RETURN(scores,
                                  dispatcher->Score(&session, prompt->ids, std::move(*candidates),
                                                    options.score_chunk));
          return Status::Ok();
        },
        client_gone);
    if (!s.ok()) return SendError(res, FromStatus(s, "candidates"));
    json results = json::array();
    for (const CandidateScore& c : scores) {
      results.push_back({{"index", c.index},
                         {"candidate", sr.candidates[static_cast<size_t>(c.index)]},
                         {"logprob", c.logprob},
                         {"probability", c.probability},
                         {"tokens", c.tokens.size()}});
    }
    out["object"] = "score";
    out["results"] = std::move(results);
  }
  res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

Choice Server::Impl::ChoiceOf(const ApiRequest& api, Job& job, int32_t index) {
  Choice c;
  c.index = index;
  const Tokenizer* tok = model->tokenizer();
  if (api.logprobs) {
    c.with_logprobs = true;
    // One entry per kept token (a final stop token has one too: dropped).
    // (an opened call: the tokens before it, the marker's included, then the call's).
    for (const GenerateResult* r : {&job.result, &job.call_result}) {
      const size_t n = std::min(r->logprobs.size(), r->tokens.size());
      for (size_t i = 0; i < n; ++i) {
        const TokenLogprobs& e = r->logprobs[i];
        TokenLogprob t;
        t.token = std::string(tok->TokenBytes(e.token));
        t.logprob = e.logprob;
        for (const auto& [id, lp] : e.top) t.top.emplace_back(tok->TokenBytes(id), lp);
        c.logprobs.push_back(std::move(t));
      }
    }
  }
  if (job.forced_call || job.call_opened) {
    // The calls: the output after the format's call prefix (one call, or several in a row).
    const chat::ChatFormat format = chat::ChatFormat::Default();
    const GenerateResult& call = job.forced_call ? job.result : job.call_result;
    std::optional<std::vector<ToolCall>> parsed =
        call.stop_reason == StopReason::kEos ? format.ParseCalls(call.text) : std::nullopt;
    const std::string before = job.forced_call ? std::string() : job.content;
    if (parsed.has_value()) {
      c.text = before;  // as it was streamed
      c.null_content = c.text.empty();
      for (ToolCall& t : *parsed) t.id = NewId("call_");
      c.tool_calls = std::move(*parsed);
      c.finish_reason = "tool_calls";
      return c;
    }
    // The budget ran out inside a call (or the client left): the text as it is.
    c.text = StrCat(before, job.forced_call ? "" : format.CallPrefix(), call.text);
    c.finish_reason = FinishReason(call.stop_reason);
    return c;
  }
  c.text = job.result.text;
  c.finish_reason = FinishReason(job.result.stop_reason);
  return c;
}

void Server::Impl::Generate(Endpoint endpoint, const httplib::Request& req,
                            httplib::Response& res) {
  if (!Authorized(req, res)) return;
  ApiRequest api;
  if (auto e = ParseRequest(endpoint, req.body, options.model_name, Limits(), &api)) {
    return SendError(res, *e);
  }
  // The n choices: requests of their own, seeds seed, seed + 1, ... (or each drawn).
  std::vector<std::shared_ptr<Job>> jobs;
  ResponseIds ids;
  ids.id = NewId(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
  ids.created = static_cast<int64_t>(std::time(nullptr));
  ids.model = options.model_name;
  for (int32_t i = 0; i < api.n; ++i) {
    GenerateRequest g = api.generate;
    if (drafter != nullptr) g.draft_max = options.draft_max;
    g.sampling.seed += static_cast<uint64_t>(i);
    StatusOr<PreparedRequest> prepared = PrepareRequest(*model, g);
    // --spec: the server's one drafter (made at start), used on the scheduler's thread only.
    if (prepared.ok() && drafter != nullptr) {
      prepared->options.drafter = drafter.get();
      prepared->options.spec_auto = spec_auto;
      prepared->options.spec_guard = spec_guard;
    }
    if (!prepared.ok()) {
      return SendError(
          res, FromStatus(prepared.status(), api.tool_choice == ToolChoice::kRequired ||
                                                     api.tool_choice == ToolChoice::kFunction
                                                 ? "tools"
                                                 : ""));
    }
    auto job = std::make_shared<Job>();
    job->id = ids.id;
    job->prepared = std::move(*prepared);
    job->adapters = AdaptersOf(api.adapter);
    job->cache_salt = api.cache_salt;
    job->priority = -api.priority;  // the scheduler admits higher values first
    if (!api.assistant_prefix.empty()) {
      EncodeOptions eo;
      eo.parse_special = true;
      StatusOr<std::vector<int32_t>> more = model->tokenizer()->Encode(api.assistant_prefix, eo);
      if (!more.ok()) return SendError(res, FromStatus(more.status()));
      job->prepared.prompt.ids.insert(job->prepared.prompt.ids.end(), more->begin(), more->end());
    }
    job->stream = api.stream;
    job->each_piece = options.stream_interval_ms == 0;
    job->forced_call =
        api.tool_choice == ToolChoice::kRequired || api.tool_choice == ToolChoice::kFunction;
    // Auto: a call the model opens continues constrained to the tools (not inside an output
    // constrained by response_format: that constraint decides the whole output).
    if (api.tool_choice == ToolChoice::kAuto && api.generate.constraint.empty()) {
      GenerateRequest call = g;  // the call runs on the engine, without the drafter
      call.constraint = api.call_constraint;
      call.stop.clear();
      StatusOr<PreparedRequest> p = PrepareRequest(*model, call);
      if (!p.ok()) return SendError(res, FromStatus(p.status(), "tools"));
      p->options.partial_constrained_output = true;
      p->options.logprobs = api.logprobs ? api.top_logprobs : -1;
      job->call = std::move(*p);
    }
    // A budget that ends a constrained output early: finish_reason "length" (OpenAI's answer).
    job->prepared.options.partial_constrained_output = true;
    job->prepared.options.ignore_stop_tokens = api.ignore_eos;
    job->prepared.options.logprobs = api.logprobs ? api.top_logprobs : -1;
    jobs.push_back(std::move(job));
  }
  const size_t n_prompt = jobs.front()->prepared.prompt.ids.size();
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
  if (Status q = dispatcher->Enqueue(jobs); !q.ok()) return SendError(res, FromStatus(q));
  if (!api.stream) {
    // A whole response: its client is watched while the jobs run, and one that goes away
    // cancels them (the scheduler stops them within a step).
    const int fd = connections->CurrentSocket();
    bool gone = false;
    std::vector<Choice> choices;
    Usage usage;
    for (size_t i = 0; i < jobs.size(); ++i) {
      Job& job = *jobs[i];
      {
        std::unique_lock<std::mutex> lock(job.mu);
        while (!job.cv.wait_for(lock, kAlivePollInterval, [&] { return job.finished; })) {
          if (gone || fd < 0 || !PeerClosed(fd)) continue;
          gone = true;
          dispatcher->Cancel(jobs);
        }
      }
      if (!job.status.ok()) {
        dispatcher->Cancel(jobs);
        return SendError(res, FromStatus(job.status));
      }
      choices.push_back(ChoiceOf(api, job, static_cast<int32_t>(i)));
      const Usage u = UsageOf(job.result, n_prompt);
      if (i == 0) usage = u;
      if (i > 0) usage.completion_tokens += u.completion_tokens;
      usage.completion_tokens += static_cast<int32_t>(job.call_result.tokens.size());
    }
    NoteTokens(req, usage.prompt_tokens, usage.completion_tokens);
    res.set_content(CompletionJson(endpoint, ids, choices, usage), "application/json");
    return;
  }
  // Streaming: the provider runs on this connection's thread until the jobs end or the client
  // goes away (a write fails: the jobs are cancelled, the scheduler stops them within a step).
  res.set_header("Cache-Control", "no-cache");
  struct StreamState {
    bool started = false;
    bool sent_text = false;  // after the first text, flush every --stream-interval
    std::vector<bool> done;  // each choice's finish event sent
    Usage usage;
  };
  auto state = std::make_shared<StreamState>();
  state->done.assign(jobs.size(), false);
  Dispatcher* sched = dispatcher.get();
  auto api_shared = std::make_shared<ApiRequest>(std::move(api));
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, jobs, state, ids, endpoint, n_prompt, sched, api_shared, reqp = &req](
          size_t, httplib::DataSink& sink) {
        const ApiRequest& request = *api_shared;
        auto cancel_all = [&] { sched->Cancel(jobs); };
        auto write = [&](const std::string& s) {
          if (sink.write(s.data(), s.size())) return true;
          cancel_all();
          return false;
        };
        if (!state->started) {
          state->started = true;
          if (endpoint == Endpoint::kChat) {
            for (size_t i = 0; i < jobs.size(); ++i) {
              if (!write(StreamRoleEvent(ids, static_cast<int32_t>(i)))) return false;
            }
          }
        }
        // Wait for news from the first choice still running (the others' are read as well).
        size_t waiting = 0;
        while (waiting < jobs.size() && state->done[waiting]) ++waiting;
        {
          Job& job = *jobs[waiting];
          std::unique_lock<std::mutex> lock(job.mu);
          const bool each = options.stream_interval_ms == 0;
          job.cv.wait_for(lock,
                          each ? std::chrono::milliseconds(1000)
                               : std::chrono::milliseconds(options.stream_interval_ms),
                          [&] {
                            return job.finished ||
                                   ((!state->sent_text || each) && !job.pending.empty());
                          });
        }
        bool wrote = false;
        for (size_t i = 0; i < jobs.size(); ++i) {
          if (state->done[i]) continue;
          Job& job = *jobs[i];
          const int32_t index = static_cast<int32_t>(i);
          std::string text;
          bool finished = false;
          {
            std::lock_guard<std::mutex> lock(job.mu);
            text.swap(job.pending);
            finished = job.finished;
          }
          if (!text.empty()) {
            wrote = true;
            state->sent_text = true;
            if (!write(StreamTextEvent(endpoint, ids, index, text, nullptr))) return false;
          }
          if (!finished) continue;
          state->done[i] = true;
          wrote = true;
          if (!job.status.ok()) {
            // An explicit error event, then the end of the stream, never a silent close.
            write(StrCat("data: ", ErrorJson(FromStatus(job.status)), "\n\n"));
            write(std::string(kStreamDone));
            cancel_all();
            sink.done();
            return true;
          }
          const Choice c = ChoiceOf(request, job, index);
          if (c.with_logprobs && !c.logprobs.empty() &&
              !write(StreamTextEvent(endpoint, ids, index, "", &c.logprobs))) {
            return false;
          }
          if (!c.tool_calls.empty()) {
            if (!write(StreamToolCallsEvent(ids, index, c.tool_calls))) return false;
          } else if (job.forced_call && !c.text.empty() &&
                     !write(StreamTextEvent(endpoint, ids, index, c.text, nullptr))) {
            return false;  // a forced call cut short: its text, as the response has it
          } else if (job.call_opened &&
                     !write(StreamTextEvent(endpoint, ids, index, c.text.substr(job.content.size()),
                                            nullptr))) {
            return false;
          }
          if (!write(StreamFinishEvent(endpoint, ids, index, c.finish_reason))) return false;
          const Usage u = UsageOf(job.result, n_prompt);
          if (i == 0) {
            const int32_t so_far = state->usage.completion_tokens;
            state->usage = u;
            state->usage.completion_tokens += so_far;
          } else {
            state->usage.completion_tokens += u.completion_tokens;
          }
          state->usage.completion_tokens += static_cast<int32_t>(job.call_result.tokens.size());
        }
        if (std::find(state->done.begin(), state->done.end(), false) != state->done.end()) {
          // Nothing new: a probe that the client is still there.
          if (!wrote && !sink.is_writable()) {
            cancel_all();
            return false;
          }
          return true;
        }
        NoteTokens(*reqp, state->usage.prompt_tokens, state->usage.completion_tokens);
        if (request.include_usage && !write(StreamUsageEvent(endpoint, ids, state->usage))) {
          return false;
        }
        if (!write(std::string(kStreamDone))) return false;
        sink.done();
        return true;
      },
      [jobs, sched](bool success) {
        if (!success) {
          sched->Cancel(jobs);
        }
      });
}

std::string Server::Impl::MetricsText() {
  std::string out;
  auto metric = [&](std::string_view name, std::string_view type, std::string_view help,
                    auto value) {
    out += StrCat("# HELP pocket_", name, " ", help, "\n# TYPE pocket_", name, " ", type,
                  "\npocket_", name, " ", value, "\n");
  };
  {
    std::lock_guard<std::mutex> lock(metrics.mu);
    out +=
        "# HELP pocket_http_responses_total HTTP responses by path and status.\n"
        "# TYPE pocket_http_responses_total counter\n";
    for (const auto& [key, n] : metrics.responses) {
      out += StrCat("pocket_http_responses_total{path=\"", key.first, "\",status=\"", key.second,
                    "\"} ", n, "\n");
    }
  }
  const Metrics& m = metrics;
  metric("prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
         m.prompt_tokens.load());
  metric("prompt_tokens_cached_total", "counter",
         "Prompt tokens reused from a session's context or the prefix cache.",
         m.cached_tokens.load());
  metric("generated_tokens_total", "counter", "Completion tokens of finished requests.",
         m.generated_tokens.load());
  metric("decode_tokens_total", "counter", "Decode rows evaluated (one token each).",
         m.decode_rows.load());
  metric("prefill_tokens_total", "counter", "Prompt rows evaluated.", m.prefill_rows.load());
  metric("engine_steps_total", "counter", "Batched forward passes.", m.steps.load());
  metric("decode_tokens_per_second", "gauge",
         "Decode tokens per second, all requests, over the last 10 s.", metrics.TokensPerSecond());
  metric("requests_running", "gauge", "Requests generating now.", m.running.load());
  metric("requests_queued", "gauge", "Requests waiting for a free slot.", dispatcher->queued());
  metric("requests_cancelled_total", "counter", "Requests whose client went away.",
         m.cancelled.load());
  metric("kv_bytes", "gauge",
         "KV-cache bytes held by the sessions (generating, idle and scoring) and the prefix "
         "cache.",
         m.kv_bytes.load() + static_cast<int64_t>(scorer->kv_bytes()));
  metric("prefix_cache_bytes", "gauge",
         "Bytes of the prefix cache's entries (pages shared with sessions counted here too).",
         m.prefix_bytes.load());
  metric("prefix_cache_lookups_total", "counter", "Prefix-cache lookups.", m.prefix_lookups.load());
  metric("prefix_cache_hits_total", "counter", "Prefix-cache lookups that restored a prefix.",
         m.prefix_hits.load());
  metric("prefix_cache_hit_tokens_total", "counter", "Positions restored from the prefix cache.",
         m.prefix_hit_tokens.load());
  metric("kv_swaps_out_total", "counter", "Sessions saved to disk under the KV budget.",
         m.swaps_out.load());
  metric("kv_swaps_in_total", "counter", "Sessions restored from disk.", m.swaps_in.load());
  metric("kv_swapped_sessions", "gauge", "Sessions saved to disk under the KV budget now.",
         m.swapped_sessions.load());
  metric("kv_swapped_bytes", "gauge", "Bytes of the session files swapped to disk now.",
         m.swapped_bytes.load());
  metric("process_resident_bytes", "gauge", "Resident memory of the server process.",
         ReadProcessMemory().rss_bytes);
  const ConnectionCounts cc = connections->Counts();
  metric("connections_open", "gauge", "HTTP connections open now.", cc.open);
  metric("connections_total", "counter", "HTTP connections accepted and served.", cc.accepted);
  metric("connections_refused_total", "counter",
         "Connections answered 503 beyond --max-connections and the probes' reserve.", cc.refused);
  metric("connections_timed_out_total", "counter",
         "Connections closed because a request did not arrive within --request-timeout.",
         cc.timed_out);
  metric("draft_tokens_total", "counter", "Tokens drafted for speculative decoding.",
         m.drafted_tokens.load());
  metric("draft_tokens_accepted_total", "counter", "Drafted tokens the model kept.",
         m.accepted_draft_tokens.load());
  return out;
}

void Server::Impl::Routes() {
  http.set_payload_max_length(options.max_body_bytes);
  // A client that reads nothing for 10 s loses its connection (a stream's request is then
  // cancelled); every request's headers and body must arrive within --request-timeout, and idle
  // keep-alive connections close after 5 s (serve/connections.h), so a slow or idle client
  // holds a connection for a bounded time and never the scheduler. Headers are limited to
  // 8 KiB a line by cpp-httplib (a longer one is a 400).
  http.set_read_timeout(10);
  http.set_write_timeout(10);
  http.set_keep_alive_timeout(5);
  http.set_keep_alive_max_count(1000);
  ConnectionLimits limits;
  limits.max_connections = std::max(1, options.max_connections);
  limits.request_timeout = std::chrono::milliseconds(options.request_timeout_ms);
  limits.keep_alive = std::chrono::seconds(5);
  connections = std::make_unique<Connections>(limits, options.log);
  http.new_task_queue = [this] { return new ConnectionQueue(connections.get()); };
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
  policy.bind_host = options.host;
  policy.allowed_hosts = options.allowed_hosts;
  policy.cors_origins = options.cors_origins;
  // Before the body is read: the browser policy (Host, Origin, preflight), methods a route does
  // not take (405), and the request id.
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    {
      std::lock_guard<std::mutex> lock(arrivals_mu);
      arrivals[&req] = Arrival{std::chrono::steady_clock::now()};
    }
    {
      std::lock_guard<std::mutex> lock(drain_mu);
      ++in_flight;  // until the logger, which cpp-httplib calls after the response's last byte
    }
    std::string id = ClientRequestId(req.get_header_value("X-Request-Id"));
    if (id.empty()) id = NewId("req-");
    res.set_header("X-Request-Id", id);
    // A request without a body has arrived whole; one with a body once its handler runs.
    if (req.method != "POST" && req.method != "PUT" && req.method != "PATCH") {
      connections->RequestArrived();
    }
    auto refuse = [this, &res](int status, std::string message, std::string code) {
      connections->RequestArrived();
      ApiError e;
      e.http_status = status;
      e.message = std::move(message);
      e.code = std::move(code);
      SendError(res, e);
      if (status == 503) res.set_header("Retry-After", "1");
      res.set_header("Connection", "close");  // the body, if any, is never read
      return httplib::Server::HandlerResponse::Handled;
    };
    const std::string host_refusal = HostRefusal(policy, req.get_header_value("Host"));
    if (!host_refusal.empty()) return refuse(403, host_refusal, "host_not_allowed");
    const bool probe = req.path == "/health" || req.path == "/metrics";
    if (!probe && connections->CurrentKind() == ServingKind::kProbesOnly) {
      return refuse(503,
                    StrCat("too many connections (--max-connections ", options.max_connections,
                           "); retry later"),
                    "too_many_connections");
    }
    if (!ready.load()) {
      if (req.path == "/health") {
        connections->RequestArrived();
        res.status = 503;
        res.set_header("Retry-After", "1");
        res.set_content(R"({"status":"loading"})", "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }
      return refuse(503, "the model is loading; retry shortly", "model_loading");
    }
    if (draining.load() && req.path != "/metrics") {
      // Load balancers read /health's 503; clients retry elsewhere or after the restart.
      if (req.path == "/health") {
        res.status = 503;
        res.set_header("Retry-After", "1");
        res.set_content(R"({"status":"draining"})", "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }
      return refuse(503, "the server is shutting down", "server_draining");
    }
    const std::string allowed = AllowedMethods(req.path);
    if (req.has_header("Origin")) {
      const std::string origin = req.get_header_value("Origin");
      std::optional<std::string> allow = CorsAllowOrigin(policy, origin);
      if (!allow) {
        return refuse(403,
                      StrCat("cross-origin requests from '", origin.substr(0, 100),
                             "' are not served (pocket serve --cors-origin ORIGIN allows one)"),
                      "origin_not_allowed");
      }
      res.set_header("Access-Control-Allow-Origin", *allow);
      res.set_header("Vary", "Origin");
      if (req.method == "OPTIONS" && !allowed.empty()) {  // a preflight
        res.set_header("Access-Control-Allow-Methods", allowed + ", OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id");
        res.set_header("Access-Control-Max-Age", "600");
        res.status = 204;
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (allowed.empty()) return httplib::Server::HandlerResponse::Unhandled;  // 404 later
    if (req.method == "OPTIONS") {
      res.set_header("Allow", allowed + ", OPTIONS");
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    const bool head_of_get = req.method == "HEAD" && allowed == "GET";
    if (req.method != allowed && !head_of_get) {
      res.set_header("Allow", allowed + ", OPTIONS");
      return refuse(405, StrCat(req.path, " takes ", allowed, ", not ", req.method.substr(0, 16)),
                    "method_not_allowed");
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    connections->ResponseSent();  // cpp-httplib logs after the response's last byte
    metrics.CountResponse(req.path, res.status);
    Arrival arrived{std::chrono::steady_clock::now()};
    bool routed = false;  // a request cpp-httplib refused before routing was never counted
    {
      std::lock_guard<std::mutex> lock(arrivals_mu);
      auto it = arrivals.find(&req);
      if (it != arrivals.end()) {
        arrived = it->second;
        arrivals.erase(it);
        routed = true;
      }
    }
    bool idle = false;
    if (routed) {
      {
        std::lock_guard<std::mutex> lock(drain_mu);
        idle = --in_flight == 0;
      }
      drain_cv.notify_all();
    }
    // A large request's memory goes back to the OS: when the server falls idle, and at most
    // once a second under load (glibc keeps freed memory in each thread's arena otherwise).
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::steady_clock::now().time_since_epoch())
                               .count();
    int64_t last = last_trim_ms.load();
    if ((idle || now_ms - last >= 1000) && last_trim_ms.compare_exchange_strong(last, now_ms)) {
      TrimHeap(uint64_t{4} << 20);
    }
    if (!options.log) return;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now() - arrived.at)
                        .count();
    // The path only up to its query: a query string may hold what a client meant to keep.
    const std::string path = req.path.substr(0, std::min<size_t>(req.path.find('?'), 200));
    std::string tokens;
    if (arrived.prompt_tokens >= 0) {
      tokens = StrCat(" prompt ", arrived.prompt_tokens, " completion ",
                      std::max<int64_t>(arrived.completion_tokens, 0));
    }
    options.log(StrCat("http ", res.get_header_value("X-Request-Id"), " ", req.method.substr(0, 16),
                       " ", path, " ", res.status, " ", ms, " ms", tokens));
  });
  http.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    res.set_content(MetricsText(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  http.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res)) return;
    json data = json::array({{{"id", options.model_name},
                              {"object", "model"},
                              {"created", 0},
                              {"owned_by", "pocket"}}});
    for (const auto& [name, set] : options.adapters) {
      data.push_back({{"id", StrCat(options.model_name, ":", name)},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "pocket"},
                      {"parent", options.model_name},
                      {"adapter", AdapterSetName(set)}});
    }
    res.set_content(json{{"object", "list"}, {"data", std::move(data)}}.dump(
                        -1, ' ', false, json::error_handler_t::replace),
                    "application/json");
  });
  Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(Endpoint::kChat, req, res);
  });
  Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    Generate(Endpoint::kCompletion, req, res);
  });
  Post("/v1/score",
       [this](const httplib::Request& req, httplib::Response& res) { Score(false, req, res); });
  Post("/v1/classify",
       [this](const httplib::Request& req, httplib::Response& res) { Score(true, req, res); });
  Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res) || NestsTooDeep(req, res)) return;
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
    if (tok == nullptr) return SendError(res, FromStatus(InternalError("no tokenizer")));
    EncodeOptions eo;
    eo.add_bos = add_special && tok->spec().add_bos;
    eo.parse_special = false;
    StatusOr<std::vector<int32_t>> ids = tok->Encode(body["content"].get<std::string>(), eo);
    if (!ids.ok()) return SendError(res, FromStatus(ids.status(), "content"));
    res.set_content(json{{"tokens", *ids}}.dump(), "application/json");
  });
  Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (!Authorized(req, res) || NestsTooDeep(req, res)) return;
    const json body = json::parse(req.body, nullptr, false);
    ApiError bad;
    bad.param = "tokens";
    bad.message = "the body must be a JSON object with 'tokens', an array of token ids";
    if (body.is_discarded() || !body.is_object() || !body.contains("tokens") ||
        !body["tokens"].is_array()) {
      return SendError(res, bad);
    }
    const Tokenizer* tok = model->tokenizer();
    if (tok == nullptr) return SendError(res, FromStatus(InternalError("no tokenizer")));
    std::vector<int32_t> ids;
    for (const json& t : body["tokens"]) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok->vocab_size()) {
        bad.message = StrCat("'tokens' must hold token ids from 0 to ", tok->vocab_size() - 1);
        return SendError(res, bad);
      }
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    StatusOr<std::string> text = tok->Decode(ids);
    if (!text.ok()) return SendError(res, FromStatus(text.status(), "tokens"));
    res.set_content(json{{"content", *text}}.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                                                  json::error_handler_t::replace),
                    "application/json");
  });
}

}  // namespace pocket::serve
