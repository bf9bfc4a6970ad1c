#include "runtime/engine.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <system_error>
#include <utility>

#include "base/output_file.h"
#include "base/str.h"
#include "base/timer.h"
#include "runtime/engine_request.h"
#include "runtime/token_step.h"

namespace pocket {

namespace {

// Bytes of the pages that hold positions [0, n) of `kv`.
size_t PagesBytes(const KvCache& kv, size_t n) {
  return (n + kKvPagePositions - 1) / kKvPagePositions * kv.page_bytes();
}

}  // namespace

Engine::Engine(std::shared_ptr<const Model> model, std::shared_ptr<ThreadPool> pool,
               ForwardScratch own, ForwardScratch* scratch, const EngineOptions& options)
    : model_(std::move(model)),
      pool_(std::move(pool)),
      own_scratch_(std::move(own)),
      scratch_(scratch != nullptr ? scratch : &own_scratch_),
      options_(options) {
  const size_t rows = static_cast<size_t>(options.max_chunk + options.max_requests);
  tokens_.reserve(rows);
  segments_.reserve(static_cast<size_t>(options.max_requests));
  out_rows_.reserve(static_cast<size_t>(options.max_requests));
  in_batch_.reserve(static_cast<size_t>(options.max_requests));
  requests_.reserve(static_cast<size_t>(options.max_requests));
  if (options.max_requests > 1) {
    logits_.resize(static_cast<size_t>(options.max_requests) *
                   static_cast<size_t>(model_->config().vocab_size));
  }
  std::random_device rd;
  swap_tag_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

// Requests never taken are dropped; their sessions (alive: a session's end detaches it) are handed
// back as they are, a swapped one loaded from its file first (whatever the budget), and the swap
// files are removed.
Engine::~Engine() {
  for (Session* s : parked_) s->engine_parked_ = nullptr;
  for (const auto& r : requests_) {
    r->session->engine_request_ = nullptr;
    if (!r->swapped) continue;
    const StatusOr<std::string> loaded = r->session->Load(r->swap_path);
    static_cast<void>(loaded);  // on failure the session stays empty (it was reset when saved)
    std::error_code ec;
    std::filesystem::remove(r->swap_path, ec);
  }
  if (own_swap_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(swap_dir_, ec);
  }
}

void Engine::Detach(const Session* session) {
  for (auto it = requests_.begin(); it != requests_.end(); ++it) {
    if ((*it)->session != session) continue;
    if ((*it)->swapped) {
      std::error_code ec;
      std::filesystem::remove((*it)->swap_path, ec);
    }
    requests_.erase(it);
    return;
  }
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(std::shared_ptr<const Model> model,
                                                 std::shared_ptr<ThreadPool> pool,
                                                 const EngineOptions& options) {
  if (!model) return InvalidArgumentError("no model");
  if (!pool) return InvalidArgumentError("no thread pool");
  if (options.max_requests <= 0 || options.max_requests > 1024) {
    return InvalidArgumentError("the engine's request limit must be 1 to 1024, got ",
                                options.max_requests);
  }
  if (options.max_chunk <= 0) return InvalidArgumentError("the engine's chunk must be positive");
  POCKET_ASSIGN_OR_RETURN(
      ForwardScratch scratch,
      ForwardScratch::Create(*model, options.max_chunk + options.max_requests, pool->n_threads()));
  return std::unique_ptr<Engine>(
      new Engine(std::move(model), std::move(pool), std::move(scratch), nullptr, options));
}

StatusOr<std::unique_ptr<Engine>> Engine::ForSession(Session& session) {
  EngineOptions options;
  options.max_requests = 1;
  options.max_chunk = session.n_batch_;
  return std::unique_ptr<Engine>(
      new Engine(session.model_, session.pool_, ForwardScratch(), &session.scratch_, options));
}

StatusOr<int64_t> Engine::Submit(Session* session, std::span<const int32_t> prompt,
                                 const GenerateOptions& options, StreamCallback on_text) {
  if (stepping_) return FailedPreconditionError("Submit from inside Step (a stream callback)");
  if (session == nullptr) return InvalidArgumentError("no session");
  if (&session->model() != model_.get()) {
    return InvalidArgumentError("the session belongs to another model than the engine's");
  }
  if (session->pool_ != pool_) {
    return InvalidArgumentError("the session computes on another thread pool than the engine's");
  }
  if (options.drafter != nullptr) {
    return UnimplementedError("speculative decoding is not batched: run it with Session::Generate");
  }
  POCKET_RETURN_IF_ERROR(options.sampling.Validate());
  if (options.max_tokens < 0) return InvalidArgumentError("max tokens must be >= 0");
  if (prompt.empty()) return InvalidArgumentError("the prompt is empty");
  if (session->n_batch_ > options_.max_chunk) {
    return InvalidArgumentError("the session's prefill chunk of ", session->n_batch_,
                                " tokens exceeds the engine's ", options_.max_chunk);
  }
  if (prompt.size() > static_cast<size_t>(session->kv_.n_ctx())) {
    return OutOfRangeError("the prompt is ", prompt.size(), " tokens, longer than the context of ",
                           session->kv_.n_ctx(), " tokens");
  }
  const int32_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab) {
      return OutOfRangeError("prompt token ", i, " is ", prompt[i], ", outside the vocabulary of ",
                             vocab);
    }
  }
  for (const auto& r : requests_) {
    if (r->session == session) {
      return FailedPreconditionError("the session is in request ", r->id, " already");
    }
  }
  if (session->engine_request_ != nullptr) {
    return FailedPreconditionError("the session is in a request of another engine already");
  }
  if (session->engine_parked_ != nullptr) session->engine_parked_->Unpark(session);
  if (static_cast<int32_t>(requests_.size()) >= options_.max_requests) {
    return ResourceExhaustedError("the engine holds ", requests_.size(),
                                  " requests (active or not taken), its limit");
  }
  if (options_.kv_budget_bytes > 0) {
    const size_t positions = std::min(prompt.size() + static_cast<size_t>(options.max_tokens),
                                      static_cast<size_t>(session->kv_.n_ctx()));
    const size_t need = PagesBytes(session->kv_, positions);
    if (need > options_.kv_budget_bytes) {
      return ResourceExhaustedError("the request needs ", HumanBytes(need), " of KV cache for ",
                                    positions, " positions (", prompt.size(), " prompt + up to ",
                                    options.max_tokens,
                                    " new tokens), more than the engine's KV budget of ",
                                    HumanBytes(options_.kv_budget_bytes));
    }
  }
  // The scratch's adapter buffers, sized for the set now (never on a step).
  POCKET_RETURN_IF_ERROR(scratch_->ReserveAdapters(*model_, AdapterMidFloats(session->adapters_)));

  auto r = std::make_unique<Request>();
  r->id = next_id_++;
  r->session = session;
  r->prompt.assign(prompt.begin(), prompt.end());
  r->options = options;
  r->on_text = std::move(on_text);
  r->result.seed = options.sampling.seed;
  // Session::PrefillPrompt's reuse: the common prefix with the context, less the last token when
  // its logits are not at hand.
  Session& s = *session;
  size_t common = 0;
  while (common < s.history_.size() && common < prompt.size() &&
         s.history_[common] == prompt[common]) {
    ++common;
  }
  if (common == prompt.size() && s.logits_at_ != common) --common;
  s.Truncate(common);
  // Under a budget a session keeps no spare pages: they would be counted and never used.
  if (options_.kv_budget_bytes > 0) s.ReleaseKv();
  POCKET_ASSIGN_OR_RETURN(common, s.RestorePrefix(prompt, common, &r->result));
  r->result.n_reused_tokens = static_cast<int32_t>(std::min(common, prompt.size() - 1));
  r->result.n_prompt_tokens = static_cast<int32_t>(prompt.size()) - r->result.n_reused_tokens;
  r->at = common;
  r->start = common;
  r->phase = common == prompt.size() ? Request::Phase::kReady : Request::Phase::kPrefill;
  const int64_t id = r->id;
  requests_.push_back(std::move(r));
  session->engine_request_ = this;
  return id;
}

void Engine::Finish(Request& r, bool run_finish) {
  if (run_finish && r.step != nullptr && r.status.ok()) {
    r.status = r.step->Finish(r.options.max_tokens);
    r.result.decode_us = r.watch.elapsed_us();
    // The context's keys and values into the prefix cache, the reply's too, after the output.
    if (r.status.ok() && !r.swapped) r.session->StoreContext();
  }
  r.phase = Request::Phase::kDone;
  r.session->cancel_.store(false, std::memory_order_relaxed);
}

void Engine::Fail(Request& r, Status status) {
  r.status = std::move(status);
  Finish(r, false);
}

void Engine::Advance(Request& r) {
  if (r.scoring) return BeginScores(r);
  if (r.classifying) return Finish(r, false);  // the labels were read after the pass
  Session& s = *r.session;
  if (r.step == nullptr) {
    r.result.prefill_us = r.watch.elapsed_us();
    r.watch.Reset();
    // The last token is sampled, never evaluated: the context yields one more than its free rows.
    const int32_t room = s.n_ctx() - static_cast<int32_t>(s.history_.size()) + 1;
    r.step = std::make_unique<TokenStep>(*model_, r.options, r.on_text, &r.result, &s.masked_,
                                         &s.mask_bits_, room);
    if (!s.history_.empty()) r.step->Follow(s.history_.back());
  }
  // Generate's decode loop, one iteration.
  if (r.n_decoded >= r.options.max_tokens) return Finish(r, true);
  if (s.cancelled()) {
    r.result.stop_reason = StopReason::kCancelled;
    return Finish(r, true);
  }
  StatusOr<int32_t> token = r.step->Choose(s.logits_, s.history_);
  if (!token.ok()) return Fail(r, token.status());
  if (*token < 0) return Finish(r, true);
  StatusOr<bool> go_on = r.step->Accept(*token);
  if (!go_on.ok()) return Fail(r, go_on.status());
  if (!*go_on) return Finish(r, true);
  if (s.history_.size() >= static_cast<size_t>(s.kv_.n_ctx())) {
    r.result.stop_reason = StopReason::kContextFull;
    return Finish(r, true);
  }
  // The last token of the budget needs no forward pass: nothing samples from its logits.
  if (r.n_decoded + 1 == r.options.max_tokens) return Finish(r, true);
  ++r.n_decoded;
  r.pending = *token;
  r.phase = Request::Phase::kDecode;
}

StatusOr<int32_t> Engine::Step() {
  if (stepping_) return FailedPreconditionError("Step from inside Step (a stream callback)");
  stepping_ = true;
  ++steps_;
  struct Done {
    bool* flag;
    ~Done() { *flag = false; }
  } done{&stepping_};
  planned_bytes_ = 0;
  if (options_.kv_budget_bytes > 0) {
    for (auto& r : requests_) {  // a swapped request cancelled ends where it is
      if (!r->swapped || r->phase == Request::Phase::kDone || !r->session->cancelled()) continue;
      r->result.stop_reason = StopReason::kCancelled;
      Finish(*r, r->phase != Request::Phase::kPrefill);
    }
    RestoreWaiting();
  }
  for (auto& r : requests_) {
    if (r->phase == Request::Phase::kReady && !r->swapped) Advance(*r);
  }
  tokens_.clear();
  segments_.clear();
  out_rows_.clear();
  in_batch_.clear();
  const int32_t max_rows = scratch_->max_batch();
  // Who runs is decided in the order the requests came, so the budget's pages go to the older
  // ones first (an older request's chunk before a newer one's decode row; MakeRoom evicts only
  // requests newer than the one it plans for). Decode rows always fit (max_chunk + max_requests
  // rows); prefill chunks while they fit next to every decode row.
  int32_t decode_rows = 0;
  for (const auto& r : requests_) {
    decode_rows += r->phase == Request::Phase::kDecode && !r->swapped ? 1 : 0;
  }
  int32_t prefill_rows = 0;
  bool score_group = false;  // one score request's candidates a step
  for (auto& r : requests_) {
    const bool decode = r->phase == Request::Phase::kDecode;
    const bool score = r->phase == Request::Phase::kScore;
    if ((!decode && !score && r->phase != Request::Phase::kPrefill) || r->swapped) continue;
    if (score && score_group) continue;
    Session& s = *r->session;
    if (s.cancelled()) {
      if (r->scoring || r->classifying) {
        Fail(*r, CancelledError(r->scoring ? "scoring" : "classifying", " was cancelled"));
        continue;
      }
      r->result.stop_reason = StopReason::kCancelled;
      // As Generate: a prefill cancelled returns at once, with no stream to finish.
      Finish(*r, decode);
      if (decode) --decode_rows;
      continue;
    }
    const size_t h = s.history_.size();
    const size_t n = decode  ? 1
                     : score ? static_cast<size_t>(NextScoreGroup(*r))
                             : std::min(r->prompt.size() - r->at, ChunkOf(*r));
    if (!decode && decode_rows + prefill_rows + static_cast<int32_t>(n) > max_rows) {  // next step
      continue;
    }
    if (!MakeRoom(*r, static_cast<int32_t>(h), static_cast<int32_t>(h + n))) {
      if (decode) --decode_rows;
      continue;
    }
    if (!decode) prefill_rows += static_cast<int32_t>(n);
    score_group = score_group || score;
    in_batch_.push_back(r.get());
  }
  // The batch: decode rows first, then the chunks (each group in the requests' order), then a
  // score request's candidates (segments of their own, every row's logits out).
  std::stable_partition(in_batch_.begin(), in_batch_.end(),
                        [](const Request* r) { return r->phase == Request::Phase::kDecode; });
  Request* scored = nullptr;
  if (score_group) {
    const auto it = std::find_if(in_batch_.begin(), in_batch_.end(), [](const Request* r) {
      return r->phase == Request::Phase::kScore;
    });
    scored = *it;
    in_batch_.erase(it);
  }
  for (Request* r : in_batch_) {
    Session& s = *r->session;
    const bool decode = r->phase == Request::Phase::kDecode;
    const size_t n = decode ? 1 : std::min(r->prompt.size() - r->at, ChunkOf(*r));
    BatchSegment seg{&s.kv_, static_cast<int32_t>(tokens_.size()),
                     static_cast<int32_t>(tokens_.size() + n),
                     static_cast<int32_t>(s.history_.size())};
    seg.adapters = &s.adapters_;
    if (decode) {
      tokens_.push_back(r->pending);
    } else {
      tokens_.insert(tokens_.end(), r->prompt.begin() + static_cast<std::ptrdiff_t>(r->at),
                     r->prompt.begin() + static_cast<std::ptrdiff_t>(r->at + n));
    }
    segments_.push_back(seg);
  }
  for (const BatchSegment& seg : segments_) out_rows_.push_back(seg.row_end - 1);
  if (scored != nullptr) AppendScoreGroup(*scored);
  last_decode_rows_ = static_cast<int32_t>(tokens_.size()) - prefill_rows;
  last_rows_ = static_cast<int32_t>(tokens_.size());
  if (tokens_.empty() && options_.kv_budget_bytes > 0) {
    // Nothing could run (never expected: the oldest request can always evict the others). Fail
    // the oldest waiting request rather than loop without progress.
    for (auto& r : requests_) {
      if (r->phase == Request::Phase::kDone || r->phase == Request::Phase::kReady) continue;
      Fail(*r, ResourceExhaustedError("no request fits the KV budget of ",
                                      HumanBytes(options_.kv_budget_bytes), " (",
                                      HumanBytes(ResidentBytes()), " held)"));
      break;
    }
  }
  if (!tokens_.empty()) {
    ForwardBatch batch;
    batch.tokens = tokens_;
    batch.segments = segments_;
    batch.output_rows = out_rows_;
    // A classify request's last chunk: the final-norm hidden states of the output rows too.
    for (size_t i = 0; i < in_batch_.size(); ++i) {
      const Request& r = *in_batch_[i];
      if (r.classifying && r.at + static_cast<size_t>(segments_[i].n_rows()) == r.prompt.size()) {
        batch.final_hidden = hidden_.data();
      }
    }
    // One segment (a request alone, Session::Generate): its logits go straight to its session.
    const bool direct = in_batch_.size() == 1 && scored == nullptr;
    batch.logits = direct ? in_batch_[0]->session->logits_.data() : logits_.data();
#if POCKET_FORWARD_TRACE
    if (direct) batch.trace = &in_batch_[0]->session->trace_;
#endif
    const Status pass = Forward(*model_, *scratch_, *pool_, batch);
    const size_t vocab = static_cast<size_t>(model_->config().vocab_size);
    for (size_t i = 0; i < in_batch_.size(); ++i) {
      Request& r = *in_batch_[i];
      Session& s = *r.session;
      if (!pass.ok()) {
        if (direct) s.logits_at_ = 0;  // its logits may be half written
        Fail(r, pass);
        continue;
      }
      const BatchSegment& seg = segments_[i];
      if (!direct) {
        std::memcpy(s.logits_.data(), logits_.data() + i * vocab, vocab * sizeof(float));
      }
      s.history_.insert(s.history_.end(), tokens_.begin() + seg.row_begin,
                        tokens_.begin() + seg.row_end);
      s.logits_at_ = s.history_.size();
      if (r.phase == Request::Phase::kPrefill) {
        r.at += static_cast<size_t>(seg.n_rows());
        if (r.options.on_prefill_progress) {
          // As Generate: counted from the first token evaluated.
          r.options.on_prefill_progress(static_cast<int32_t>(r.at - r.start),
                                        static_cast<int32_t>(r.prompt.size() - r.start));
        }
        if (r.at == r.prompt.size()) {
          r.phase = Request::Phase::kReady;
          if (r.classifying) {
            const size_t d = static_cast<size_t>(model_->config().d_model);
            r.labels = ScoreLabels(s.classifier(), hidden_.data() + i * d);
          }
        }
      } else {
        r.phase = Request::Phase::kReady;
      }
    }
    if (scored != nullptr) {
      if (pass.ok()) {
        ReadScoreGroup(*scored, logits_.data() + in_batch_.size() * vocab);
      } else {
        Fail(*scored, pass);
      }
    }
  }
  for (auto& r : requests_) {
    if (r->phase == Request::Phase::kReady && !r->swapped) Advance(*r);
  }
  // After Advance: a finished request stored its prompt in the prefix cache (a partial page
  // copied, outside the step's plan): back within the budget by saving finished sessions, then
  // dropping the caches' least recently used entries.
  if (options_.kv_budget_bytes > 0) {
    while (ResidentBytes() > options_.kv_budget_bytes) {
      Request* idle = nullptr;
      for (auto it = requests_.rbegin(); it != requests_.rend() && idle == nullptr; ++it) {
        if (!(*it)->swapped && (*it)->phase == Request::Phase::kDone) idle = it->get();
      }
      if (idle != nullptr && SwapOut(*idle).ok()) continue;
      if (EvictParked()) continue;
      if (!EvictPrefixEntry()) break;
    }
    stats_.peak_kv_bytes = std::max(stats_.peak_kv_bytes, ResidentBytes());
  }
  return n_active();
}

size_t Engine::ResidentBytes() const {
  // The pages of the sessions in memory (in requests or parked) and of their prefix caches'
  // entries; a page shared by several (a cached prefix) counts once.
  size_t bytes = 0;
  shared_pages_.clear();
  counted_caches_.clear();
  auto count = [&](const Session& s) {
    const PrefixCache* cache = s.prefix_cache_.get();
    if (cache != nullptr &&
        std::find(counted_caches_.begin(), counted_caches_.end(), cache) == counted_caches_.end()) {
      counted_caches_.push_back(cache);
      cache->Pages(shared_pages_);
    }
  };
  for (const auto& r : requests_) {
    count(*r->session);
    if (r->swapped) continue;
    bytes += r->session->kv_.private_bytes();
    r->session->kv_.SharedPages(shared_pages_);
  }
  for (const Session* s : parked_) {
    count(*s);
    bytes += s->kv_.private_bytes();
    s->kv_.SharedPages(shared_pages_);
  }
  std::sort(shared_pages_.begin(), shared_pages_.end());
  const auto last = std::unique(shared_pages_.begin(), shared_pages_.end());
  for (auto it = shared_pages_.begin(); it != last; ++it) bytes += it->second;
  return bytes;
}

void Engine::Park(Session* session) {
  if (session->engine_parked_ == this) return;
  if (session->engine_parked_ != nullptr) session->engine_parked_->Unpark(session);
  parked_.push_back(session);
  session->engine_parked_ = this;
  // Within the budget again at once: the parked contexts (this one last), then cache entries.
  if (options_.kv_budget_bytes > 0 && !stepping_) {
    while (ResidentBytes() > options_.kv_budget_bytes) {
      if (!EvictParked() && !EvictPrefixEntry()) break;
    }
  }
}

void Engine::Unpark(Session* session) {
  const auto it = std::find(parked_.begin(), parked_.end(), session);
  if (it != parked_.end()) parked_.erase(it);
  if (session->engine_parked_ == this) session->engine_parked_ = nullptr;
}

bool Engine::EvictParked() {
  if (parked_.empty()) return false;
  Session* s = parked_.front();
  Unpark(s);
  s->ShareWithPrefixCache();  // a failure is the cache's loss (its stats), the context's end
  s->Reset();
  ++stats_.parked_evictions;
  return true;
}

bool Engine::MakeRoom(Request& r, int32_t begin, int32_t end) {
  const size_t budget = options_.kv_budget_bytes;
  if (budget == 0) return true;
  // (A zero need still evicts while over the budget: pages a prefix restore copied in.)
  const size_t need = r.session->kv_.ReserveBytes(begin, end);
  auto in_batch = [this](const Request* q) {
    return std::find(in_batch_.begin(), in_batch_.end(), q) != in_batch_.end();
  };
  size_t resident = ResidentBytes();
  while (resident + planned_bytes_ + need > budget) {
    // A victim: a finished request's session (idle) first, else the least recently used entry of
    // a prefix cache, else the newest active request submitted after r that is not in this
    // step's batch nor restored in this step (RestoreWaiting left room for r's rows).
    Request* victim = nullptr;
    for (auto it = requests_.rbegin(); it != requests_.rend() && victim == nullptr; ++it) {
      Request* q = it->get();
      if (q != &r && !q->swapped && q->phase == Request::Phase::kDone) victim = q;
    }
    if (victim == nullptr && (EvictParked() || EvictPrefixEntry())) {
      // then the idle sessions' contexts, then the prefix caches' entries
      resident = ResidentBytes();
      continue;
    }
    if (victim == nullptr) {
      for (auto it = requests_.rbegin(); it != requests_.rend() && it->get() != &r; ++it) {
        Request* q = it->get();
        if (!q->swapped && q->phase != Request::Phase::kDone && !in_batch(q) &&
            q->restored_step != steps_) {
          victim = q;
          break;
        }
      }
    }
    if (victim == nullptr) break;
    const Status saved = SwapOut(*victim);
    if (!saved.ok()) {
      Fail(r, Status(saved.code(), StrCat("the KV budget of ", HumanBytes(budget),
                                          " is full and a session could not be saved to make "
                                          "room: ",
                                          saved.message())));
      return false;
    }
    resident = ResidentBytes();
  }
  if (resident + planned_bytes_ + need <= budget) {
    planned_bytes_ += need;
    return true;
  }
  // Alone (nothing else in memory, nothing planned) and still too large: it can never run.
  if (planned_bytes_ == 0 && resident == r.session->kv_.bytes()) {
    Fail(r, ResourceExhaustedError("the session needs ", HumanBytes(resident + need),
                                   " of KV cache for ", end,
                                   " positions, more than the KV budget of ", HumanBytes(budget)));
  }
  return false;  // it waits for a later step
}

bool Engine::EvictPrefixEntry() {
  for (const auto& r : requests_) {
    PrefixCache* cache = r->session->prefix_cache_.get();
    if (cache != nullptr && cache->EvictLeastRecentlyUsed()) return true;
  }
  for (Session* s : parked_) {
    PrefixCache* cache = s->prefix_cache_.get();
    if (cache != nullptr && cache->EvictLeastRecentlyUsed()) return true;
  }
  return false;
}

Status Engine::SwapOut(Request& r) {
  Session& s = *r.session;
  // Swapped sessions hold users' conversations: in a private directory, --swap-dir (created
  // 0700 when missing) or a fresh 0700 one under $TMPDIR that the engine removes at its end.
  if (swap_dir_.empty()) {
    if (!options_.swap_dir.empty()) {
      POCKET_RETURN_IF_ERROR(CreatePrivateDirectories(options_.swap_dir));
      swap_dir_ = options_.swap_dir;
    } else {
      POCKET_ASSIGN_OR_RETURN(swap_dir_, MakePrivateTempDirectory("pocket-swap-"));
      own_swap_dir_ = true;
    }
  }
  const std::filesystem::path dir = swap_dir_;
  char tag[17];
  std::snprintf(tag, sizeof tag, "%016llx", static_cast<unsigned long long>(swap_tag_));
  const std::string path = (dir / StrCat("pocket-swap-", tag, "-", r.id, ".session")).string();
  POCKET_RETURN_IF_ERROR(s.Save(path));
  r.swap_tokens = s.history_.size();
  std::error_code size_error;
  const uintmax_t size = std::filesystem::file_size(path, size_error);
  r.swap_bytes = size_error ? 0 : static_cast<uint64_t>(size);
  r.swap_path = path;
  r.swapped = true;
  s.Reset();  // a consistent, empty session while it is on disk, its pages freed
  ++stats_.swaps_out;
  return Status::Ok();
}

Status Engine::SwapIn(Request& r) {
  Session& s = *r.session;
  const StatusOr<std::string> loaded = s.Load(r.swap_path);
  if (!loaded.ok()) {  // the file stays: a later restore (Take) may succeed
    return Status(loaded.status().code(),
                  StrCat("restoring a swapped session: ", loaded.status().message()));
  }
  std::error_code ec;
  std::filesystem::remove(r.swap_path, ec);
  r.swapped = false;
  r.swap_path.clear();
  ++stats_.swaps_in;
  return Status::Ok();
}

int32_t Engine::NextRows(const Request& r) const {
  if (r.phase == Request::Phase::kDone) return 0;
  if (r.phase != Request::Phase::kPrefill) return 1;  // a decode row (now or after the token step)
  return static_cast<int32_t>(std::min(r.prompt.size() - r.at, ChunkOf(r)));
}

size_t Engine::ChunkOf(const Request& r) const {
  return static_cast<size_t>(r.chunk > 0 ? r.chunk : r.session->n_batch_);
}

void Engine::RestoreWaiting() {
  const size_t budget = options_.kv_budget_bytes;
  // Oldest first, and an older request comes before newer ones: a swapped request returns as soon
  // as it fits with its next rows and the next rows (at least a page) of each older request in
  // memory (so none of them has to evict it again soon), making room by saving idle sessions
  // (finished, not taken), then dropping the prefix caches' least recently used entries, then
  // saving the newest active requests submitted after it. Newer requests never keep an older one
  // waiting.
  for (size_t i = 0; i < requests_.size(); ++i) {
    Request& r = *requests_[i];
    if (!r.swapped || r.phase == Request::Phase::kDone) continue;
    size_t need = PagesBytes(r.session->kv_, r.swap_tokens + static_cast<size_t>(NextRows(r)));
    size_t kept = 0;  // what no eviction frees: the older active sessions' own pages
    for (size_t j = 0; j < i; ++j) {
      const Request& q = *requests_[j];
      if (q.swapped || q.phase == Request::Phase::kDone) continue;
      kept += q.session->kv_.private_bytes();
      // At least a page each: an older session growing by a page would evict it again soon.
      const int32_t h = static_cast<int32_t>(q.session->history_.size());
      need +=
          std::max(q.session->kv_.ReserveBytes(h, h + NextRows(q)), q.session->kv_.page_bytes());
    }
    // It cannot fit before older ones end: wait without saving anyone in vain.
    if (kept + need > budget) return;
    while (ResidentBytes() + need > budget) {
      Request* victim = nullptr;
      for (auto it = requests_.rbegin(); it != requests_.rend() && victim == nullptr; ++it) {
        if (!(*it)->swapped && (*it)->phase == Request::Phase::kDone) victim = it->get();
      }
      if (victim == nullptr && (EvictParked() || EvictPrefixEntry())) continue;
      for (size_t j = requests_.size(); victim == nullptr && j > i + 1; --j) {
        Request* q = requests_[j - 1].get();
        if (!q->swapped && q->phase != Request::Phase::kDone) victim = q;
      }
      if (victim == nullptr || !SwapOut(*victim).ok()) break;
    }
    if (ResidentBytes() + need > budget) return;  // it waits, and the later ones behind it
    const Status restored = SwapIn(r);
    if (!restored.ok()) {
      Fail(r, restored);
      continue;
    }
    r.restored_step = steps_;
  }
}

EngineStats Engine::stats() const {
  EngineStats s = stats_;
  s.kv_bytes = ResidentBytes();
  s.n_swapped = 0;
  for (const auto& r : requests_) {
    s.n_swapped += r->swapped ? 1 : 0;
    s.swapped_bytes += r->swapped ? r->swap_bytes : 0;
  }
  s.n_parked = static_cast<int32_t>(parked_.size());
  return s;
}

Status Engine::Run() {
  while (true) {
    POCKET_ASSIGN_OR_RETURN(const int32_t active, Step());
    if (active == 0) return Status::Ok();
  }
}

int32_t Engine::n_active() const {
  int32_t n = 0;
  for (const auto& r : requests_) n += r->phase != Request::Phase::kDone ? 1 : 0;
  return n;
}

bool Engine::done(int64_t id) const {
  for (const auto& r : requests_) {
    if (r->id == id) return r->phase == Request::Phase::kDone;
  }
  return false;
}

bool Engine::has(int64_t id) const {
  for (const auto& r : requests_) {
    if (r->id == id) return true;
  }
  return false;
}

StatusOr<GenerateResult> Engine::Take(int64_t id) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, Remove(id, Kind::kGenerate));
  if (!r->status.ok()) return r->status;
  return std::move(r->result);
}

StatusOr<std::vector<CandidateScore>> Engine::TakeScores(int64_t id) {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Request> r, Remove(id, Kind::kScore));
  if (!r->status.ok()) return r->status;
  return std::move(r->scores);
}

StatusOr<std::unique_ptr<Engine::Request>> Engine::Remove(int64_t id, Kind kind) {
  if (stepping_) return FailedPreconditionError("Take from inside Step (a stream callback)");
  for (auto it = requests_.begin(); it != requests_.end(); ++it) {
    if ((*it)->id != id) continue;
    const Kind is = (*it)->scoring       ? Kind::kScore
                    : (*it)->classifying ? Kind::kClassify
                                         : Kind::kGenerate;
    if (is != kind) {
      return FailedPreconditionError("request ", id,
                                     is == Kind::kScore ? " scores: take it with TakeScores"
                                     : is == Kind::kClassify
                                         ? " classifies: take it with TakeLabels"
                                         : " generates: take it with Take");
    }
    if ((*it)->phase != Request::Phase::kDone) {
      return FailedPreconditionError("request ", id, " is still running");
    }
    std::unique_ptr<Request> r = std::move(*it);
    r->session->engine_request_ = nullptr;
    requests_.erase(it);
    if (r->swapped) {
      // Handed back in memory, whatever the budget; idle sessions (finished, not taken) go to
      // disk first to make room for it.
      const size_t need = PagesBytes(r->session->kv_, r->swap_tokens);
      for (auto q = requests_.rbegin(); q != requests_.rend(); ++q) {
        if (ResidentBytes() + need <= options_.kv_budget_bytes) break;
        if ((*q)->swapped || (*q)->phase != Request::Phase::kDone) continue;
        static_cast<void>(SwapOut(**q));  // a session that cannot be saved stays in memory
      }
      const Status restored = SwapIn(*r);
      stats_.peak_kv_bytes =
          std::max(stats_.peak_kv_bytes, ResidentBytes() + r->session->kv_.bytes());
      if (!restored.ok() && r->status.ok()) r->status = restored;
    }
    return r;
  }
  return NotFoundError("no request ", id);
}

}  // namespace pocket
