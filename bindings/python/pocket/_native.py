"""The C API (include/pocket/pocket.h) as ctypes declarations, and where the library is found.

The structs mirror the header field for field; every params struct is initialised by the
library's own *_params_init with this module's sizeof, so a library newer than these declarations
still reads them correctly (struct_size versioning).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float, c_int,
                    c_int32, c_size_t, c_uint64, c_void_p)

SEED_RANDOM = 2**64 - 1


class Error(Structure):
    _fields_ = [("code", c_int), ("message", c_char * 1024)]


class ModelParams(Structure):
    _fields_ = [("struct_size", c_size_t), ("tokenizer_path", c_char_p)]


class SessionParams(Structure):
    _fields_ = [("struct_size", c_size_t), ("n_ctx", c_int32), ("n_batch", c_int32),
                ("n_threads", c_int32)]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


class GenerateParams(Structure):
    _fields_ = [
        ("struct_size", c_size_t),
        ("max_tokens", c_int32),
        ("temperature", c_float),
        ("top_k", c_int32),
        ("top_p", c_float),
        ("min_p", c_float),
        ("repetition_penalty", c_float),
        ("presence_penalty", c_float),
        ("frequency_penalty", c_float),
        ("seed", c_uint64),
        ("stop_strings", POINTER(c_char_p)),
        ("n_stop_strings", c_size_t),
        ("choices", POINTER(c_char_p)),
        ("n_choices", c_size_t),
        ("regex", c_char_p),
        ("json_schema", c_char_p),
        ("grammar", c_char_p),
        ("span_source", c_char_p),
        ("messages", POINTER(ChatMessage)),
        ("n_messages", c_size_t),
        ("enable_thinking", c_bool),
        ("parse_special", c_bool),
        ("spec", c_char_p),
        ("draft_max", c_int32),
        ("draft_min", c_int32),
        ("draft_p_min", c_float),
        ("draft_branches", c_int32),
    ]


class GenerateResultC(Structure):
    _fields_ = [
        ("stop_reason", c_int),
        ("n_prompt_tokens", c_int32),
        ("n_generated_tokens", c_int32),
        ("prefill_ms", c_double),
        ("decode_ms", c_double),
        ("constraint_ms", c_double),
        ("seed", c_uint64),
        ("n_verify_passes", c_int32),
        ("n_drafted_tokens", c_int32),
        ("n_accepted_draft_tokens", c_int32),
        ("n_plain_decode_steps", c_int32),
        ("draft_ms", c_double),
        ("n_tree_passes", c_int32),
    ]


class CandidateScoreC(Structure):
    _fields_ = [("index", c_size_t), ("n_tokens", c_int32), ("logprob", c_double),
                ("probability", c_double)]


class ScoreParams(Structure):
    _fields_ = [("struct_size", c_size_t), ("messages", POINTER(ChatMessage)),
                ("n_messages", c_size_t), ("enable_thinking", c_bool), ("parse_special", c_bool)]


class LabelScoreC(Structure):
    _fields_ = [("index", c_size_t), ("label", c_char_p), ("logit", c_double),
                ("logprob", c_double), ("probability", c_double)]


ClassifyParams = ScoreParams  # the same fields in the same order (pocket.h)

TEXT_CALLBACK = ctypes.CFUNCTYPE(c_bool, POINTER(c_char), c_size_t, c_void_p)


def _candidates() -> list[str]:
    """Where libpocket may be, in order: $POCKET_LIBRARY, the copy bundled next to this module
    (pip install from a built checkout), the system's (ldconfig, an installed pocket)."""
    out = []
    env = os.environ.get("POCKET_LIBRARY")
    if env:
        out.append(env)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "libpocket.so")
    if os.path.exists(here):
        out.append(here)
    found = ctypes.util.find_library("pocket")
    if found:
        out.append(found)
    out.append("libpocket.so")
    return out


def _load() -> ctypes.CDLL:
    errors = []
    for path in _candidates():
        try:
            # CDLL (not PyDLL): the GIL is released while a call runs, so other Python threads
            # (a cancel, a UI) run meanwhile; callbacks take it back.
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            if path == os.environ.get("POCKET_LIBRARY"):
                break  # the one asked for by name: do not fall back to another silently
    raise ImportError("pocket: cannot load libpocket.so (set POCKET_LIBRARY to its path, or "
                      "install pocket's library): " + "; ".join(errors))


lib = _load()


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


E = POINTER(Error)
P = c_void_p

version = _fn("pocket_version", c_char_p)
status_name = _fn("pocket_status_name", c_char_p, c_int)
model_params_init = _fn("pocket_model_params_init", None, POINTER(ModelParams), c_size_t)
model_load = _fn("pocket_model_load", c_int, c_char_p, POINTER(ModelParams), POINTER(P), E)
model_free = _fn("pocket_model_free", None, P)
model_vocab_size = _fn("pocket_model_vocab_size", c_int32, P)
model_context_length = _fn("pocket_model_context_length", c_int32, P)
model_kernels = _fn("pocket_model_kernels", c_char_p, P)
model_n_labels = _fn("pocket_model_n_labels", c_size_t, P)
model_label = _fn("pocket_model_label", c_char_p, P, c_size_t)
tokenize = _fn("pocket_tokenize", c_int, P, c_char_p, c_size_t, c_bool, POINTER(c_int32), c_size_t,
               POINTER(c_size_t), E)
tokenize_chat = _fn("pocket_tokenize_chat", c_int, P, POINTER(ChatMessage), c_size_t, c_bool,
                    c_bool, POINTER(c_int32), c_size_t, POINTER(c_size_t), E)
detokenize = _fn("pocket_detokenize", c_int, P, POINTER(c_int32), c_size_t, POINTER(c_char),
                 c_size_t, POINTER(c_size_t), E)
session_params_init = _fn("pocket_session_params_init", None, POINTER(SessionParams), c_size_t)
session_create = _fn("pocket_session_create", c_int, P, POINTER(SessionParams), POINTER(P), E)
session_free = _fn("pocket_session_free", None, P)
session_n_threads = _fn("pocket_session_n_threads", c_int32, P)
session_cancel = _fn("pocket_session_cancel", None, P)
session_reset = _fn("pocket_session_reset", None, P)
session_eval = _fn("pocket_session_eval", c_int, P, POINTER(c_int32), c_size_t,
                   POINTER(POINTER(c_float)), E)
session_save = _fn("pocket_session_save", c_int, P, c_char_p, c_void_p, c_size_t, E)
session_load = _fn("pocket_session_load", c_int, P, c_char_p, c_void_p, c_size_t,
                   POINTER(c_size_t), E)
adapter_load = _fn("pocket_adapter_load", c_int, P, c_char_p, POINTER(P), E)
adapter_free = _fn("pocket_adapter_free", None, P)
adapter_max_rank = _fn("pocket_adapter_max_rank", c_int32, P)
adapter_n_matrices = _fn("pocket_adapter_n_matrices", c_int32, P)
adapter_bytes = _fn("pocket_adapter_bytes", c_uint64, P)
adapter_targets = _fn("pocket_adapter_targets", c_char_p, P)
session_set_adapters = _fn("pocket_session_set_adapters", c_int, P, POINTER(P), POINTER(c_float),
                           c_size_t, E)
session_n_adapters = _fn("pocket_session_n_adapters", c_size_t, P)
generate_params_init = _fn("pocket_generate_params_init", None, POINTER(GenerateParams), c_size_t)
generate = _fn("pocket_generate", c_int, P, c_char_p, POINTER(GenerateParams), TEXT_CALLBACK,
               c_void_p, POINTER(GenerateResultC), E)
score_params_init = _fn("pocket_score_params_init", None, POINTER(ScoreParams), c_size_t)
score = _fn("pocket_score", c_int, P, c_char_p, POINTER(ScoreParams), POINTER(c_char_p), c_size_t,
            POINTER(CandidateScoreC), E)
classify_params_init = _fn("pocket_classify_params_init", None, POINTER(ClassifyParams), c_size_t)
classify = _fn("pocket_classify", c_int, P, c_char_p, POINTER(ClassifyParams), POINTER(LabelScoreC),
               c_size_t, POINTER(c_size_t), E)

