#include "tokenizer/vocab_prune.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>

#include "tokenizer/byte_level.h"
#include "tokenizer/qwen2_pretokenizer.h"

namespace pocket {
namespace {

using Json = nlohmann::json;

bool IsAdded(TokenType type) {
  return type == TokenType::kControl || type == TokenType::kUserDefined;
}

TokenType TypeOf(const TokenizerSpec& s, size_t id) {
  return s.types.empty() ? TokenType::kNormal : s.types[id];
}

// The merges of a spec as pairs of strings (the .pocket form stores them by id).
std::vector<std::pair<std::string, std::string>> MergeStrings(const TokenizerSpec& s) {
  if (!s.merges.empty() || s.merge_ids.empty()) return s.merges;
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(s.merge_ids.size());
  for (const auto& [a, b] : s.merge_ids) {
    out.emplace_back(s.tokens[static_cast<size_t>(a)], s.tokens[static_cast<size_t>(b)]);
  }
  return out;
}

}  // namespace

StatusOr<PrunedVocab> PruneVocab(const TokenizerSpec& full, std::span<const int64_t> counts,
                                 int32_t new_size) {
  if (full.kind != TokenizerKind::kByteLevelBpe) {
    return UnimplementedError("vocabulary pruning is implemented for byte-level BPE only");
  }
  const size_t n = full.tokens.size();
  if (counts.size() != n) {
    return InvalidArgumentError("token counts for ", counts.size(), " tokens, the vocabulary has ",
                                n);
  }
  const std::vector<std::pair<std::string, std::string>> merges = MergeStrings(full);
  // Regular tokens by their stored form.
  std::unordered_map<std::string_view, int32_t> regular;
  regular.reserve(n);
  for (size_t id = 0; id < n; ++id) {
    const TokenType t = TypeOf(full, id);
    if (!IsAdded(t) && t != TokenType::kUnused) {
      regular.emplace(full.tokens[id], static_cast<int32_t>(id));
    }
  }
  // Every merge as ids; producers[t]: the merges that build token t.
  struct Merge {
    int32_t a, b, result;
  };
  std::vector<Merge> merge_ids;
  merge_ids.reserve(merges.size());
  std::vector<std::vector<int32_t>> producers(n);
  std::string joined;
  for (const auto& [a, b] : merges) {
    joined = a + b;
    auto ia = regular.find(a), ib = regular.find(b), ir = regular.find(joined);
    Merge m{-1, -1, -1};
    if (ia != regular.end() && ib != regular.end() && ir != regular.end()) {
      m = {ia->second, ib->second, ir->second};
      producers[static_cast<size_t>(m.result)].push_back(static_cast<int32_t>(merge_ids.size()));
    }
    merge_ids.push_back(m);
  }

  std::vector<bool> keep(n, false);
  int64_t n_kept = 0;
  auto mark = [&](int32_t id) {
    if (!keep[static_cast<size_t>(id)]) {
      keep[static_cast<size_t>(id)] = true;
      ++n_kept;
    }
  };
  // What must stay: added tokens and the 256 bytes.
  for (size_t id = 0; id < n; ++id) {
    const TokenType t = TypeOf(full, id);
    if (IsAdded(t) || t == TokenType::kUnknown) mark(static_cast<int32_t>(id));
  }
  std::vector<bool> is_byte(n, false);
  for (int b = 0; b < 256; ++b) {
    const std::string stored = byte_level::EncodeBytes(std::string(1, static_cast<char>(b)));
    auto it = regular.find(stored);
    if (it == regular.end()) {
      return FailedPreconditionError("the vocabulary has no token for byte ", b, " (",
                                     QuoteBytes(stored), "), so it cannot encode every text");
    }
    is_byte[static_cast<size_t>(it->second)] = true;
    mark(it->second);
  }
  if (n_kept > new_size) {
    return InvalidArgumentError("cannot prune to ", new_size, " tokens: ", n_kept,
                                " tokens (the added tokens and the 256 bytes) must stay");
  }
  // Candidates: regular tokens by use, then by id.
  std::vector<int32_t> order;
  for (const auto& [token, id] : regular) {
    if (!keep[static_cast<size_t>(id)]) order.push_back(id);
  }
  std::sort(order.begin(), order.end(), [&](int32_t x, int32_t y) {
    const int64_t cx = counts[static_cast<size_t>(x)], cy = counts[static_cast<size_t>(y)];
    return cx != cy ? cx > cy : x < y;
  });
  // The closure of a token: itself and the parts of every merge building it, recursively.
  std::vector<int32_t> closure, stack;
  std::vector<bool> in_closure(n, false);
  for (int32_t id : order) {
    if (n_kept >= new_size) break;
    if (keep[static_cast<size_t>(id)]) continue;
    closure.clear();
    stack.assign(1, id);
    bool buildable = true;
    while (!stack.empty() && buildable) {
      const int32_t t = stack.back();
      stack.pop_back();
      if (keep[static_cast<size_t>(t)] || in_closure[static_cast<size_t>(t)]) continue;
      if (producers[static_cast<size_t>(t)].empty()) {
        buildable = false;  // no merge builds it: BPE can never emit it
        break;
      }
      in_closure[static_cast<size_t>(t)] = true;
      closure.push_back(t);
      for (int32_t m : producers[static_cast<size_t>(t)]) {
        stack.push_back(merge_ids[static_cast<size_t>(m)].a);
        stack.push_back(merge_ids[static_cast<size_t>(m)].b);
      }
    }
    for (int32_t t : closure) in_closure[static_cast<size_t>(t)] = false;
    if (!buildable || n_kept + static_cast<int64_t>(closure.size()) > new_size) continue;
    for (int32_t t : closure) mark(t);
  }

  PrunedVocab out;
  TokenizerSpec& s = out.spec;
  s.kind = full.kind;
  s.pre_tokenizer = full.pre_tokenizer;
  s.normalize_nfc = full.normalize_nfc;
  s.add_bos = full.add_bos;
  s.chat_template = full.chat_template;
  out.new_id.assign(n, -1);
  for (size_t id = 0; id < n; ++id) {
    if (!keep[id]) continue;
    out.new_id[id] = static_cast<int32_t>(out.old_id.size());
    out.old_id.push_back(static_cast<int32_t>(id));
    s.tokens.push_back(full.tokens[id]);
    s.types.push_back(TypeOf(full, id));
    if (!full.scores.empty()) s.scores.push_back(full.scores[id]);
  }
  std::vector<bool> built(n, false);
  for (size_t i = 0; i < merges.size(); ++i) {
    const Merge& m = merge_ids[i];
    if (m.result < 0 || !keep[static_cast<size_t>(m.a)] || !keep[static_cast<size_t>(m.b)] ||
        !keep[static_cast<size_t>(m.result)]) {
      continue;
    }
    s.merges.push_back(merges[i]);
    built[static_cast<size_t>(m.result)] = true;
  }
  for (size_t id = 0; id < n; ++id) {  // the closure holds by construction; check it anyway
    if (keep[id] && regular.contains(full.tokens[id]) && !is_byte[id] && !built[id]) {
      return InternalError("pruned vocabulary is not merge-closed at token ", id, " ",
                           QuoteBytes(full.tokens[id]));
    }
  }
  struct Special {
    const char* name;
    int32_t old;
    int32_t* id;
  };
  for (const Special& sp :
       {Special{"bos", full.bos_id, &s.bos_id}, Special{"eos", full.eos_id, &s.eos_id},
        Special{"pad", full.pad_id, &s.pad_id}, Special{"unk", full.unk_id, &s.unk_id}}) {
    if (sp.old < 0) continue;
    if (sp.old >= static_cast<int32_t>(n) || out.new_id[static_cast<size_t>(sp.old)] < 0) {
      return FailedPreconditionError("pruning drops the ", sp.name, " token ", sp.old);
    }
    *sp.id = out.new_id[static_cast<size_t>(sp.old)];
  }
  return out;
}

StatusOr<std::string> HfTokenizerJson(const TokenizerSpec& spec, std::string_view base_json) {
  if (spec.kind != TokenizerKind::kByteLevelBpe || spec.pre_tokenizer != "qwen2") {
    return UnimplementedError(
        "tokenizer.json output is implemented for byte-level BPE with the qwen2 pre-tokenizer");
  }
  Json root;
  bool merges_as_strings = false;  // the base's form: "a b" strings or [a, b] pairs
  if (!base_json.empty()) {
    // model.vocab and model.merges (most of the file) are replaced: skip them while parsing.
    root = Json::parse(
        base_json.begin(), base_json.end(),
        [](int depth, Json::parse_event_t event, Json& parsed) {
          return !(event == Json::parse_event_t::key && depth == 2 &&
                   (parsed == "vocab" || parsed == "merges"));
        },
        /*allow_exceptions=*/false);
    if (root.is_discarded() || !root.is_object() || !root.contains("model") ||
        !root["model"].is_object()) {
      return DataLossError("the base tokenizer.json does not parse");
    }
    const size_t at = base_json.find("\"merges\"");
    if (at != std::string_view::npos) {
      const size_t open = base_json.find('[', at);
      const size_t first = open == std::string_view::npos
                               ? std::string_view::npos
                               : base_json.find_first_not_of(" \t\r\n", open + 1);
      merges_as_strings = first != std::string_view::npos && base_json[first] == '"';
    }
  } else {
    root["version"] = "1.0";
    root["truncation"] = nullptr;
    root["padding"] = nullptr;
    root["added_tokens"] = Json::array();
    root["normalizer"] = spec.normalize_nfc ? Json{{"type", "NFC"}} : Json(nullptr);
    root["pre_tokenizer"] = {{"type", "Sequence"},
                             {"pretokenizers",
                              {{{"type", "Split"},
                                {"pattern", {{"Regex", std::string(kQwen2SplitRegex)}}},
                                {"behavior", "Isolated"},
                                {"invert", false}},
                               {{"type", "ByteLevel"},
                                {"add_prefix_space", false},
                                {"trim_offsets", false},
                                {"use_regex", false}}}}};
    root["post_processor"] = {{"type", "ByteLevel"},
                              {"add_prefix_space", false},
                              {"trim_offsets", false},
                              {"use_regex", false}};
    root["decoder"] = {{"type", "ByteLevel"},
                       {"add_prefix_space", false},
                       {"trim_offsets", false},
                       {"use_regex", false}};
    root["model"] = {{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"continuing_subword_prefix", ""},
                     {"end_of_word_suffix", ""},
                     {"fuse_unk", false},
                     {"byte_fallback", false},
                     {"ignore_merges", false}};
  }
  // Added tokens: keep the base entries' flags, matched by content.
  std::unordered_map<std::string, Json> base_added;
  if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
    for (const Json& e : root["added_tokens"]) {
      if (e.is_object() && e.contains("content") && e["content"].is_string()) {
        base_added[e["content"].get<std::string>()] = e;
      }
    }
  }
  Json added = Json::array();
  std::string vocab = "{";  // in id order, written by hand (a JSON object keeps keys sorted)
  std::unordered_map<std::string, int32_t> id_of;
  for (size_t id = 0; id < spec.tokens.size(); ++id) {
    const std::string& token = spec.tokens[id];
    id_of[token] = static_cast<int32_t>(id);
    const TokenType type = TypeOf(spec, id);
    if (!IsAdded(type)) {
      if (vocab.size() > 1) vocab += ",";
      vocab.append("\n  ").append(Json(token).dump()).append(": ").append(std::to_string(id));
      continue;
    }
    auto it = base_added.find(token);
    Json e = it != base_added.end() ? it->second
                                    : Json{{"id", 0},
                                           {"content", token},
                                           {"single_word", false},
                                           {"lstrip", false},
                                           {"rstrip", false},
                                           {"normalized", false},
                                           {"special", type == TokenType::kControl}};
    e["id"] = id;
    added.push_back(std::move(e));
  }
  vocab += "\n }";
  std::string merges = "[";
  for (const auto& [a, b] : MergeStrings(spec)) {
    if (merges.size() > 1) merges += ",";
    merges += "\n  ";
    if (merges_as_strings) {
      std::string pair = a;
      pair.push_back(' ');
      pair.append(b);
      merges.append(Json(pair).dump());
    } else {
      merges.push_back('[');
      merges.append(Json(a).dump()).append(", ").append(Json(b).dump()).push_back(']');
    }
  }
  merges += "\n ]";
  root["added_tokens"] = std::move(added);
  constexpr std::string_view kVocabMark = "@pocket-vocab@", kMergesMark = "@pocket-merges@";
  root["model"]["vocab"] = kVocabMark;
  root["model"]["merges"] = kMergesMark;
  // A TemplateProcessing post-processor names special tokens with their ids.
  if (root.contains("post_processor") && root["post_processor"].is_object() &&
      root["post_processor"].value("type", "") == "TemplateProcessing" &&
      root["post_processor"].contains("special_tokens")) {
    for (auto& [name, entry] : root["post_processor"]["special_tokens"].items()) {
      if (!entry.contains("tokens") || !entry["tokens"].is_array()) continue;
      Json ids = Json::array();
      for (const Json& t : entry["tokens"]) {
        auto it = t.is_string() ? id_of.find(t.get<std::string>()) : id_of.end();
        if (it == id_of.end()) {
          return FailedPreconditionError("post_processor special token ", QuoteBytes(name),
                                         " is not in the pruned vocabulary");
        }
        ids.push_back(it->second);
      }
      entry["ids"] = std::move(ids);
    }
  }
  std::string out = root.dump(1, ' ', /*ensure_ascii=*/false);
  for (const auto& [mark, text] :
       {std::pair<std::string_view, const std::string*>{kVocabMark, &vocab},
        {kMergesMark, &merges}}) {
    std::string quoted(1, '"');
    quoted.append(mark);
    quoted.push_back('"');
    const size_t at = out.find(quoted);
    if (at == std::string::npos) return InternalError("tokenizer.json: lost ", mark);
    out.replace(at, quoted.size(), *text);
  }
  return out;
}

}  // namespace pocket
