// pocket voice: a spoken conversation with the model (src/voice): a scripted one from text and
// WAV files, on a virtual clock or in real time, with the latency and recognition figures.
#include <cstdio>
#include <memory>
#include <string>

#include "common.h"
#include "voice/script.h"

namespace pocket::cli {

Command AddVoiceCommand(CLI::App& root) {
  auto* app = root.add_subcommand(
      "voice", "a spoken conversation: VAD, speech recognition, the model, speech synthesis");
  struct Flags {
    std::string model;
    EngineFlags engine;
    std::string script;
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
                  "files, when each starts)")
      ->required();
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
  app->add_option("--sink-rate", f->run.voice.sink_rate, "the playback rate, Hz")
      ->capture_default_str();
  app->add_flag("--json", f->json,
                "one JSON object: first_audio_ms_p50/p90, barge_in_ms_p50, asr_wer, turns, ... "
                "and the trace");
  SetExamples(app, {"pocket voice -m model.pocket --script tests/voice/acceptance.script -t 2",
                    "pocket voice -m model.pocket --script tests/voice/acceptance.script "
                    "--virtual-clock --json",
                    "pocket voice -m stories260K.gguf --script my.script -o reply.wav"});
  return {app, [=]() -> int {
            StatusOr<voice::Script> script = voice::LoadScript(f->script);
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
            if (!f->json) {
              std::fprintf(stderr, "pocket voice: %zu turns, %s clock\n", script->turns.size(),
                           f->virtual_clock ? "virtual" : "real-time");
            }
            StatusOr<voice::ScriptResult> r = voice::RunScript(*model, *script, f->script, run);
            if (!r.ok()) return ReportError(r.status());
            const voice::VoiceStats& s = r->stats;
            nlohmann::json j = {{"first_audio_ms_p50", r->first_audio_ms_p50},
                                {"first_audio_ms_p90", r->first_audio_ms_p90},
                                {"barge_in_ms_p50", r->barge_in_ms_p50},
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
                "first audio: P50 %.0f ms, P90 %.0f ms (%zu replies); barge-in: P50 %.0f ms (%d); "
                "ASR WER %.1f%% (%lld errors / %lld words); %.1f s of conversation in %.1f s; "
                "samples synthesized %lld = played %lld + dropped %lld: %s\n",
                r->first_audio_ms_p50, r->first_audio_ms_p90, s.first_audio_ms.size(),
                r->barge_in_ms_p50, s.barge_ins, 100 * r->asr_wer,
                static_cast<long long>(r->asr_errors), static_cast<long long>(r->asr_words),
                r->conversation_seconds, r->wall_seconds,
                static_cast<long long>(s.samples_synthesized),
                static_cast<long long>(s.samples_played), static_cast<long long>(s.samples_dropped),
                r->samples_reconcile ? "yes" : "NO");
            return 0;
          }};
}

}  // namespace pocket::cli
