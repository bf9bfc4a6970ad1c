#include "voice/pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "base/str.h"
#include "runtime/engine.h"
#include "runtime/request.h"
#include "runtime/scheduler.h"
#include "voice/asr.h"
#include "voice/audio.h"
#include "voice/tts.h"

namespace pocket::voice {
namespace {

using nlohmann::json;
constexpr double kFrameMs = 10.0;
constexpr int32_t kPrerollFrames = 30;  // capture kept before a detected start (300 ms)

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double pos = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

struct VoicePipeline::Impl {
  std::shared_ptr<const Model> model;
  VoiceOptions options;
  std::unique_ptr<Session> session;
  std::unique_ptr<Scheduler> scheduler;  // stepped by the worker, the turn on `session`
  std::unique_ptr<VoiceDetector> vad;
  Endpointer endpointer;
  std::unique_ptr<Recognizer> asr;
  std::unique_ptr<Synthesizer> flite;
  std::unique_ptr<Synthesizer> other;  // espeak-ng, made on first use
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  // The capture side (Tick's thread).
  int64_t frames = 0;
  std::deque<std::vector<int16_t>> preroll;
  bool in_utterance = false;
  std::string last_partial;
  double last_partial_ms = -1e9;
  bool early_armed = false;  // voiced since the last early prefill: the next silence may start one
  std::vector<ChatMessage> history;
  int32_t turn_index = 0;
  bool reply_open = false;  // a reply whose played part is not in the history yet

  // Shared with the worker.
  mutable std::mutex mu;
  std::condition_variable cv;
  struct Turn {
    int32_t index = 0;
    std::vector<ChatMessage> messages;
    std::string user_text;
    double end_ms = 0;  // the turn's last voiced frame
  };
  std::optional<Turn> pending;
  std::optional<Turn> early;  // a prompt to evaluate before the endpoint (from a partial text)
  bool working = false;       // a turn is being generated or synthesized
  std::atomic<bool> cancel{false};
  bool stopping = false;
  std::deque<int16_t> queue;  // synthesized, not played yet (sink rate)
  struct Mark {
    size_t reply_end = 0;      // bytes of the reply this segment ends
    int64_t sample_end = 0;    // samples of the reply synthesized at its end
    int64_t sample_begin = 0;  // ... at its start
  };
  std::string reply;  // the current reply's text
  std::vector<Mark> marks;
  int64_t reply_synthesized = 0;
  int64_t reply_played = 0;
  bool first_audio_pending = false;
  double turn_end_ms = 0;
  VoiceStats stats;
  std::thread worker;

  // The worker's own state for the turn it runs.
  struct Work {
    bool active = false;
    bool prefill_only = false;  // an early prefill: the prompt evaluated, nothing generated
    int64_t id = -1;            // the turn's request in the scheduler
    std::optional<StatusOr<GenerateResult>> outcome;  // its result, once it ended
    bool cancel_sent = false;
    bool generated = false;
    bool first_token = true;
    Segmenter segmenter;
    std::deque<Segment> to_speak;
    std::vector<Segment> cut;
    Turn turn;
    PreparedRequest prepared;
  } work;

  // The pipeline's clock: when the frame Tick handles now was captured whole ((n + 1) * 10 ms
  // for frame n). Virtual: exactly that. Real: the wall clock, started so that the first Tick
  // comes at 10 ms (the app calls Tick as each frame is captured).
  double Now() const {
    if (options.virtual_clock) return static_cast<double>(frames + 1) * kFrameMs;
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
        .count();
  }

  // Events come from the capture side and the worker, sometimes with `mu` held: they are queued
  // and handed to the app's callback by Deliver(), called where the thread holds no lock. One
  // thread delivers at a time, in order; a callback may call back into the pipeline (busy, stop):
  // what that emits is queued and delivered after it returns.
  std::mutex events_mu;
  std::deque<std::string> events;  // under events_mu
  bool delivering = false;         // under events_mu

  void Emit(json event, double t) {
    if (!options.on_event) return;
    json e = {{"t_ms", std::round(t * 10) / 10}};
    e.update(event);
    std::string text = e.dump(-1, ' ', false, json::error_handler_t::replace);
    std::lock_guard<std::mutex> lock(events_mu);
    events.push_back(std::move(text));
  }

  void Deliver() {
    if (!options.on_event) return;
    {
      std::lock_guard<std::mutex> lock(events_mu);
      if (delivering) return;  // that thread (or this one, below us) delivers it
      delivering = true;
    }
    for (;;) {
      std::string text;
      {
        std::lock_guard<std::mutex> lock(events_mu);
        if (events.empty()) {
          delivering = false;
          return;
        }
        text = std::move(events.front());
        events.pop_front();
      }
      options.on_event(text);
    }
  }

  // ---- the worker: one unit of work (an engine step, or one segment's synthesis) ----
  // Returns false when there is nothing to do.
  bool Advance() {
    Work& w = work;
    if (!w.active) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!pending) {
          if (!early) return false;
          w.turn = std::move(*early);
          early.reset();
          w.prefill_only = true;
        } else {
          w.turn = std::move(*pending);
          pending.reset();
          early.reset();  // the turn itself is here
          w.prefill_only = false;
          working = true;
          cancel.store(false);
        }
      }
      StartTurn();
      return true;
    }
    if (w.prefill_only) {
      if (!w.outcome.has_value()) {
        scheduler->Step();
        return true;
      }
      if (w.outcome->ok()) {
        std::lock_guard<std::mutex> lock(mu);
        ++stats.early_prefills;
        stats.early_prompt_tokens += (*w.outcome)->n_prompt_tokens;
      }
      Emit({{"event", "early_prefill_done"},
            {"turn", w.turn.index},
            {"tokens", w.outcome->ok() ? (*w.outcome)->n_prompt_tokens : 0}},
           Now());
      w.outcome.reset();
      w.active = false;
      w.prefill_only = false;
      return true;
    }
    if (cancel.load()) {
      w.to_speak.clear();
      if (!w.generated && !w.cancel_sent) {
        w.cancel_sent = true;
        scheduler->Cancel(w.id);  // it stops within the next step
      }
    }
    if (!w.to_speak.empty()) {
      Segment seg = std::move(w.to_speak.front());
      w.to_speak.pop_front();
      Speak(seg);
      return true;
    }
    if (!w.generated) {
      if (!w.outcome.has_value()) {
        scheduler->Step();  // a failed pass fails the request: its outcome says so
        return true;
      }
      StatusOr<GenerateResult> r = std::move(*w.outcome);
      w.outcome.reset();
      w.generated = true;
      if (r.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        stats.turn_prompt_tokens += r->n_prompt_tokens;
      }
      if (!r.ok()) Emit({{"event", "error"}, {"message", r.status().message()}}, Now());
      if (!cancel.load()) {
        w.cut.clear();
        w.segmenter.Finish(w.cut);
        w.to_speak.insert(w.to_speak.end(), w.cut.begin(), w.cut.end());
      }
      return true;
    }
    // Generated and spoken: the turn is over.
    w.active = false;
    std::lock_guard<std::mutex> lock(mu);
    working = false;
    cv.notify_all();
    return true;
  }

  void StartTurn() {
    Work& w = work;
    w.active = true;
    w.generated = false;
    w.outcome.reset();
    w.cancel_sent = false;
    w.first_token = true;
    w.segmenter = Segmenter(options.segmenter);
    w.to_speak.clear();
    GenerateRequest request;
    request.messages = w.turn.messages;
    request.chat.enable_thinking = false;
    request.sampling = options.sampling;
    request.sampling.seed = options.sampling.seed + static_cast<uint64_t>(w.turn.index);
    request.max_tokens = w.prefill_only ? 0 : options.max_tokens;
    StatusOr<PreparedRequest> prepared = PrepareRequest(*model, request);
    if (!prepared.ok()) {
      // A model without a chat template (a story model): the user's words, continued.
      GenerateRequest plain = request;
      plain.messages.reset();
      plain.prompt = w.turn.user_text + ".\n";
      prepared = PrepareRequest(*model, plain);
    }
    Status failed = prepared.status();
    if (prepared.ok()) {
      w.prepared = std::move(*prepared);
      // EndUtterance keeps the history within the context; a prompt still too long is refused
      // by the engine (the request's outcome), and the turn says so.
      SchedulerRequest turn;
      turn.session = session.get();
      turn.prompt = w.prepared.prompt.ids;
      turn.options = w.prepared.options;
      if (w.prefill_only) {
        turn.options.max_tokens = 0;  // the prompt into the session's context, no reply
        turn.on_text = [](std::string_view) { return true; };
      } else {
        turn.on_text = [this](std::string_view piece) { return OnText(piece); };
      }
      turn.on_generated = [this](StatusOr<GenerateResult> r) {
        work.outcome.emplace(std::move(r));
        return std::optional<SchedulerFollowUp>();
      };
      StatusOr<int64_t> id = scheduler->Submit(std::move(turn));
      if (id.ok()) {
        w.id = *id;
        return;
      }
      failed = id.status();
    }
    if (w.prefill_only) {  // nothing to say: the turn will meet the same error
      w.active = false;
      w.prefill_only = false;
      return;
    }
    Emit({{"event", "error"}, {"message", failed.message()}}, Now());
    w.generated = true;
  }

  bool OnText(std::string_view piece) {
    Work& w = work;
    if (cancel.load()) return false;
    if (w.first_token) {
      w.first_token = false;
      Emit({{"event", "first_token"}, {"turn", w.turn.index}}, Now());
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      reply.append(piece);
    }
    w.cut.clear();
    w.segmenter.Push(piece, w.cut);
    w.to_speak.insert(w.to_speak.end(), w.cut.begin(), w.cut.end());
    return true;
  }

  void Speak(const Segment& seg) {
    Synthesizer* tts = flite.get();
    if (IsMostlyCjk(seg.text)) {
      if (!other) {
        StatusOr<std::unique_ptr<Synthesizer>> e = CreateEspeak(options.other_voice);
        if (!e.ok()) {
          Emit({{"event", "error"}, {"message", e.status().message()}}, Now());
        } else {
          other = std::move(*e);
        }
      }
      if (other) tts = other.get();
    }
    Emit({{"event", "segment"}, {"turn", work.turn.index}, {"text", seg.text}}, Now());
    Resampler resampler(tts->rate(), options.sink_rate);
    std::vector<int16_t> buf;
    int64_t begin = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      begin = reply_synthesized;
    }
    auto hand = [&](bool final) {
      if (final) resampler.Finish(buf);
      if (buf.empty()) return !cancel.load();
      {
        std::lock_guard<std::mutex> lock(mu);
        if (cancel.load()) return false;
        queue.insert(queue.end(), buf.begin(), buf.end());
        reply_synthesized += static_cast<int64_t>(buf.size());
        stats.samples_synthesized += static_cast<int64_t>(buf.size());
        if (first_audio_pending) {
          first_audio_pending = false;
          const double t = Now();
          stats.first_audio_ms.push_back(t - turn_end_ms);
          Emit({{"event", "first_audio"},
                {"turn", work.turn.index},
                {"latency_ms", t - turn_end_ms}},
               t);
        }
      }
      buf.clear();
      Deliver();
      return !cancel.load();
    };
    const StatusOr<SynthesisResult> r =
        tts->Synthesize(seg.text, [&](std::span<const int16_t> pcm) {
          resampler.Push(pcm, buf);
          return hand(false);
        });
    if (!r.ok()) Emit({{"event", "error"}, {"message", r.status().message()}}, Now());
    hand(true);
    std::lock_guard<std::mutex> lock(mu);
    if (!cancel.load()) marks.push_back({seg.end, reply_synthesized, begin});
  }

  void WorkerLoop() {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] {
          return stopping || pending.has_value() || early.has_value() || work.active;
        });
        if (stopping) return;
      }
      while (Advance()) {
        Deliver();
        if (!work.active) break;
      }
      Deliver();
    }
  }

  // ---- the capture side ----

  // The played part of the reply into the history (at a barge-in, or when it has all played).
  void CloseReply() {
    if (!reply_open) return;
    reply_open = false;
    std::string played;
    {
      std::lock_guard<std::mutex> lock(mu);
      size_t end = 0;
      for (const Mark& m : marks) {
        if (m.sample_end <= reply_played) {
          end = m.reply_end;
        } else if (m.sample_begin < reply_played && m.sample_end > m.sample_begin) {
          // Partly played: its words in proportion, cut at a space.
          const size_t from = end;
          const double f = static_cast<double>(reply_played - m.sample_begin) /
                           static_cast<double>(m.sample_end - m.sample_begin);
          size_t cut = from + static_cast<size_t>(f * static_cast<double>(m.reply_end - from));
          while (cut > from && reply[cut - 1] != ' ') --cut;
          end = cut;
          break;
        } else {
          break;
        }
      }
      played = reply.substr(0, std::min(end, reply.size()));
    }
    while (!played.empty() && (played.back() == ' ' || played.back() == '\n')) played.pop_back();
    stats.replies.push_back(played);
    history.push_back({"assistant", played});
    Emit({{"event", "reply_end"}, {"turn", turn_index - 1}, {"played", played}}, Now());
  }

  // Stops the assistant: generation, synthesis, the audio not played yet. `first_voiced_ms` < 0:
  // the app asked (VoicePipeline::Interrupt), no barge-in to count.
  void BargeIn(double first_voiced_ms) {
    size_t dropped = 0;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!working && queue.empty() && !pending) return;
      cancel.store(true);
      pending.reset();  // a turn not started yet is dropped with the rest
      dropped = queue.size();
      queue.clear();
      stats.samples_dropped += static_cast<int64_t>(dropped);
      first_audio_pending = false;
      if (first_voiced_ms >= 0) ++stats.barge_ins;
    }
    cv.notify_all();
    if (first_voiced_ms < 0) {
      Emit({{"event", "stopped"}, {"dropped", dropped}}, Now());
      CloseReply();
      return;
    }
    // Playback stops now: Tick hands out silence from this frame on.
    const double stopped = Now();
    stats.barge_in_ms.push_back(stopped - first_voiced_ms);
    Emit({{"event", "barge_in"}, {"latency_ms", stopped - first_voiced_ms}, {"dropped", dropped}},
         Now());
    CloseReply();
  }

  // The turn for the user's `text`: the system prompt, then `*h` with the text, less the oldest
  // exchanges where they would not fit the context (dropped from `*h` too).
  Turn TurnFor(const std::string& text, std::vector<ChatMessage>* h) const {
    h->push_back({"user", text});
    size_t chars = 0;
    for (const ChatMessage& m : *h) chars += m.content.size();
    const size_t budget =
        static_cast<size_t>(std::max(256, session->n_ctx() - options.max_tokens - 64)) * 3;
    while (chars > budget && h->size() > 2) {
      chars -= h->front().content.size();
      h->erase(h->begin());
    }
    Turn turn;
    turn.user_text = text;
    turn.messages.push_back({"system", options.system_prompt});
    turn.messages.insert(turn.messages.end(), h->begin(), h->end());
    return turn;
  }

  // In the silence that may end the utterance: the turn's prompt from the partial hypothesis,
  // for the worker to evaluate while the endpointer waits (when it is idle: a reply still being
  // cut short keeps the session).
  void MaybePrefillEarly() {
    const int64_t silent = endpointer.frames() - 1 - endpointer.last_voiced_frame();
    if (silent == 0) {
      early_armed = true;
      return;
    }
    if (!early_armed || options.early_prefill_ms <= 0 || reply_open ||
        static_cast<double>(silent) * kFrameMs < options.early_prefill_ms) {
      return;
    }
    early_armed = false;
    std::string partial = asr->Partial();
    if (partial.empty()) return;
    std::vector<ChatMessage> h = history;
    Turn turn = TurnFor(partial, &h);
    turn.index = turn_index;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (working || pending.has_value()) return;
      early = std::move(turn);
    }
    Emit({{"event", "early_prefill"}, {"text", partial}}, Now());
    cv.notify_all();
  }

  void EndUtterance() {
    in_utterance = false;
    StatusOr<std::string> text = asr->Finish();
    const double end_ms = static_cast<double>(endpointer.last_voiced_frame() + 1) * kFrameMs;
    if (!text.ok()) {
      Emit({{"event", "error"}, {"message", text.status().message()}}, Now());
      return;
    }
    Emit({{"event", "asr_final"}, {"text", *text}}, Now());
    if (text->empty()) return;  // noise the recognizer made nothing of
    CloseReply();
    stats.user_texts.push_back(*text);
    ++stats.turns;
    Turn turn = TurnFor(*text, &history);
    turn.index = turn_index++;
    turn.end_ms = end_ms;
    {
      std::lock_guard<std::mutex> lock(mu);
      pending = std::move(turn);
      working = true;
      reply.clear();
      marks.clear();
      reply_synthesized = 0;
      reply_played = 0;
      first_audio_pending = true;
      turn_end_ms = end_ms;
    }
    reply_open = true;
    cv.notify_all();
  }

  Status Tick(std::span<const int16_t> in, std::vector<int16_t>& out) {
    if (in.size() != static_cast<size_t>(kFrameSamples)) {
      return InvalidArgumentError("a frame is ", kFrameSamples, " samples (10 ms at 16 kHz), got ",
                                  in.size());
    }
    if (frames == 0) start = std::chrono::steady_clock::now() - std::chrono::milliseconds(10);
    POCKET_ASSIGN_OR_RETURN(const bool voiced, vad->IsVoice(in));
    const VadEvent event = endpointer.Push(voiced);
    preroll.emplace_back(in.begin(), in.end());
    if (preroll.size() > kPrerollFrames) preroll.pop_front();
    if (event == VadEvent::kSpeechStart) {
      const double first_voiced = static_cast<double>(endpointer.speech_start_frame()) * kFrameMs;
      Emit({{"event", "speech_start"}, {"first_voiced_ms", first_voiced}}, Now());
      BargeIn(first_voiced);
      // Recognized from its first frame: the frames kept since before the start went in first.
      POCKET_RETURN_IF_ERROR(asr->Start());
      in_utterance = true;
      early_armed = true;
      const int64_t back = frames - endpointer.speech_start_frame() + 5;
      const size_t skip = preroll.size() > static_cast<size_t>(back)
                              ? preroll.size() - static_cast<size_t>(back)
                              : 0;
      for (size_t i = skip; i < preroll.size(); ++i) POCKET_RETURN_IF_ERROR(asr->Push(preroll[i]));
    } else if (in_utterance) {
      POCKET_RETURN_IF_ERROR(asr->Push(in));
      if (event == VadEvent::kNone) MaybePrefillEarly();
      if (Now() - last_partial_ms >= 250) {
        last_partial_ms = Now();
        std::string partial = asr->Partial();
        if (!partial.empty() && partial != last_partial) {
          Emit({{"event", "asr_partial"}, {"text", partial}}, Now());
          last_partial = std::move(partial);
        }
      }
    }
    if (event == VadEvent::kSpeechEnd) {
      Emit({{"event", "speech_end"},
            {"last_voiced_ms", static_cast<double>(endpointer.last_voiced_frame() + 1) * kFrameMs}},
           Now());
      EndUtterance();
      last_partial.clear();
    }
    if (options.virtual_clock) {
      for (int32_t i = 0; i < options.virtual_steps_per_frame; ++i) {
        if (!Advance()) break;
      }
    }
    // Playback: the next 10 ms of what was synthesized.
    const size_t n = static_cast<size_t>(options.sink_rate / 100);
    out.assign(n, 0);
    bool finished_reply = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      const size_t take = std::min(n, queue.size());
      std::copy(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(take), out.begin());
      queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(take));
      reply_played += static_cast<int64_t>(take);
      stats.samples_played += static_cast<int64_t>(take);
      finished_reply = !working && queue.empty() && !pending;
    }
    if (finished_reply && reply_open) CloseReply();
    ++frames;
    return Status::Ok();
  }
};

VoicePipeline::VoicePipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

VoicePipeline::~VoicePipeline() {
  if (impl_->worker.joinable()) {
    {
      std::lock_guard<std::mutex> lock(impl_->mu);
      impl_->stopping = true;
      impl_->cancel.store(true);
    }
    impl_->cv.notify_all();
    impl_->worker.join();
  }
  // A turn still in the scheduler ends with it (its session handed back).
}

StatusOr<std::unique_ptr<VoicePipeline>> VoicePipeline::Create(std::shared_ptr<const Model> model,
                                                               const VoiceOptions& options) {
  if (!model) return InvalidArgumentError("no model");
  if (model->tokenizer() == nullptr) return FailedPreconditionError("the model has no tokenizer");
  if (options.sink_rate < 8000 || options.sink_rate > 192000 || options.sink_rate % 100 != 0) {
    return InvalidArgumentError("the sink rate must be 8 to 192 kHz, a multiple of 100 Hz, got ",
                                options.sink_rate);
  }
  if (options.virtual_steps_per_frame < 1) {
    return InvalidArgumentError("virtual steps per frame must be >= 1");
  }
  std::vector<int16_t> warm_up = options.asr_warm_up;
  if (warm_up.empty() && options.asr_default_warm_up) {
    POCKET_ASSIGN_OR_RETURN(warm_up, DefaultAsrWarmUp());
  }
  auto impl = std::make_unique<Impl>();
  impl->model = model;
  impl->options = options;
  impl->endpointer = Endpointer(options.endpointer);
  SessionOptions so = options.session;
  if (so.pool == nullptr) {
    POCKET_ASSIGN_OR_RETURN(so.pool, MakeThreadPool(so.n_threads));
  }
  POCKET_ASSIGN_OR_RETURN(impl->session, Session::Create(model, so));
  EngineOptions eo;
  eo.max_requests = 1;
  eo.max_chunk = std::max(1, std::min(so.n_batch, impl->session->n_ctx()));
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, so.pool, eo));
  impl->scheduler =
      std::make_unique<Scheduler>(std::move(engine), std::vector<std::unique_ptr<Session>>{});
  POCKET_ASSIGN_OR_RETURN(impl->vad, CreateWebRtcVoiceDetector(options.vad));
  PocketSphinxOptions po;
  po.warm_up = warm_up;  // a view: warm_up lives until the recognizer has decoded it
  POCKET_ASSIGN_OR_RETURN(impl->asr, CreatePocketSphinx(po));
  POCKET_ASSIGN_OR_RETURN(impl->flite, CreateFlite("slt"));
  Impl* p = impl.get();
  if (!options.virtual_clock) p->worker = std::thread([p] { p->WorkerLoop(); });
  return std::unique_ptr<VoicePipeline>(new VoicePipeline(std::move(impl)));
}

StatusOr<std::vector<int16_t>> DefaultAsrWarmUp() {
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Synthesizer> voice, CreateFlite("rms"));
  Audio a;
  a.rate = voice->rate();
  POCKET_RETURN_IF_ERROR(voice
                             ->Synthesize("Good morning, how are you doing today?",
                                          [&](std::span<const int16_t> pcm) {
                                            a.samples.insert(a.samples.end(), pcm.begin(),
                                                             pcm.end());
                                            return true;
                                          })
                             .status());
  if (a.rate != kAsrRate) a = Resample(a, kAsrRate);
  return std::move(a.samples);
}

Status VoicePipeline::Tick(std::span<const int16_t> in, std::vector<int16_t>& out) {
  const Status s = impl_->Tick(in, out);
  impl_->Deliver();
  return s;
}

void VoicePipeline::Interrupt() {
  impl_->BargeIn(-1);
  impl_->Deliver();
}

bool VoicePipeline::busy() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->working || impl_->pending.has_value() || !impl_->queue.empty();
}

double VoicePipeline::now_ms() const {
  return static_cast<double>(impl_->frames) * kFrameMs;
}

VoiceStats VoicePipeline::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

}  // namespace pocket::voice
