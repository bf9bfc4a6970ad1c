// pocket voice: a spoken conversation with the model (src/voice): a scripted one from text and
// WAV files, on a virtual clock or in real time, with the latency and recognition figures; or a
// live one, from a recording or an ALSA microphone to a WAV file or an ALSA loudspeaker.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common.h"
#include "voice/alsa.h"
#include "voice/io.h"
#include "voice/script.h"

namespace pocket::cli {
namespace {

// A latency figure: null in JSON and "-" in the summary where nothing was measured (no reply, no
// barge-in), never a 0 that reads as a measurement.
nlohmann::json JsonMs(double ms, bool measured) {
  return measured ? nlohmann::json(ms) : nlohmann::json();
}

// "first audio: P50 360 ms, P90 420 ms (3 replies); barge-in: P50 80 ms (1)", with "-" for what
// was not measured.
std::string LatencySummary(const voice::VoiceStats& s, double first_p50, double first_p90,
                           double barge_p50) {
  std::string out = "first audio: ";
  if (s.first_audio_ms.empty()) {
    out += "-";
  } else {
    out += StrCat("P50 ", std::lround(first_p50), " ms, P90 ", std::lround(first_p90), " ms");
  }
  out += StrCat(" (", s.first_audio_ms.size(), " replies); barge-in: ");
  if (s.barge_in_ms.empty()) {
    out += "-";
  } else {
    out += StrCat("P50 ", std::lround(barge_p50), " ms (", s.barge_ins, ")");
  }
  return out;
}

struct LiveFlags {
  std::string input;
  std::string capture_device;
  std::string playback_device;
  std::string output_wav;
  double duration = 0;
  bool json = false;
  bool virtual_clock = false;
};

// A live conversation: a recording or a microphone in, a WAV file and/or a loudspeaker out. The
// events print as they come (JSONL), the figures at the end; with --json, one object at the end.
int RunLiveConversation(std::shared_ptr<const Model> model, voice::VoiceOptions vo,
                        const LiveFlags& f, sigset_t signals) {
  std::unique_ptr<voice::AudioSource> source;
  if (!f.input.empty()) {
    StatusOr<std::unique_ptr<voice::FileSource>> s = voice::FileSource::Open(f.input);
    if (!s.ok()) return ReportError(s.status());
    source = std::move(*s);
  } else {
    StatusOr<std::unique_ptr<voice::AlsaCapture>> s = voice::OpenAlsaCapture(f.capture_device);
    if (!s.ok()) return ReportError(s.status());
    source = std::move(*s);
  }
  std::unique_ptr<voice::AlsaPlayback> speaker;
  if (!f.playback_device.empty()) {
    StatusOr<std::unique_ptr<voice::AlsaPlayback>> s =
        voice::OpenAlsaPlayback(f.playback_device, vo.sink_rate);
    if (!s.ok()) return ReportError(s.status());
    speaker = std::move(*s);
  }
  std::unique_ptr<voice::WavSink> recording;
  if (!f.output_wav.empty())
    recording = std::make_unique<voice::WavSink>(f.output_wav, vo.sink_rate);
  std::vector<voice::AudioSink*> sinks;
  if (speaker) sinks.push_back(speaker.get());
  if (recording) sinks.push_back(recording.get());
  voice::TeeSink sink(sinks);  // none: the reply is only traced

  std::mutex mu;
  std::vector<std::string> trace;
  vo.on_event = [&](std::string_view line) {
    std::lock_guard<std::mutex> lock(mu);
    if (f.json) {
      trace.emplace_back(line);
    } else {
      std::fwrite(line.data(), 1, line.size(), stdout);
      std::fputc('\n', stdout);
      std::fflush(stdout);
    }
  };
  StatusOr<std::unique_ptr<voice::VoicePipeline>> pipeline =
      voice::VoicePipeline::Create(std::move(model), vo);
  if (!pipeline.ok()) return ReportError(pipeline.status());

  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (!done.load()) stop.store(true);
  });
  if (!f.json) {
    std::fprintf(stderr, "pocket voice: listening to %s (%s clock); Ctrl-C ends\n",
                 f.input.empty() ? ("ALSA '" + f.capture_device + "'").c_str() : f.input.c_str(),
                 f.virtual_clock ? "virtual" : "real-time");
  }
  voice::LiveOptions lo;
  lo.pace = !f.virtual_clock;
  lo.max_seconds = f.duration;
  lo.stop = &stop;
  StatusOr<voice::LiveResult> r = voice::RunLive(**pipeline, *source, sink, lo);
  done.store(true);
  pthread_kill(watcher.native_handle(), SIGTERM);
  watcher.join();
  pipeline->reset();  // the worker ends: the trace is complete
  if (!r.ok()) return ReportError(r.status());
  const voice::VoiceStats& s = r->stats;
  nlohmann::json j = {
      {"first_audio_ms_p50", JsonMs(r->first_audio_ms_p50, !s.first_audio_ms.empty())},
      {"first_audio_ms_p90", JsonMs(r->first_audio_ms_p90, !s.first_audio_ms.empty())},
      {"barge_in_ms_p50", JsonMs(r->barge_in_ms_p50, !s.barge_in_ms.empty())},
      {"turns", s.turns},
      {"barge_ins", s.barge_ins},
      {"first_audio_ms", s.first_audio_ms},
      {"barge_in_ms", s.barge_in_ms},
      {"samples_synthesized", s.samples_synthesized},
      {"samples_played", s.samples_played},
      {"samples_dropped", s.samples_dropped},
      {"early_prefills", s.early_prefills},
      {"early_prompt_tokens", s.early_prompt_tokens},
      {"turn_prompt_tokens", s.turn_prompt_tokens},
      {"overruns",
       f.capture_device.empty() ? 0 : static_cast<voice::AlsaCapture*>(source.get())->overruns()},
      {"underruns", speaker ? speaker->underruns() : 0},
      {"conversation_s", r->seconds},
      {"wall_s", r->wall_seconds},
      {"stopped", r->stopped},
      {"virtual_clock", f.virtual_clock},
      {"heard", s.user_texts},
      {"replies", s.replies}};
  if (f.json) {
    nlohmann::json events = nlohmann::json::array();
    for (const std::string& line : trace) events.push_back(nlohmann::json::parse(line));
    j["trace"] = std::move(events);
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return 0;
  }
  std::printf(
      "%s; %d turns; %.1f s of conversation in %.1f s\n",
      LatencySummary(s, r->first_audio_ms_p50, r->first_audio_ms_p90, r->barge_in_ms_p50).c_str(),
      s.turns, r->seconds, r->wall_seconds);
  return 0;
}

}  // namespace

Command AddVoiceCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "voice", "a spoken conversation: VAD, speech recognition, the model, speech synthesis");
  struct Flags {
    std::string model;
    EngineFlags engine;
    std::string script;
    std::string input;
    std::string capture_device;
    std::string playback_device;
    double duration = 0;
    bool virtual_clock = false;
    bool json = false;
    voice::ScriptRunOptions run;
    int32_t max_tokens = 48;
    float temperature = 0.7f;
    uint64_t seed = 1;
    std::string system;
    int32_t hangover_ms = 300;
  };
  auto f = std::make_shared<Flags>();
  app->add_option("-m,--model", f->model, "the model that answers")->required();
  f->engine.Register(app);
  app->add_option("--script", f->script,
                  "a scripted conversation (tests/voice/README.md: the user's turns as text or WAV "
                  "files, when each starts)");
  app->add_option("--input", f->input,
                  "live: a recording as the microphone (WAV or any file libsndfile reads)");
  app->add_option("--capture-device", f->capture_device,
                  "live: the ALSA microphone ('default', 'plughw:1'; `arecord -L` lists them)");
  app->add_option("--playback-device", f->playback_device,
                  "live: the ALSA loudspeaker ('default', 'plughw:0'; `aplay -L` lists them)");
  app->add_option("--duration", f->duration,
                  "live: stop after this many seconds (default: when the input ends and the "
                  "assistant has answered; Ctrl-C stops too)")
      ->check(CLI::PositiveNumber);
  app->add_flag("--virtual-clock", f->virtual_clock,
                "run on a virtual clock: deterministic, as fast as the machine goes (the model "
                "takes --virtual-steps engine steps per 10 ms)");
  app->add_option("--virtual-steps", f->run.voice.virtual_steps_per_frame,
                  "engine steps per 10 ms frame on the virtual clock")
      ->capture_default_str();
  app->add_option("-o,--output", f->run.output_wav,
                  "write what the assistant played, on the conversation's timeline (WAV)");
  app->add_option("--capture", f->run.capture_wav, "write what the microphone heard (WAV)");
  app->add_option("--fixtures", f->run.fixtures_dir,
                  "write each synthesized user turn here (turn-NN.wav)");
  app->add_option("-n,--max-tokens", f->max_tokens, "tokens per reply at most")
      ->capture_default_str();
  app->add_option("--temp", f->temperature, "sampling temperature (0: greedy)")
      ->capture_default_str();
  app->add_option("-s,--seed", f->seed, "sampling seed (turn i uses seed + i)")
      ->capture_default_str();
  app->add_option("--system", f->system, "the system prompt (default: a brief voice assistant)");
  app->add_option("--hangover-ms", f->hangover_ms,
                  "silence that ends the user's turn, ms (a multiple of 10)")
      ->capture_default_str()
      ->check(CLI::Range(30, 5000));
  app->add_option("--early-prefill-ms", f->run.voice.early_prefill_ms,
                  "after this much silence, evaluate the turn's prompt from the partial "
                  "recognition while the endpointer waits out --hangover-ms (0: off)")
      ->capture_default_str()
      ->check(CLI::Range(0, 5000));
  app->add_option("--sink-rate", f->run.voice.sink_rate,
                  "the playback rate, Hz (8000 to 192000, a multiple of 100)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const long rate = std::strtol(v.c_str(), nullptr, 10);
            if (rate < 8000 || rate > 192000 || rate % 100 != 0) {
              return "the sink rate must be 8000 to 192000 Hz, a multiple of 100, got " + v;
            }
            return "";
          },
          "RATE"))
      ->capture_default_str();
  app->add_flag("--json", f->json,
                "one JSON object: first_audio_ms_p50/p90, barge_in_ms_p50 (null when there "
                "was none), asr_wer, turns, ... and the trace");
  SetExamples(app, {"pocket voice -m model.pocket --script tests/voice/acceptance.script -t 2 "
                    "[--virtual-clock] [--json]",
                    "pocket voice -m model.pocket --input question.wav -o reply.wav",
                    "pocket voice -m model.pocket --capture-device default --playback-device "
                    "default"});
  return {
      app, [=]() -> int {
        const int modes = !f->script.empty() + !f->input.empty() + !f->capture_device.empty();
        if (modes != 1) {
          return ReportUsageError(
              "give one of --script (a scripted conversation), --input (a recording) or "
              "--capture-device (a microphone)");
        }
        if (!f->script.empty() && (!f->playback_device.empty() || f->duration > 0)) {
          return ReportUsageError(
              "--playback-device and --duration are for a live conversation (--input or "
              "--capture-device)");
        }
        if (f->script.empty() && (!f->run.capture_wav.empty() || !f->run.fixtures_dir.empty())) {
          return ReportUsageError("--capture and --fixtures are for a --script conversation");
        }
        // Ctrl-C (and SIGTERM) end a live conversation cleanly: blocked in every thread from
        // here on and taken by a watcher thread.
        sigset_t signals;
        sigemptyset(&signals);
        sigaddset(&signals, SIGINT);
        sigaddset(&signals, SIGTERM);
        if (!f->script.empty()) sigemptyset(&signals);
        pthread_sigmask(SIG_BLOCK, &signals, nullptr);
        // Outputs written at the end are checked before the conversation, not found out after.
        for (const auto& [flag, path] :
             {std::pair<const char*, const std::string&>{"-o", f->run.output_wav},
              {"--capture", f->run.capture_wav}}) {
          if (path.empty()) continue;
          if (Status st = CheckOutputPath(flag, path); !st.ok()) return ReportError(st);
        }
        StatusOr<voice::Script> script = voice::Script{};
        if (!f->script.empty()) script = voice::LoadScript(f->script);
        if (!script.ok()) return ReportError(script.status());
        StatusOr<std::shared_ptr<const Model>> model = LoadModel(f->model, f->engine);
        if (!model.ok()) return ReportError(model.status());
        StatusOr<SessionOptions> so = f->engine.Session();
        if (!so.ok()) return ReportUsageError(so.status().message());
        voice::ScriptRunOptions run = f->run;
        run.voice.session = *so;
        run.voice.virtual_clock = f->virtual_clock;
        run.voice.max_tokens = f->max_tokens;
        run.voice.sampling.temperature = f->temperature;
        run.voice.sampling.seed = f->seed;
        run.voice.endpointer.hangover_frames = f->hangover_ms / 10;
        if (!f->system.empty()) run.voice.system_prompt = f->system;
        if (f->script.empty()) {
          LiveFlags live{f->input,    f->capture_device, f->playback_device, run.output_wav,
                         f->duration, f->json,           f->virtual_clock};
          return RunLiveConversation(*model, run.voice, live, signals);
        }
        if (!f->json) {
          std::fprintf(stderr, "pocket voice: %zu turns, %s clock\n", script->turns.size(),
                       f->virtual_clock ? "virtual" : "real-time");
        }
        StatusOr<voice::ScriptResult> r = voice::RunScript(*model, *script, f->script, run);
        if (!r.ok()) return ReportError(r.status());
        const voice::VoiceStats& s = r->stats;
        nlohmann::json j = {
            {"first_audio_ms_p50", JsonMs(r->first_audio_ms_p50, !s.first_audio_ms.empty())},
            {"first_audio_ms_p90", JsonMs(r->first_audio_ms_p90, !s.first_audio_ms.empty())},
            {"barge_in_ms_p50", JsonMs(r->barge_in_ms_p50, !s.barge_in_ms.empty())},
            {"asr_wer", r->asr_wer},
            {"asr_errors", r->asr_errors},
            {"asr_words", r->asr_words},
            {"turns", s.turns},
            {"script_turns", script->turns.size()},
            {"barge_ins", s.barge_ins},
            {"scripted_barge_ins", r->scripted_barge_ins},
            {"first_audio_ms", s.first_audio_ms},
            {"barge_in_ms", s.barge_in_ms},
            {"samples_synthesized", s.samples_synthesized},
            {"samples_played", s.samples_played},
            {"samples_dropped", s.samples_dropped},
            {"early_prefills", s.early_prefills},
            {"early_prompt_tokens", s.early_prompt_tokens},
            {"turn_prompt_tokens", s.turn_prompt_tokens},
            {"samples_reconcile", r->samples_reconcile},
            {"rss_warm_mib", r->rss_warm_mib},
            {"rss_end_mib", r->rss_end_mib},
            {"conversation_s", r->conversation_seconds},
            {"wall_s", r->wall_seconds},
            {"virtual_clock", f->virtual_clock},
            {"heard", r->heard},
            {"replies", s.replies}};
        if (f->json) {
          nlohmann::json trace = nlohmann::json::array();
          for (const std::string& line : r->trace) trace.push_back(nlohmann::json::parse(line));
          j["trace"] = std::move(trace);
          std::printf("%s\n",
                      j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
          return 0;
        }
        for (const std::string& line : r->trace) std::printf("%s\n", line.c_str());
        std::printf(
            "%s; ASR WER %.1f%% (%lld errors / %lld words); %.1f s of conversation in %.1f s; "
            "samples synthesized %lld = played %lld + dropped %lld: %s\n",
            LatencySummary(s, r->first_audio_ms_p50, r->first_audio_ms_p90, r->barge_in_ms_p50)
                .c_str(),
            100 * r->asr_wer, static_cast<long long>(r->asr_errors),
            static_cast<long long>(r->asr_words), r->conversation_seconds, r->wall_seconds,
            static_cast<long long>(s.samples_synthesized), static_cast<long long>(s.samples_played),
            static_cast<long long>(s.samples_dropped), r->samples_reconcile ? "yes" : "NO");
        return 0;
      }};
}

}  // namespace pocket::cli
