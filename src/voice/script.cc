#include "voice/script.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "base/str.h"
#include "voice/asr.h"
#include "voice/tts.h"
#include "voice/vad.h"

namespace pocket::voice {
namespace {

std::string Trim(std::string_view s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t' || s[b] == '\r')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t' || s[e - 1] == '\r')) --e;
  return std::string(s.substr(b, e - b));
}

StatusOr<double> ParseSeconds(const std::string& s, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0 || v > 86400) {
    return InvalidArgumentError(where, ": expected seconds (0 to 86400), got '", s, "'");
  }
  return v;
}

// Resident memory in MiB (0 where /proc/self/statm is not there).
double ResidentMib() {
  std::ifstream in("/proc/self/statm");
  long long pages = 0;
  long long resident = 0;
  if (!(in >> pages >> resident)) return 0;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

}  // namespace

StatusOr<Script> ParseScript(std::string_view text, const std::string& path) {
  Script script;
  std::istringstream in{std::string(text)};
  std::string raw;
  int32_t line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string where = StrCat(path, ":", line_no);
    std::string line = raw;
    if (const size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    line = Trim(line);
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    const size_t space = line.find(' ');
    const std::string word = line.substr(0, std::min(space, colon));
    if (word == "noise" || word == "seed") {
      if (colon != std::string::npos) {
        return InvalidArgumentError(where, ": '", word, " VALUE' takes no ':'");
      }
      const std::string value = space == std::string::npos ? "" : Trim(line.substr(space));
      if (word == "noise") {
        if (value == "off") {
          script.noise_dbfs = -400;
          continue;
        }
        char* end = nullptr;
        const double db = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size() || !(db <= 0 && db >= -150)) {
          return InvalidArgumentError(
              where, ": noise takes a level in dBFS (-150 to 0) or off, got '", value, "'");
        }
        script.noise_dbfs = db;
      } else {
        char* end = nullptr;
        const unsigned long long seed = std::strtoull(value.c_str(), &end, 10);
        if (value.empty() || end != value.c_str() + value.size()) {
          return InvalidArgumentError(where, ": seed takes a whole number, got '", value, "'");
        }
        script.seed = seed;
      }
      continue;
    }
    ScriptTurn turn;
    turn.line = line_no;
    if (word == "at") {
      turn.when = ScriptTurn::When::kAt;
    } else if (word == "after") {
      turn.when = ScriptTurn::When::kAfter;
    } else if (word == "barge") {
      turn.when = ScriptTurn::When::kBarge;
    } else {
      return InvalidArgumentError(
          where, ": expected 'at', 'after', 'barge', 'noise' or 'seed', got '", word, "'");
    }
    if (colon == std::string::npos) {
      return InvalidArgumentError(where, ": expected '", word, " SECONDS: TEXT'");
    }
    POCKET_ASSIGN_OR_RETURN(
        turn.seconds, ParseSeconds(Trim(line.substr(word.size(), colon - word.size())), where));
    std::string rest = Trim(line.substr(colon + 1));
    if (!rest.empty() && rest.front() == '[') {
      const size_t close = rest.find(']');
      if (close == std::string::npos) return InvalidArgumentError(where, ": '[' without ']'");
      turn.file = Trim(rest.substr(1, close - 1));
      rest = Trim(rest.substr(close + 1));
    }
    if (rest.empty()) return InvalidArgumentError(where, ": the turn has no text (its transcript)");
    turn.text = rest;
    script.turns.push_back(std::move(turn));
  }
  if (script.turns.empty()) return InvalidArgumentError(path, ": no turns");
  return script;
}

StatusOr<Script> LoadScript(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("cannot read the script ", path);
  std::stringstream ss;
  ss << in.rdbuf();
  POCKET_ASSIGN_OR_RETURN(Script script, ParseScript(ss.str(), path));
  // A recording that is not there is the script's error, found before anything is loaded.
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (const ScriptTurn& t : script.turns) {
    if (t.file.empty()) continue;
    const std::filesystem::path file = dir / t.file;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) {
      return NotFoundError(
          path, ":", t.line, ": the recording ", file.string(),
          std::filesystem::exists(file, ec) ? " is not a file" : " does not exist");
    }
  }
  return script;
}

StatusOr<ScriptResult> RunScript(std::shared_ptr<const Model> model, const Script& script,
                                 const std::string& script_path, const ScriptRunOptions& options) {
  // The user's audio, turn by turn, at 16 kHz.
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<Synthesizer> user_voice, CreateFlite("rms"));
  auto synthesize = [&](const std::string& text) -> StatusOr<Audio> {
    Audio a;
    a.rate = user_voice->rate();
    POCKET_RETURN_IF_ERROR(user_voice
                               ->Synthesize(text,
                                            [&](std::span<const int16_t> pcm) {
                                              a.samples.insert(a.samples.end(), pcm.begin(),
                                                               pcm.end());
                                              return true;
                                            })
                               .status());
    return a.rate == kAsrRate ? a : Resample(a, kAsrRate);
  };
  std::vector<Audio> audio;
  const std::filesystem::path dir = std::filesystem::path(script_path).parent_path();
  for (size_t i = 0; i < script.turns.size(); ++i) {
    const ScriptTurn& t = script.turns[i];
    if (!t.file.empty()) {
      const std::string path = (dir / t.file).string();
      StatusOr<Audio> read = ReadAudioFile(path);
      if (!read.ok()) return read.status().WithContext(StrCat(script_path, ":", t.line));
      Audio a = std::move(*read);
      audio.push_back(a.rate == kAsrRate ? std::move(a) : Resample(a, kAsrRate));
    } else {
      POCKET_ASSIGN_OR_RETURN(Audio a, synthesize(t.text));
      audio.push_back(std::move(a));
    }
    if (!options.fixtures_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(options.fixtures_dir, ec);
      char name[32];
      std::snprintf(name, sizeof(name), "turn-%02zu.wav", i + 1);
      POCKET_RETURN_IF_ERROR(
          WriteWav((std::filesystem::path(options.fixtures_dir) / name).string(), audio.back()));
    }
  }
  // The recognizer warms up on speech of the user's voice that is not in the script (the
  // pipeline's default, DefaultAsrWarmUp).
  VoiceOptions vo = options.voice;
  ScriptResult result;
  std::mutex trace_mu;
  std::vector<std::pair<double, std::string>> finals;  // asr_final events: time, text
  double last_first_audio = -1;
  vo.on_event = [&](std::string_view line) {
    std::lock_guard<std::mutex> lock(trace_mu);
    result.trace.emplace_back(line);
    const nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_discarded()) return;
    if (e.value("event", "") == "asr_final")
      finals.emplace_back(e["t_ms"].get<double>(), e["text"]);
    if (e.value("event", "") == "first_audio") last_first_audio = e["t_ms"].get<double>();
  };
  POCKET_ASSIGN_OR_RETURN(std::unique_ptr<VoicePipeline> pipeline,
                          VoicePipeline::Create(model, vo));

  std::mt19937_64 rng(script.seed);
  const double noise_sigma = 32768.0 * std::pow(10.0, script.noise_dbfs / 20.0);
  std::normal_distribution<double> noise(0.0, noise_sigma);
  Audio capture;
  Audio played;
  played.rate = vo.sink_rate;
  std::vector<int16_t> frame(kFrameSamples);
  std::vector<int16_t> out;
  std::vector<double> turn_start_ms(script.turns.size(), -1);
  size_t next = 0;     // the next turn to start
  size_t playing = 0;  // samples of the current turn fed
  bool user_speaking = false;
  double idle_since = 0;  // when the assistant last went quiet (and the user too)
  const auto wall_start = std::chrono::steady_clock::now();
  int64_t frames = 0;
  double last_turn_end = -1;
  bool was_busy = false;
  double first_audio_at_turn = -1;  // the assistant's first audio since the last user turn began
  while (true) {
    const double t = static_cast<double>(frames) * 10.0;
    const bool busy = pipeline->busy();
    {
      std::lock_guard<std::mutex> lock(trace_mu);
      if (last_first_audio >= 0 && (next == 0 || last_first_audio >= turn_start_ms[next - 1])) {
        first_audio_at_turn = last_first_audio;
      }
    }
    if (was_busy && !busy) idle_since = t;
    was_busy = busy;
    if (!user_speaking && next < script.turns.size()) {
      const ScriptTurn& turn = script.turns[next];
      bool start = false;
      const double d = turn.seconds * 1000.0;
      const double prev_end = last_turn_end < 0 ? 0 : last_turn_end;
      switch (turn.when) {
        case ScriptTurn::When::kAt:
          start = t >= d;
          break;
        case ScriptTurn::When::kAfter:
          // After the assistant's reply ended (or a minute on, should it never end).
          start = (!busy && t >= std::max(idle_since, prev_end) + d) || t >= prev_end + d + 60000;
          break;
        case ScriptTurn::When::kBarge:
          start = (first_audio_at_turn >= 0 && t >= first_audio_at_turn + d) ||
                  t >= prev_end + d + 60000;
          if (start && busy) ++result.scripted_barge_ins;
          break;
      }
      if (start) {
        user_speaking = true;
        playing = 0;
        turn_start_ms[next] = t;
        if (next == 2) result.rss_warm_mib = ResidentMib();
        first_audio_at_turn = -1;
        last_first_audio = -1;
      }
    }
    for (int i = 0; i < kFrameSamples; ++i) {
      double v = script.noise_dbfs > -200 ? noise(rng) : 0.0;
      if (user_speaking && playing < audio[next].samples.size())
        v += audio[next].samples[playing++];
      frame[static_cast<size_t>(i)] =
          static_cast<int16_t>(std::clamp(std::lround(v), -32768L, 32767L));
    }
    if (user_speaking && playing >= audio[next].samples.size()) {
      user_speaking = false;
      last_turn_end = t + 10.0;
      ++next;
    }
    if (!vo.virtual_clock) {
      // Real time: frame n is handed over when it has been "captured", at (n + 1) * 10 ms.
      std::this_thread::sleep_until(wall_start + std::chrono::microseconds((frames + 1) * 10000));
    }
    POCKET_RETURN_IF_ERROR(pipeline->Tick(frame, out));
    if (!options.capture_wav.empty())
      capture.samples.insert(capture.samples.end(), frame.begin(), frame.end());
    if (!options.output_wav.empty())
      played.samples.insert(played.samples.end(), out.begin(), out.end());
    ++frames;
    if (next >= script.turns.size() && !user_speaking) {
      const double now = static_cast<double>(frames) * 10.0;
      if (!pipeline->busy() && now >= last_turn_end + 1500)
        break;  // the endpointer's hangover and more
      if (now > last_turn_end + options.tail_seconds * 1000) {
        return InternalError("the assistant was still busy ", options.tail_seconds,
                             " s after the script's last turn");
      }
    }
  }
  result.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.conversation_seconds = static_cast<double>(frames) / 100.0;
  result.stats = pipeline->stats();
  result.rss_end_mib = ResidentMib();
  pipeline.reset();  // the worker ends: the trace is complete
  const VoiceStats& s = result.stats;
  result.first_audio_ms_p50 = Percentile(s.first_audio_ms, 50);
  result.first_audio_ms_p90 = Percentile(s.first_audio_ms, 90);
  result.barge_in_ms_p50 = Percentile(s.barge_in_ms, 50);
  result.samples_reconcile = s.samples_played + s.samples_dropped == s.samples_synthesized;
  // What the recognizer heard, per turn: the finals that came while or after it played, before
  // the next one began.
  result.heard.assign(script.turns.size(), "");
  for (const auto& [t, text] : finals) {
    size_t owner = script.turns.size();
    for (size_t i = 0; i < script.turns.size(); ++i) {
      if (turn_start_ms[i] >= 0 && turn_start_ms[i] <= t) owner = i;
    }
    if (owner == script.turns.size() || text.empty()) continue;
    if (!result.heard[owner].empty()) result.heard[owner] += " ";
    result.heard[owner] += text;
  }
  for (size_t i = 0; i < script.turns.size(); ++i) {
    int64_t errors = 0;
    int64_t words = 0;
    WordErrorRate(script.turns[i].text, result.heard[i], &errors, &words);
    result.asr_errors += errors;
    result.asr_words += words;
  }
  result.asr_wer = result.asr_words > 0 ? static_cast<double>(result.asr_errors) /
                                              static_cast<double>(result.asr_words)
                                        : 0;
  if (!options.output_wav.empty()) POCKET_RETURN_IF_ERROR(WriteWav(options.output_wav, played));
  if (!options.capture_wav.empty()) POCKET_RETURN_IF_ERROR(WriteWav(options.capture_wav, capture));
  return result;
}

}  // namespace pocket::voice
