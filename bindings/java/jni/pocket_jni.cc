// The JNI side of the ai.pocket Java bindings: thin wrappers over pocket's C API, registered on
// ai.pocket.NativeLib by JNI_OnLoad (RegisterNatives, so a Java/C++ signature mismatch fails at
// load time with the method's name instead of at first call, and only JNI_OnLoad is exported).
//
// Conventions shared with the Java side: handles are jlong; strings arrive and leave as UTF-8
// byte arrays (the Java side converts with StandardCharsets.UTF_8, never JNI's modified UTF-8);
// pocket errors become ai.pocket.PocketException(int status, byte[] message). Null and range
// checks of arguments are the Java side's; a C++ exception never crosses into Java or into
// libpocket's frames.
#include <jni.h>
#include <pocket/pocket.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <new>
#include <string>
#include <vector>

namespace {

constexpr const char* kNativeLibClass = "ai/pocket/NativeLib";

struct Classes {
  jclass pocket_exception = nullptr;
  jmethodID pocket_exception_init = nullptr;
  jclass text_sink = nullptr;
  jmethodID text_sink_accept = nullptr;
  jclass byte_array = nullptr;
  jclass object = nullptr;
};
// Filled once by JNI_OnLoad: looking classes up later would fail on Android threads whose class
// loader is the system's, and the global references keep them from being unloaded.
Classes g_classes;

template <typename T>
T* FromHandle(jlong handle) {
  return reinterpret_cast<T*>(static_cast<intptr_t>(handle));
}

jlong ToHandle(const void* p) {
  return static_cast<jlong>(reinterpret_cast<intptr_t>(p));
}

void ThrowJava(JNIEnv* env, const char* class_name, const char* message) {
  if (env->ExceptionCheck()) return;
  jclass cls = env->FindClass(class_name);
  if (cls == nullptr) return;  // NoClassDefFoundError is pending instead
  env->ThrowNew(cls, message);
  env->DeleteLocalRef(cls);
}

// Returns null (with OutOfMemoryError pending) when Java cannot allocate it.
jbyteArray NewBytes(JNIEnv* env, const char* data, size_t n) {
  if (n > static_cast<size_t>(std::numeric_limits<jsize>::max())) {
    ThrowJava(env, "java/lang/OutOfMemoryError", "pocket_jni: text too large for a Java array");
    return nullptr;
  }
  jbyteArray array = env->NewByteArray(static_cast<jsize>(n));
  if (array == nullptr) return nullptr;
  env->SetByteArrayRegion(array, 0, static_cast<jsize>(n), reinterpret_cast<const jbyte*>(data));
  return array;
}

jbyteArray NewBytes(JNIEnv* env, const char* c_string) {
  if (c_string == nullptr) return nullptr;
  return NewBytes(env, c_string, std::strlen(c_string));
}

void ThrowPocket(JNIEnv* env, pocket_status status, const char* message, size_t length) {
  if (env->ExceptionCheck()) return;
  jbyteArray bytes = NewBytes(env, message, length);
  if (bytes == nullptr) return;
  jobject ex = env->NewObject(g_classes.pocket_exception, g_classes.pocket_exception_init,
                              static_cast<jint>(status), bytes);
  env->DeleteLocalRef(bytes);
  if (ex == nullptr) return;
  env->Throw(static_cast<jthrowable>(ex));
  env->DeleteLocalRef(ex);
}

void ThrowPocket(JNIEnv* env, pocket_status status, const pocket_error& err) {
  // The library fills message, but a status without one must still say something useful.
  size_t n = strnlen(err.message, sizeof(err.message));
  if (n == 0) {
    const char* name = pocket_status_name(status);
    ThrowPocket(env, status, name, std::strlen(name));
    return;
  }
  ThrowPocket(env, status, err.message, n);
}

// Runs a native method's body, turning a C++ exception (std::bad_alloc while copying arguments)
// into a Java one instead of letting it unwind through the JVM.
template <typename R, typename F>
R Guarded(JNIEnv* env, R fallback, F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    ThrowJava(env, "java/lang/OutOfMemoryError", "pocket_jni: out of native memory");
  } catch (const std::exception& e) {
    ThrowJava(env, "java/lang/RuntimeException", e.what());
  } catch (...) {
    ThrowJava(env, "java/lang/RuntimeException", "pocket_jni: unknown C++ exception");
  }
  return fallback;
}

// A NUL-terminated copy of a Java byte[] (null stays null).
class Text {
 public:
  bool Read(JNIEnv* env, jbyteArray array) {
    present_ = array != nullptr;
    if (!present_) return true;
    const jsize n = env->GetArrayLength(array);
    bytes_.resize(static_cast<size_t>(n));
    if (n > 0) env->GetByteArrayRegion(array, 0, n, reinterpret_cast<jbyte*>(&bytes_[0]));
    return !env->ExceptionCheck();
  }
  const char* c_str() const { return present_ ? bytes_.c_str() : nullptr; }
  const char* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }

 private:
  std::string bytes_;
  bool present_ = false;
};

// Copies of a Java byte[][], with the char* array C wants.
class TextList {
 public:
  bool Read(JNIEnv* env, jobjectArray array) {
    items_.clear();
    pointers_.clear();
    if (array == nullptr) return true;
    const jsize n = env->GetArrayLength(array);
    items_.resize(static_cast<size_t>(n));
    for (jsize i = 0; i < n; ++i) {
      auto element = static_cast<jbyteArray>(env->GetObjectArrayElement(array, i));
      if (element == nullptr) {
        ThrowJava(env, "java/lang/NullPointerException", "pocket_jni: null string in an array");
        return false;
      }
      const bool ok = items_[static_cast<size_t>(i)].Read(env, element);
      env->DeleteLocalRef(element);
      if (!ok) return false;
    }
    // Only now: the pointers must not move with the vector's growth.
    for (const Text& t : items_) pointers_.push_back(t.c_str());
    return true;
  }
  const char* const* data() const { return pointers_.empty() ? nullptr : pointers_.data(); }
  size_t size() const { return pointers_.size(); }
  const char* operator[](size_t i) const { return pointers_[i]; }

 private:
  std::vector<Text> items_;
  std::vector<const char*> pointers_;
};

class Messages {
 public:
  bool Read(JNIEnv* env, jobjectArray roles, jobjectArray contents) {
    if (!roles_.Read(env, roles) || !contents_.Read(env, contents)) return false;
    if (roles_.size() != contents_.size()) {
      ThrowJava(env, "java/lang/IllegalArgumentException", "pocket_jni: roles and contents differ");
      return false;
    }
    messages_.clear();
    for (size_t i = 0; i < roles_.size(); ++i) messages_.push_back({roles_[i], contents_[i]});
    return true;
  }
  const pocket_chat_message* data() const { return messages_.empty() ? nullptr : messages_.data(); }
  size_t size() const { return messages_.size(); }

 private:
  TextList roles_, contents_;
  std::vector<pocket_chat_message> messages_;
};

bool ReadInts(JNIEnv* env, jintArray array, std::vector<int32_t>* out) {
  const jsize n = env->GetArrayLength(array);
  out->resize(static_cast<size_t>(n));
  if (n > 0) env->GetIntArrayRegion(array, 0, n, reinterpret_cast<jint*>(out->data()));
  return !env->ExceptionCheck();
}

jintArray NewInts(JNIEnv* env, const int32_t* data, size_t n) {
  jintArray array = env->NewIntArray(static_cast<jsize>(n));
  if (array == nullptr) return nullptr;
  env->SetIntArrayRegion(array, 0, static_cast<jsize>(n), reinterpret_cast<const jint*>(data));
  return array;
}

// ---- library and defaults ----

jbyteArray Version(JNIEnv* env, jclass) {
  return NewBytes(env, pocket_version());
}

// Indices shared with NativeLib.java (I_*, F_*, R_*).
enum IntField { kMaxTokens, kTopK, kDraftMax, kDraftMin, kDraftBranches, kThinking, kSpecial };
enum FloatField { kTemperature, kTopP, kMinP, kRepetition, kPresence, kFrequency, kDraftPMin };
constexpr jsize kIntFields = 7, kFloatFields = 7;
enum ResultLong {
  kStopReason,
  kPromptTokens,
  kGeneratedTokens,
  kSeed,
  kVerifyPasses,
  kDraftedTokens,
  kAcceptedTokens,
  kPlainSteps,
  kTreePasses
};
constexpr jsize kResultLongs = 9, kResultDoubles = 4;

void GenerateDefaults(JNIEnv* env, jclass, jintArray ints, jfloatArray floats, jlongArray seed) {
  const pocket_generate_params p = pocket_generate_default_params();
  jint i[kIntFields] = {};
  i[kMaxTokens] = p.max_tokens;
  i[kTopK] = p.top_k;
  i[kDraftMax] = p.draft_max;
  i[kDraftMin] = p.draft_min;
  i[kDraftBranches] = p.draft_branches;
  i[kThinking] = p.enable_thinking ? 1 : 0;
  i[kSpecial] = p.parse_special ? 1 : 0;
  jfloat f[kFloatFields] = {};
  f[kTemperature] = p.temperature;
  f[kTopP] = p.top_p;
  f[kMinP] = p.min_p;
  f[kRepetition] = p.repetition_penalty;
  f[kPresence] = p.presence_penalty;
  f[kFrequency] = p.frequency_penalty;
  f[kDraftPMin] = p.draft_p_min;
  const jlong s = static_cast<jlong>(p.seed);
  env->SetIntArrayRegion(ints, 0, kIntFields, i);
  env->SetFloatArrayRegion(floats, 0, kFloatFields, f);
  env->SetLongArrayRegion(seed, 0, 1, &s);
}

// ---- model ----

jlong ModelLoad(JNIEnv* env, jclass, jbyteArray path, jbyteArray tokenizer_path) {
  return Guarded<jlong>(env, 0, [&]() -> jlong {
    Text p, t;
    if (!p.Read(env, path) || !t.Read(env, tokenizer_path)) return 0;
    pocket_model_params params = pocket_model_default_params();
    params.tokenizer_path = t.c_str();
    pocket_model* model = nullptr;
    pocket_error err;
    const pocket_status st = pocket_model_load(p.c_str(), &params, &model, &err);
    if (st != POCKET_OK) {
      ThrowPocket(env, st, err);
      return 0;
    }
    return ToHandle(model);
  });
}

void ModelFree(JNIEnv*, jclass, jlong model) {
  pocket_model_free(FromHandle<pocket_model>(model));
}

jint ModelVocabSize(JNIEnv*, jclass, jlong model) {
  return pocket_model_vocab_size(FromHandle<pocket_model>(model));
}

jint ModelContextLength(JNIEnv*, jclass, jlong model) {
  return pocket_model_context_length(FromHandle<pocket_model>(model));
}

jbyteArray ModelKernels(JNIEnv* env, jclass, jlong model) {
  return NewBytes(env, pocket_model_kernels(FromHandle<pocket_model>(model)));
}

jint ModelLabelCount(JNIEnv*, jclass, jlong model) {
  return static_cast<jint>(pocket_model_n_labels(FromHandle<pocket_model>(model)));
}

jbyteArray ModelLabel(JNIEnv* env, jclass, jlong model, jint index) {
  if (index < 0) return nullptr;
  return NewBytes(env,
                  pocket_model_label(FromHandle<pocket_model>(model), static_cast<size_t>(index)));
}

// ---- tokens ----

// Calls fill(capacity, &needed) with a first guess, then once more with what it asked for.
template <typename T, typename F>
bool FillGrowing(JNIEnv* env, std::vector<T>* out, size_t guess, F&& fill) {
  out->resize(guess);
  size_t needed = 0;
  pocket_error err;
  pocket_status st = fill(out->data(), out->size(), &needed, &err);
  if (st == POCKET_ERR_BUFFER_TOO_SMALL) {
    out->resize(needed);
    st = fill(out->data(), out->size(), &needed, &err);
  }
  if (st != POCKET_OK) {
    ThrowPocket(env, st, err);
    return false;
  }
  out->resize(needed);
  return true;
}

jintArray Tokenize(JNIEnv* env, jclass, jlong model, jbyteArray text, jboolean parse_special) {
  return Guarded<jintArray>(env, nullptr, [&]() -> jintArray {
    Text t;
    if (!t.Read(env, text)) return nullptr;
    auto* m = FromHandle<const pocket_model>(model);
    std::vector<int32_t> ids;
    // A token covers at least one byte, plus room for BOS/EOS.
    const bool ok = FillGrowing(
        env, &ids, t.size() + 8, [&](int32_t* buf, size_t cap, size_t* n, pocket_error* err) {
          return pocket_tokenize(m, t.data(), t.size(), parse_special, buf, cap, n, err);
        });
    return ok ? NewInts(env, ids.data(), ids.size()) : nullptr;
  });
}

jintArray TokenizeChat(JNIEnv* env, jclass, jlong model, jobjectArray roles, jobjectArray contents,
                       jboolean enable_thinking, jboolean parse_special) {
  return Guarded<jintArray>(env, nullptr, [&]() -> jintArray {
    Messages msgs;
    if (!msgs.Read(env, roles, contents)) return nullptr;
    auto* m = FromHandle<const pocket_model>(model);
    std::vector<int32_t> ids;
    const bool ok =
        FillGrowing(env, &ids, 256, [&](int32_t* buf, size_t cap, size_t* n, pocket_error* err) {
          return pocket_tokenize_chat(m, msgs.data(), msgs.size(), enable_thinking, parse_special,
                                      buf, cap, n, err);
        });
    return ok ? NewInts(env, ids.data(), ids.size()) : nullptr;
  });
}

jbyteArray Detokenize(JNIEnv* env, jclass, jlong model, jintArray ids) {
  return Guarded<jbyteArray>(env, nullptr, [&]() -> jbyteArray {
    std::vector<int32_t> in;
    if (!ReadInts(env, ids, &in)) return nullptr;
    auto* m = FromHandle<const pocket_model>(model);
    std::vector<char> text;
    const bool ok = FillGrowing(
        env, &text, in.size() * 8 + 16, [&](char* buf, size_t cap, size_t* n, pocket_error* err) {
          return pocket_detokenize(m, in.data(), in.size(), buf, cap, n, err);
        });
    return ok ? NewBytes(env, text.data(), text.size()) : nullptr;
  });
}

// ---- adapters ----

jlong AdapterLoad(JNIEnv* env, jclass, jlong model, jbyteArray path) {
  return Guarded<jlong>(env, 0, [&]() -> jlong {
    Text p;
    if (!p.Read(env, path)) return 0;
    pocket_adapter* adapter = nullptr;
    pocket_error err;
    const pocket_status st =
        pocket_adapter_load(FromHandle<const pocket_model>(model), p.c_str(), &adapter, &err);
    if (st != POCKET_OK) {
      ThrowPocket(env, st, err);
      return 0;
    }
    return ToHandle(adapter);
  });
}

void AdapterFree(JNIEnv*, jclass, jlong adapter) {
  pocket_adapter_free(FromHandle<pocket_adapter>(adapter));
}

jint AdapterMaxRank(JNIEnv*, jclass, jlong adapter) {
  return pocket_adapter_max_rank(FromHandle<const pocket_adapter>(adapter));
}

jint AdapterMatrixCount(JNIEnv*, jclass, jlong adapter) {
  return pocket_adapter_n_matrices(FromHandle<const pocket_adapter>(adapter));
}

jlong AdapterBytes(JNIEnv*, jclass, jlong adapter) {
  return static_cast<jlong>(pocket_adapter_bytes(FromHandle<const pocket_adapter>(adapter)));
}

jbyteArray AdapterTargets(JNIEnv* env, jclass, jlong adapter) {
  return NewBytes(env, pocket_adapter_targets(FromHandle<const pocket_adapter>(adapter)));
}

jint AdapterLabelCount(JNIEnv*, jclass, jlong adapter) {
  return static_cast<jint>(pocket_adapter_n_labels(FromHandle<const pocket_adapter>(adapter)));
}

jbyteArray AdapterLabel(JNIEnv* env, jclass, jlong adapter, jint index) {
  if (index < 0) return nullptr;
  return NewBytes(env, pocket_adapter_label(FromHandle<const pocket_adapter>(adapter),
                                            static_cast<size_t>(index)));
}

// ---- sessions ----

jlong SessionCreate(JNIEnv* env, jclass, jlong model, jint n_threads, jint n_ctx, jint n_batch) {
  pocket_session_params params = pocket_session_default_params();
  params.n_threads = n_threads;
  // 0 keeps pocket's defaults, which the Java side does not duplicate.
  if (n_ctx != 0) params.n_ctx = n_ctx;
  if (n_batch != 0) params.n_batch = n_batch;
  pocket_session* session = nullptr;
  pocket_error err;
  const pocket_status st =
      pocket_session_create(FromHandle<const pocket_model>(model), &params, &session, &err);
  if (st != POCKET_OK) {
    ThrowPocket(env, st, err);
    return 0;
  }
  return ToHandle(session);
}

void SessionFree(JNIEnv*, jclass, jlong session) {
  pocket_session_free(FromHandle<pocket_session>(session));
}

jint SessionThreadCount(JNIEnv*, jclass, jlong session) {
  return pocket_session_n_threads(FromHandle<const pocket_session>(session));
}

void SessionCancel(JNIEnv*, jclass, jlong session) {
  pocket_session_cancel(FromHandle<pocket_session>(session));
}

void SessionReset(JNIEnv*, jclass, jlong session) {
  pocket_session_reset(FromHandle<pocket_session>(session));
}

void SessionSetAdapters(JNIEnv* env, jclass, jlong session, jlongArray adapters,
                        jfloatArray scales) {
  Guarded<int>(env, 0, [&]() -> int {
    const jsize n = env->GetArrayLength(adapters);
    std::vector<jlong> handles(static_cast<size_t>(n));
    if (n > 0) env->GetLongArrayRegion(adapters, 0, n, handles.data());
    std::vector<const pocket_adapter*> list;
    for (jlong h : handles) list.push_back(FromHandle<const pocket_adapter>(h));
    std::vector<float> s;
    if (scales != nullptr) {
      s.resize(static_cast<size_t>(env->GetArrayLength(scales)));
      if (!s.empty()) env->GetFloatArrayRegion(scales, 0, static_cast<jsize>(s.size()), s.data());
    }
    if (env->ExceptionCheck()) return 0;
    pocket_error err;
    const pocket_status st =
        pocket_session_set_adapters(FromHandle<pocket_session>(session), list.data(),
                                    scales != nullptr ? s.data() : nullptr, list.size(), &err);
    if (st != POCKET_OK) ThrowPocket(env, st, err);
    return 0;
  });
}

jfloatArray SessionEval(JNIEnv* env, jclass, jlong session, jintArray ids, jint vocab_size) {
  return Guarded<jfloatArray>(env, nullptr, [&]() -> jfloatArray {
    std::vector<int32_t> in;
    if (!ReadInts(env, ids, &in)) return nullptr;
    const float* logits = nullptr;
    pocket_error err;
    const pocket_status st = pocket_session_eval(FromHandle<pocket_session>(session), in.data(),
                                                 in.size(), &logits, &err);
    if (st != POCKET_OK) {
      ThrowPocket(env, st, err);
      return nullptr;
    }
    jfloatArray out = env->NewFloatArray(vocab_size);
    if (out == nullptr) return nullptr;
    env->SetFloatArrayRegion(out, 0, vocab_size, logits);
    return out;
  });
}

void SessionSave(JNIEnv* env, jclass, jlong session, jbyteArray path, jbyteArray user_data) {
  Guarded<int>(env, 0, [&]() -> int {
    Text p, data;
    if (!p.Read(env, path) || !data.Read(env, user_data)) return 0;
    pocket_error err;
    const pocket_status st =
        pocket_session_save(FromHandle<const pocket_session>(session), p.c_str(),
                            data.size() > 0 ? data.data() : nullptr, data.size(), &err);
    if (st != POCKET_OK) ThrowPocket(env, st, err);
    return 0;
  });
}

jbyteArray SessionLoad(JNIEnv* env, jclass, jlong session, jbyteArray path) {
  return Guarded<jbyteArray>(env, nullptr, [&]() -> jbyteArray {
    Text p;
    if (!p.Read(env, path)) return nullptr;
    auto* s = FromHandle<pocket_session>(session);
    // Most apps save little state: one read of the file then suffices.
    std::vector<char> data(4096);
    size_t n = 0;
    pocket_error err;
    pocket_status st = pocket_session_load(s, p.c_str(), data.data(), data.size(), &n, &err);
    // Again while the file grows between the calls (another writer renaming a new save over it).
    for (int tries = 0; st == POCKET_ERR_BUFFER_TOO_SMALL && tries < 3; ++tries) {
      data.resize(n);
      st = pocket_session_load(s, p.c_str(), data.data(), data.size(), &n, &err);
    }
    if (st != POCKET_OK) {
      ThrowPocket(env, st, err);
      return nullptr;
    }
    return NewBytes(env, data.data(), n);
  });
}

// ---- generate ----

struct Stream {
  JNIEnv* env;
  jobject sink;  // ai.pocket.TextSink or null
  std::string text;
  bool out_of_memory = false;
};

// pocket calls this on the thread that called pocket_generate (it runs the decode loop there), so
// the JNIEnv of that call is the right one. It must not throw: it runs inside libpocket's frames.
bool OnText(const char* text, size_t len, void* user_data) {
  auto* s = static_cast<Stream*>(user_data);
  try {
    s->text.append(text, len);
  } catch (...) {
    s->out_of_memory = true;
    return false;
  }
  if (s->sink == nullptr) return true;
  JNIEnv* env = s->env;
  if (env->ExceptionCheck()) return false;
  jbyteArray piece = NewBytes(env, text, len);
  if (piece == nullptr) return false;
  const jboolean go_on = env->CallBooleanMethod(s->sink, g_classes.text_sink_accept, piece);
  // Without this, a long generation would fill the local reference table.
  env->DeleteLocalRef(piece);
  if (env->ExceptionCheck()) return false;
  return go_on == JNI_TRUE;
}

jbyteArray Generate(JNIEnv* env, jclass, jlong session, jbyteArray prompt, jobjectArray roles,
                    jobjectArray contents, jintArray ints, jfloatArray floats, jlong seed,
                    jobjectArray stop_strings, jobjectArray choices, jbyteArray regex,
                    jbyteArray json_schema, jbyteArray grammar, jbyteArray span_source,
                    jbyteArray spec, jobject sink, jlongArray result_longs,
                    jdoubleArray result_doubles) {
  return Guarded<jbyteArray>(env, nullptr, [&]() -> jbyteArray {
    Text p, re, schema, gbnf, span, sp;
    Messages msgs;
    TextList stops, choice_list;
    if (!p.Read(env, prompt) || !msgs.Read(env, roles, contents) ||
        !stops.Read(env, stop_strings) || !choice_list.Read(env, choices) || !re.Read(env, regex) ||
        !schema.Read(env, json_schema) || !gbnf.Read(env, grammar) ||
        !span.Read(env, span_source) || !sp.Read(env, spec)) {
      return nullptr;
    }
    jint i[kIntFields];
    jfloat f[kFloatFields];
    env->GetIntArrayRegion(ints, 0, kIntFields, i);
    env->GetFloatArrayRegion(floats, 0, kFloatFields, f);
    if (env->ExceptionCheck()) return nullptr;

    pocket_generate_params params = pocket_generate_default_params();
    params.max_tokens = i[kMaxTokens];
    params.top_k = i[kTopK];
    params.draft_max = i[kDraftMax];
    params.draft_min = i[kDraftMin];
    params.draft_branches = i[kDraftBranches];
    params.enable_thinking = i[kThinking] != 0;
    params.parse_special = i[kSpecial] != 0;
    params.temperature = f[kTemperature];
    params.top_p = f[kTopP];
    params.min_p = f[kMinP];
    params.repetition_penalty = f[kRepetition];
    params.presence_penalty = f[kPresence];
    params.frequency_penalty = f[kFrequency];
    params.draft_p_min = f[kDraftPMin];
    params.seed = static_cast<uint64_t>(seed);
    params.stop_strings = stops.data();
    params.n_stop_strings = stops.size();
    params.choices = choice_list.data();
    params.n_choices = choice_list.size();
    params.regex = re.c_str();
    params.json_schema = schema.c_str();
    params.grammar = gbnf.c_str();
    params.span_source = span.c_str();
    params.spec = sp.c_str();
    params.messages = msgs.data();
    params.n_messages = msgs.size();

    Stream stream{env, sink, std::string()};
    pocket_generate_result result;
    pocket_error err;
    const pocket_status st = pocket_generate(FromHandle<pocket_session>(session), p.c_str(),
                                             &params, OnText, &stream, &result, &err);
    // An exception from the sink (OutOfMemoryError making a piece) wins over everything else.
    if (env->ExceptionCheck()) return nullptr;
    if (st != POCKET_OK) {
      ThrowPocket(env, st, err);
      return nullptr;
    }
    if (stream.out_of_memory) {
      ThrowJava(env, "java/lang/OutOfMemoryError", "pocket_jni: out of memory collecting text");
      return nullptr;
    }
    jlong l[kResultLongs] = {};
    l[kStopReason] = result.stop_reason;
    l[kPromptTokens] = result.n_prompt_tokens;
    l[kGeneratedTokens] = result.n_generated_tokens;
    l[kSeed] = static_cast<jlong>(result.seed);
    l[kVerifyPasses] = result.n_verify_passes;
    l[kDraftedTokens] = result.n_drafted_tokens;
    l[kAcceptedTokens] = result.n_accepted_draft_tokens;
    l[kPlainSteps] = result.n_plain_decode_steps;
    l[kTreePasses] = result.n_tree_passes;
    const jdouble d[kResultDoubles] = {result.prefill_ms, result.decode_ms, result.constraint_ms,
                                       result.draft_ms};
    env->SetLongArrayRegion(result_longs, 0, kResultLongs, l);
    env->SetDoubleArrayRegion(result_doubles, 0, kResultDoubles, d);
    if (env->ExceptionCheck()) return nullptr;
    return NewBytes(env, stream.text.data(), stream.text.size());
  });
}

// ---- score and classify ----

void Score(JNIEnv* env, jclass, jlong session, jbyteArray prompt, jobjectArray roles,
           jobjectArray contents, jboolean enable_thinking, jboolean parse_special,
           jobjectArray candidates, jlongArray index_and_tokens,
           jdoubleArray logprob_and_probability) {
  Guarded<int>(env, 0, [&]() -> int {
    Text p;
    Messages msgs;
    TextList cands;
    if (!p.Read(env, prompt) || !msgs.Read(env, roles, contents) || !cands.Read(env, candidates)) {
      return 0;
    }
    pocket_score_params params = pocket_score_default_params();
    params.messages = msgs.data();
    params.n_messages = msgs.size();
    params.enable_thinking = enable_thinking;
    params.parse_special = parse_special;
    std::vector<pocket_candidate_score> scores(cands.size());
    pocket_error err;
    const pocket_status st = pocket_score(FromHandle<pocket_session>(session), p.c_str(), &params,
                                          cands.data(), cands.size(), scores.data(), &err);
    if (st != POCKET_OK) {
      ThrowPocket(env, st, err);
      return 0;
    }
    std::vector<jlong> longs;
    std::vector<jdouble> doubles;
    for (const pocket_candidate_score& s : scores) {
      longs.push_back(static_cast<jlong>(s.index));
      longs.push_back(s.n_tokens);
      doubles.push_back(s.logprob);
      doubles.push_back(s.probability);
    }
    if (scores.empty()) return 0;
    env->SetLongArrayRegion(index_and_tokens, 0, static_cast<jsize>(longs.size()), longs.data());
    env->SetDoubleArrayRegion(logprob_and_probability, 0, static_cast<jsize>(doubles.size()),
                              doubles.data());
    return 0;
  });
}

jobjectArray Classify(JNIEnv* env, jclass, jlong session, jbyteArray prompt, jobjectArray roles,
                      jobjectArray contents, jboolean enable_thinking, jboolean parse_special) {
  return Guarded<jobjectArray>(env, nullptr, [&]() -> jobjectArray {
    Text p;
    Messages msgs;
    if (!p.Read(env, prompt) || !msgs.Read(env, roles, contents)) return nullptr;
    pocket_classify_params params = pocket_classify_default_params();
    params.messages = msgs.data();
    params.n_messages = msgs.size();
    params.enable_thinking = enable_thinking;
    params.parse_special = parse_special;
    auto* s = FromHandle<pocket_session>(session);
    // Heads have a handful of labels; a bigger one costs a second forward pass, not an error.
    std::vector<pocket_label_score> scores(64);
    size_t n = 0;
    pocket_error err;
    pocket_status st =
        pocket_classify(s, p.c_str(), &params, scores.data(), scores.size(), &n, &err);
    if (st == POCKET_ERR_BUFFER_TOO_SMALL) {
      scores.resize(n);
      st = pocket_classify(s, p.c_str(), &params, scores.data(), scores.size(), &n, &err);
    }
    if (st != POCKET_OK) {
      ThrowPocket(env, st, err);
      return nullptr;
    }
    const auto count = static_cast<jsize>(n);
    std::vector<jlong> indices;
    std::vector<jdouble> values;
    // Each allocation checked before the next: no JNI call with an OutOfMemoryError pending.
    jlongArray index_array = env->NewLongArray(count);
    if (index_array == nullptr) return nullptr;
    jdoubleArray value_array = env->NewDoubleArray(3 * count);
    if (value_array == nullptr) return nullptr;
    jobjectArray label_array = env->NewObjectArray(count, g_classes.byte_array, nullptr);
    if (label_array == nullptr) return nullptr;
    jobjectArray out = env->NewObjectArray(3, g_classes.object, nullptr);
    if (out == nullptr) return nullptr;
    for (size_t i = 0; i < n; ++i) {
      indices.push_back(static_cast<jlong>(scores[i].index));
      values.push_back(scores[i].logit);
      values.push_back(scores[i].logprob);
      values.push_back(scores[i].probability);
      jbyteArray label = NewBytes(env, scores[i].label != nullptr ? scores[i].label : "");
      if (label == nullptr) return nullptr;
      env->SetObjectArrayElement(label_array, static_cast<jsize>(i), label);
      env->DeleteLocalRef(label);
    }
    if (count > 0) {
      env->SetLongArrayRegion(index_array, 0, count, indices.data());
      env->SetDoubleArrayRegion(value_array, 0, 3 * count, values.data());
    }
    env->SetObjectArrayElement(out, 0, index_array);
    env->SetObjectArrayElement(out, 1, value_array);
    env->SetObjectArrayElement(out, 2, label_array);
    return out;
  });
}

// ---- registration ----

#define POCKET_NATIVE(name, signature, fn) \
  { const_cast<char*>(name), const_cast<char*>(signature), reinterpret_cast<void*>(fn) }

const JNINativeMethod kMethods[] = {
    POCKET_NATIVE("version", "()[B", Version),
    POCKET_NATIVE("generateDefaults", "([I[F[J)V", GenerateDefaults),
    POCKET_NATIVE("modelLoad", "([B[B)J", ModelLoad),
    POCKET_NATIVE("modelFree", "(J)V", ModelFree),
    POCKET_NATIVE("modelVocabSize", "(J)I", ModelVocabSize),
    POCKET_NATIVE("modelContextLength", "(J)I", ModelContextLength),
    POCKET_NATIVE("modelKernels", "(J)[B", ModelKernels),
    POCKET_NATIVE("modelLabelCount", "(J)I", ModelLabelCount),
    POCKET_NATIVE("modelLabel", "(JI)[B", ModelLabel),
    POCKET_NATIVE("tokenize", "(J[BZ)[I", Tokenize),
    POCKET_NATIVE("tokenizeChat", "(J[[B[[BZZ)[I", TokenizeChat),
    POCKET_NATIVE("detokenize", "(J[I)[B", Detokenize),
    POCKET_NATIVE("adapterLoad", "(J[B)J", AdapterLoad),
    POCKET_NATIVE("adapterFree", "(J)V", AdapterFree),
    POCKET_NATIVE("adapterMaxRank", "(J)I", AdapterMaxRank),
    POCKET_NATIVE("adapterMatrixCount", "(J)I", AdapterMatrixCount),
    POCKET_NATIVE("adapterBytes", "(J)J", AdapterBytes),
    POCKET_NATIVE("adapterTargets", "(J)[B", AdapterTargets),
    POCKET_NATIVE("adapterLabelCount", "(J)I", AdapterLabelCount),
    POCKET_NATIVE("adapterLabel", "(JI)[B", AdapterLabel),
    POCKET_NATIVE("sessionCreate", "(JIII)J", SessionCreate),
    POCKET_NATIVE("sessionFree", "(J)V", SessionFree),
    POCKET_NATIVE("sessionThreadCount", "(J)I", SessionThreadCount),
    POCKET_NATIVE("sessionCancel", "(J)V", SessionCancel),
    POCKET_NATIVE("sessionReset", "(J)V", SessionReset),
    POCKET_NATIVE("sessionSetAdapters", "(J[J[F)V", SessionSetAdapters),
    POCKET_NATIVE("sessionEval", "(J[II)[F", SessionEval),
    POCKET_NATIVE("sessionSave", "(J[B[B)V", SessionSave),
    POCKET_NATIVE("sessionLoad", "(J[B)[B", SessionLoad),
    POCKET_NATIVE("generate", "(J[B[[B[[B[I[FJ[[B[[B[B[B[B[B[BLai/pocket/TextSink;[J[D)[B",
                  Generate),
    POCKET_NATIVE("score", "(J[B[[B[[BZZ[[B[J[D)V", Score),
    POCKET_NATIVE("classify", "(J[B[[B[[BZZ)[Ljava/lang/Object;", Classify),
};

#undef POCKET_NATIVE

jclass GlobalClass(JNIEnv* env, const char* name) {
  jclass local = env->FindClass(name);
  if (local == nullptr) return nullptr;
  auto global = static_cast<jclass>(env->NewGlobalRef(local));
  env->DeleteLocalRef(local);
  return global;
}

}  // namespace

extern "C" JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM* vm, void*) {
  JNIEnv* env = nullptr;
  if (vm->GetEnv(reinterpret_cast<void**>(&env), JNI_VERSION_1_6) != JNI_OK) return JNI_ERR;
  Classes c;
  c.pocket_exception = GlobalClass(env, "ai/pocket/PocketException");
  c.text_sink = GlobalClass(env, "ai/pocket/TextSink");
  c.byte_array = GlobalClass(env, "[B");
  c.object = GlobalClass(env, "java/lang/Object");
  if (c.pocket_exception == nullptr || c.text_sink == nullptr || c.byte_array == nullptr ||
      c.object == nullptr) {
    return JNI_ERR;
  }
  c.pocket_exception_init = env->GetMethodID(c.pocket_exception, "<init>", "(I[B)V");
  c.text_sink_accept = env->GetMethodID(c.text_sink, "accept", "([B)Z");
  if (c.pocket_exception_init == nullptr || c.text_sink_accept == nullptr) return JNI_ERR;
  jclass native_lib = env->FindClass(kNativeLibClass);
  if (native_lib == nullptr) return JNI_ERR;
  const jint registered =
      env->RegisterNatives(native_lib, kMethods, sizeof(kMethods) / sizeof(kMethods[0]));
  env->DeleteLocalRef(native_lib);
  if (registered != JNI_OK) return JNI_ERR;
  g_classes = c;
  return JNI_VERSION_1_6;
}
