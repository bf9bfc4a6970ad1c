"""The Python API over the C API: Model, Session, Adapter, results and errors.

Native handles are owned by small handle objects that free them when nothing refers to them any
more. A Session's handle holds its Model's, an Adapter's holds the Model's, and a logits view holds
the Session's, so closing things in any order never frees memory something still uses: close()
makes the Python object unusable at once (its calls raise ClosedError) and the native memory goes
when the last user lets go.
"""
from __future__ import annotations

import ctypes
import enum
import json
import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional, Sequence, Union

import numpy as np

from . import _native as N


class Status(enum.IntEnum):
    """pocket_status."""
    OK = 0
    INVALID_ARGUMENT = 1
    NOT_FOUND = 2
    DATA_LOSS = 3
    UNIMPLEMENTED = 4
    OUT_OF_RANGE = 5
    RESOURCE_EXHAUSTED = 6
    CANCELLED = 7
    FAILED_PRECONDITION = 8
    IO = 9
    INTERNAL = 10
    BUFFER_TOO_SMALL = 11


class StopReason(enum.IntEnum):
    """Why a generation ended (pocket_stop_reason)."""
    EOS = 0
    STRING = 1
    MAX_TOKENS = 2
    CANCELLED = 3
    CALLBACK = 4
    CONTEXT_FULL = 5


class PocketError(Exception):
    """An error pocket reported: `status` (Status) and pocket's `message`, which names the file,
    field or position at fault."""

    def __init__(self, status: int, message: str):
        try:
            self.status = Status(status)
        except ValueError:
            self.status = Status.INTERNAL
        self.message = message
        super().__init__(f"{self.status.name}: {message}")


class ClosedError(PocketError):
    """A call on a Model, Session or Adapter after close()."""

    def __init__(self, what: str):
        super().__init__(Status.FAILED_PRECONDITION, f"the {what} is closed")


def _check(status: int, err: N.Error) -> None:
    if status != Status.OK:
        raise PocketError(status, err.message.decode("utf-8", "replace"))


def _utf8(text: str, what: str) -> bytes:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, not {type(text).__name__}")
    # surrogatepass would hand pocket invalid UTF-8; lone surrogates are an error here.
    return text.encode("utf-8")


class _Ref(ctypes.c_void_p):
    """A handle's pointer as a call argument: it holds the handle until the call returns, so a
    close() from another thread meanwhile cannot free what the call is using."""


def _ref(handle: "_Handle") -> _Ref:
    r = _Ref(handle.ptr)
    r.handle = handle
    return r


class _Handle:
    """A native pointer and the function that frees it; `keep` holds what must outlive it."""

    def __init__(self, ptr: int, free: Callable[[int], None], keep: Any = None):
        self.ptr = ptr
        self._free = free
        self._keep = keep

    def __del__(self):
        if self.ptr:
            self._free(self.ptr)
            self.ptr = None


def _messages(messages: Sequence[dict]) -> tuple[Any, list]:
    """A list of {"role", "content"} dicts as a pocket_chat_message array (and the bytes it
    points to, kept alive by the caller)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError("messages must be a list of {'role': ..., 'content': ...} dicts")
    arr = (N.ChatMessage * len(messages))()
    keep = []
    for i, m in enumerate(messages):
        try:
            role, content = m["role"], m["content"]
        except (TypeError, KeyError):
            raise TypeError(f"messages[{i}] must be a dict with 'role' and 'content'") from None
        r, c = _utf8(role, f"messages[{i}]['role']"), _utf8(content, f"messages[{i}]['content']")
        keep += [r, c]
        arr[i].role, arr[i].content = r, c
    return arr, keep


def _strings(values: Optional[Sequence[str]], what: str) -> tuple[Any, int, list]:
    if values is None:
        return None, 0, []
    if isinstance(values, str):
        values = [values]
    encoded = [_utf8(v, f"{what}[{i}]") for i, v in enumerate(values)]
    arr = (ctypes.c_char_p * len(encoded))(*encoded)
    return arr, len(encoded), encoded


class _Native:
    """What Model, Session and Adapter share: a native handle, the ClosedError once it is
    dropped, and the context-manager protocol."""
    _what = "object"
    _handle: Optional[_Handle] = None

    def _ptr(self) -> _Ref:
        if self._handle is None:
            raise ClosedError(self._what)
        return _ref(self._handle)

    def close(self) -> None:
        self._handle = None

    @property
    def closed(self) -> bool:
        return self._handle is None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class GenerateResult:
    """What a generation produced: its text and why and how it stopped."""
    text: str
    stop_reason: StopReason
    n_prompt_tokens: int
    n_generated_tokens: int
    prefill_ms: float
    decode_ms: float
    constraint_ms: float
    seed: int
    n_verify_passes: int = 0
    n_drafted_tokens: int = 0
    n_accepted_draft_tokens: int = 0

    def json(self) -> Any:
        """The text parsed as JSON (for json_schema outputs)."""
        return json.loads(self.text)


@dataclass(frozen=True)
class CandidateScore:
    """A candidate continuation's log-probability; `index` is its place in the caller's list."""
    index: int
    candidate: str
    n_tokens: int
    logprob: float
    probability: float


@dataclass(frozen=True)
class LabelScore:
    """A label of the classification head and its score for the input."""
    index: int
    label: str
    logit: float
    logprob: float
    probability: float


class Adapter(_Native):
    """A LoRA adapter (PEFT directory, llama.cpp LoRA .gguf or pocket adapter package), loaded
    once for a model and usable by any number of sessions, each with its own scale."""
    _what = "adapter"

    def __init__(self, model: "Model", path: str):
        err = N.Error()
        out = ctypes.c_void_p()
        st = N.adapter_load(model._ptr(), _utf8(str(path), "path"), ctypes.byref(out),
                            ctypes.byref(err))
        _check(st, err)
        self._handle: Optional[_Handle] = _Handle(out.value, N.adapter_free, model._handle)
        self.path = str(path)

    @property
    def max_rank(self) -> int:
        return N.adapter_max_rank(self._ptr())

    @property
    def n_matrices(self) -> int:
        return N.adapter_n_matrices(self._ptr())

    @property
    def targets(self) -> list[str]:
        return N.adapter_targets(self._ptr()).decode().split(",")

    def close(self) -> None:
        """Releases the adapter (its memory goes when no session uses it any more)."""
        self._handle = None


AdapterSpec = Union[Adapter, tuple, Sequence[Union[Adapter, tuple]]]


class Model(_Native):
    """A loaded model: a .pocket package, a GGUF file, a Hugging Face directory or a llama2.c
    checkpoint (with `tokenizer=`). The file is memory-mapped; close() (or leaving a `with`
    block) unmaps it once no session uses it."""
    _what = "model"

    def __init__(self, path: str, *, threads: int = 0, tokenizer: Optional[str] = None):
        if not isinstance(threads, int) or threads < 0:
            raise ValueError(f"threads must be an int >= 0 (0: one per hardware thread), not "
                             f"{threads!r}")
        params = N.ModelParams()
        N.model_params_init(ctypes.byref(params), ctypes.sizeof(params))
        tok = _utf8(str(tokenizer), "tokenizer") if tokenizer is not None else None
        params.tokenizer_path = tok
        err = N.Error()
        out = ctypes.c_void_p()
        st = N.model_load(_utf8(str(path), "path"), ctypes.byref(params), ctypes.byref(out),
                          ctypes.byref(err))
        _check(st, err)
        self._handle: Optional[_Handle] = _Handle(out.value, N.model_free)
        self.threads = threads
        self.path = str(path)

    @classmethod
    def load(cls, path: str, *, threads: int = 0, tokenizer: Optional[str] = None) -> "Model":
        """Loads a model; `threads` is the default for its sessions (0: one per hardware
        thread)."""
        return cls(path, threads=threads, tokenizer=tokenizer)

    def close(self) -> None:
        """Makes the model unusable; its mapping goes when its last session is closed."""
        self._handle = None

    @property
    def vocab_size(self) -> int:
        return N.model_vocab_size(self._ptr())

    @property
    def context_length(self) -> int:
        return N.model_context_length(self._ptr())

    @property
    def kernels(self) -> str:
        """The kernel table the model runs on ("avx512", "avx2", "neon", ...)."""
        return N.model_kernels(self._ptr()).decode()

    @property
    def labels(self) -> list[str]:
        """The labels of the model's classification head ([] without one)."""
        p = self._ptr()
        return [N.model_label(p, i).decode() for i in range(N.model_n_labels(p))]

    def tokenize(self, text: str, *, parse_special: bool = False) -> list[int]:
        """Token ids of `text` (special-token strings recognised only with parse_special)."""
        data = _utf8(text, "text")
        err, n = N.Error(), ctypes.c_size_t()
        cap = len(data) + 16
        while True:
            ids = (ctypes.c_int32 * cap)()
            st = N.tokenize(self._ptr(), data, len(data), parse_special, ids, cap,
                            ctypes.byref(n), ctypes.byref(err))
            if st == Status.BUFFER_TOO_SMALL and n.value > cap:
                cap = n.value
                continue
            _check(st, err)
            return list(ids[:n.value])

    def tokenize_chat(self, messages: Sequence[dict], *, enable_thinking: bool = True,
                      parse_special: bool = False) -> list[int]:
        """The tokens generate(messages=...) evaluates: the chat template applied."""
        arr, keep = _messages(messages)
        err, n = N.Error(), ctypes.c_size_t()
        cap = 256 + sum(len(k) for k in keep)
        while True:
            ids = (ctypes.c_int32 * cap)()
            st = N.tokenize_chat(self._ptr(), arr, len(messages), enable_thinking, parse_special,
                                 ids, cap, ctypes.byref(n), ctypes.byref(err))
            if st == Status.BUFFER_TOO_SMALL and n.value > cap:
                cap = n.value
                continue
            _check(st, err)
            return list(ids[:n.value])

    def detokenize_bytes(self, ids: Sequence[int]) -> bytes:
        """The bytes of the ids (a piece may end inside a UTF-8 character)."""
        arr = (ctypes.c_int32 * len(ids))(*ids)
        err, n = N.Error(), ctypes.c_size_t()
        cap = 16 * len(ids) + 16
        while True:
            buf = ctypes.create_string_buffer(cap)
            st = N.detokenize(self._ptr(), arr, len(ids), buf, cap, ctypes.byref(n),
                              ctypes.byref(err))
            if st == Status.BUFFER_TOO_SMALL and n.value > cap:
                cap = n.value
                continue
            _check(st, err)
            return buf.raw[:n.value]

    def detokenize(self, ids: Sequence[int]) -> str:
        """The text of the ids (bytes that are not whole UTF-8 characters become U+FFFD)."""
        return self.detokenize_bytes(ids).decode("utf-8", "replace")

    def session(self, *, threads: Optional[int] = None, n_ctx: int = 0,
                n_batch: int = 0) -> "Session":
        """A new conversation (its own KV cache). threads: None = the model's default."""
        return Session(self, threads=self.threads if threads is None else threads, n_ctx=n_ctx,
                       n_batch=n_batch)

    def load_adapter(self, path: str) -> Adapter:
        """Loads a LoRA adapter for this model (once; set it on sessions with set_adapters or
        generate(lora=...))."""
        return Adapter(self, path)


class Session(_Native):
    """One conversation: its KV cache, kept between calls for the common prefix. Calls on one
    session are serialised by the caller; cancel() may come from any thread."""
    _what = "session"

    def __init__(self, model: Model, *, threads: int = 0, n_ctx: int = 0, n_batch: int = 0):
        params = N.SessionParams()
        N.session_params_init(ctypes.byref(params), ctypes.sizeof(params))
        if n_ctx:
            params.n_ctx = n_ctx
        if n_batch:
            params.n_batch = n_batch
        params.n_threads = threads
        err = N.Error()
        out = ctypes.c_void_p()
        st = N.session_create(model._ptr(), ctypes.byref(params), ctypes.byref(out),
                              ctypes.byref(err))
        _check(st, err)
        self._handle: Optional[_Handle] = _Handle(out.value, N.session_free, model._handle)
        self.model = model
        self._adapters: tuple = ()
        self._vocab = N.model_vocab_size(model._ptr())

    def close(self) -> None:
        """Makes the session unusable, cancelling a call running on it in another thread; its
        memory goes when that call has returned and no logits view refers to it."""
        if self._handle is not None:
            N.session_cancel(self._handle.ptr)
        self._handle = None

    @property
    def threads(self) -> int:
        return N.session_n_threads(self._ptr())

    def cancel(self) -> None:
        """Stops the generate, score or classify running on this session (from any thread),
        within one token or prefill chunk; when none runs, the next one returns at once."""
        N.session_cancel(self._ptr())

    def reset(self) -> None:
        """Forgets the conversation (frees its KV memory)."""
        N.session_reset(self._ptr())

    # ---- adapters ----
    def set_adapters(self, adapters: AdapterSpec) -> None:
        """The adapters applied from the next call on: an Adapter, (Adapter, scale), or a list
        of them; [] removes them. The same set as before keeps the context."""
        items = _adapter_items(adapters)
        n = len(items)
        ptrs = (ctypes.c_void_p * max(n, 1))(*[a._ptr().value for a, _ in items])
        scales = (ctypes.c_float * max(n, 1))(*[s for _, s in items])
        err = N.Error()
        _check(N.session_set_adapters(self._ptr(), ptrs, scales, n, ctypes.byref(err)), err)
        # The session reads the adapters on every call: keep their handles alive meanwhile.
        self._adapters = tuple(a._handle for a, _ in items)

    # ---- generation ----
    def _params(self, kw: dict, keep: list) -> N.GenerateParams:
        p = N.GenerateParams()
        N.generate_params_init(ctypes.byref(p), ctypes.sizeof(p))
        for name in ("max_tokens", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                     "presence_penalty", "frequency_penalty", "draft_max", "draft_min",
                     "draft_p_min", "draft_branches"):
            v = kw.pop(name, None)
            if v is not None:
                setattr(p, name, v)
        seed = kw.pop("seed", None)
        if seed is not None:
            if not isinstance(seed, int) or not 0 <= seed < N.SEED_RANDOM:
                raise ValueError(f"seed must be an int in [0, 2**64 - 1), not {seed!r}")
            p.seed = seed
        arr, n, k = _strings(kw.pop("stop", None), "stop")
        p.stop_strings, p.n_stop_strings = arr, n
        keep += [arr, k]
        choice = kw.pop("choice", None)
        if choice is not None:
            if isinstance(choice, str) or len(choice) == 0:
                raise ValueError("choice must be a non-empty list of strings")
            arr, n, k = _strings(choice, "choice")
            p.choices, p.n_choices = arr, n
            keep += [arr, k]
        schema = kw.pop("json_schema", None)
        if schema is not None and not isinstance(schema, str):
            schema = json.dumps(schema)
        for name, value in (("json_schema", schema), ("regex", kw.pop("regex", None)),
                            ("grammar", kw.pop("grammar", None)),
                            ("span_source", kw.pop("span_source", None)),
                            ("spec", kw.pop("spec", None))):
            if value is not None:
                b = _utf8(value, name)
                keep.append(b)
                setattr(p, name, b)
        p.enable_thinking = bool(kw.pop("enable_thinking", True))
        p.parse_special = bool(kw.pop("parse_special", False))
        lora = kw.pop("lora", None)
        if lora is not None:
            self.set_adapters(lora)
        if kw:
            raise TypeError(f"unknown generate option(s): {', '.join(sorted(kw))}")
        return p

    def _run(self, prompt: Optional[str], messages: Optional[Sequence[dict]], kw: dict,
             on_piece: Callable[[bytes], bool]) -> GenerateResult:
        keep: list = []
        params = self._params(dict(kw), keep)
        if (prompt is None) == (messages is None):
            raise ValueError("pass exactly one of prompt and messages")
        if messages is not None:
            arr, k = _messages(messages)
            keep += [arr, k]
            params.messages, params.n_messages = arr, len(messages)
        prompt_b = _utf8(prompt, "prompt") if prompt is not None else None
        pieces: list[bytes] = []
        raised: list[BaseException] = []

        def callback(text, n, _user):
            try:
                piece = ctypes.string_at(text, n)
                pieces.append(piece)
                return bool(on_piece(piece))
            except BaseException as e:  # surfaced after the call: a C frame cannot unwind it
                raised.append(e)
                return False

        cb = N.TEXT_CALLBACK(callback)
        result, err = N.GenerateResultC(), N.Error()
        st = N.generate(self._ptr(), prompt_b, ctypes.byref(params), cb, None,
                        ctypes.byref(result), ctypes.byref(err))
        if raised:
            raise raised[0]
        _check(st, err)
        return GenerateResult(
            text=b"".join(pieces).decode("utf-8", "replace"),
            stop_reason=StopReason(result.stop_reason),
            n_prompt_tokens=result.n_prompt_tokens,
            n_generated_tokens=result.n_generated_tokens,
            prefill_ms=result.prefill_ms,
            decode_ms=result.decode_ms,
            constraint_ms=result.constraint_ms,
            seed=result.seed,
            n_verify_passes=result.n_verify_passes,
            n_drafted_tokens=result.n_drafted_tokens,
            n_accepted_draft_tokens=result.n_accepted_draft_tokens,
        )

    def generate(self, prompt: Optional[str] = None, *, messages: Optional[Sequence[dict]] = None,
                 on_text: Optional[Callable[[str], Any]] = None, **options) -> GenerateResult:
        """Generates a continuation of `prompt`, or the assistant's reply to `messages`
        ([{"role": "user", "content": "..."}], the model's chat template).

        Options: max_tokens (256), temperature (0.8; 0 = greedy), top_k, top_p, min_p,
        repetition_penalty, presence_penalty, frequency_penalty, seed (None: drawn, reported in
        the result), stop (strings), and at most one constraint: json_schema (dict or JSON text),
        grammar (GBNF), regex, choice (list of strings); span_source; spec ("lookup",
        "draft:FILE", "dflash:DIR", "auto"), draft_max, draft_min, draft_p_min, draft_branches;
        lora (adapters to set on the session first); enable_thinking, parse_special.
        on_text(piece) is called with each piece of text; returning False stops.
        """
        if on_text is None:
            return self._run(prompt, messages, options, lambda piece: True)
        return self._run(prompt, messages, options,
                         lambda piece: on_text(piece.decode("utf-8", "replace")) is not False)

    def stream(self, prompt: Optional[str] = None, *, messages: Optional[Sequence[dict]] = None,
               **options) -> Iterator[str]:
        """generate() as an iterator of text pieces. Breaking out of the loop (or closing the
        iterator) stops the generation at the next token; the session stays usable. The last
        GenerateResult is in `self.last_result` when the iterator ends."""
        q: "queue.Queue[tuple]" = queue.Queue()
        stop = threading.Event()

        def on_piece(piece: bytes) -> bool:
            q.put(("piece", piece))
            return not stop.is_set()

        def worker():
            try:
                q.put(("done", self._run(prompt, messages, options, on_piece)))
            except BaseException as e:
                q.put(("error", e))

        t = threading.Thread(target=worker, name="pocket-stream", daemon=True)
        self.last_result: Optional[GenerateResult] = None
        t.start()
        try:
            while True:
                kind, value = q.get()
                if kind == "piece":
                    yield value.decode("utf-8", "replace")
                elif kind == "done":
                    self.last_result = value
                    return
                else:
                    raise value
        finally:
            # The consumer stopped early: the worker returns at the next piece (pieces come only
            # after the prompt is evaluated, so the generation is past its prefill by now).
            stop.set()
            t.join()

    # ---- scores ----
    def score(self, prompt: Optional[str], candidates: Sequence[str], *,
              messages: Optional[Sequence[dict]] = None, enable_thinking: bool = True,
              parse_special: bool = False) -> list[CandidateScore]:
        """Log-probabilities of candidate continuations, all in one forward pass, best first."""
        if isinstance(candidates, str) or len(candidates) == 0:
            raise ValueError("candidates must be a non-empty list of strings")
        arr, n, keep = _strings(candidates, "candidates")
        params = N.ScoreParams()
        N.score_params_init(ctypes.byref(params), ctypes.sizeof(params))
        params.enable_thinking, params.parse_special = enable_thinking, parse_special
        if (prompt is None) == (messages is None):
            raise ValueError("pass exactly one of prompt and messages")
        if messages is not None:
            marr, mkeep = _messages(messages)
            params.messages, params.n_messages = marr, len(messages)
        prompt_b = _utf8(prompt, "prompt") if prompt is not None else None
        out, err = (N.CandidateScoreC * n)(), N.Error()
        _check(N.score(self._ptr(), prompt_b, ctypes.byref(params), arr, n, out, ctypes.byref(err)),
               err)
        return [CandidateScore(s.index, candidates[s.index], s.n_tokens, s.logprob, s.probability)
                for s in out]

    def classify(self, prompt: Optional[str] = None, *,
                 messages: Optional[Sequence[dict]] = None, enable_thinking: bool = True,
                 parse_special: bool = False) -> list[LabelScore]:
        """The labels of the classification head (the model's, or an adapter's) for the input,
        best first, from one forward pass."""
        params = N.ClassifyParams()
        N.classify_params_init(ctypes.byref(params), ctypes.sizeof(params))
        params.enable_thinking, params.parse_special = enable_thinking, parse_special
        if (prompt is None) == (messages is None):
            raise ValueError("pass exactly one of prompt and messages")
        if messages is not None:
            marr, mkeep = _messages(messages)
            params.messages, params.n_messages = marr, len(messages)
        prompt_b = _utf8(prompt, "prompt") if prompt is not None else None
        err, n = N.Error(), ctypes.c_size_t()
        cap = 16
        while True:
            out = (N.LabelScoreC * cap)()
            st = N.classify(self._ptr(), prompt_b, ctypes.byref(params), out, cap,
                            ctypes.byref(n), ctypes.byref(err))
            if st == Status.BUFFER_TOO_SMALL and n.value > cap:
                cap = n.value
                continue
            _check(st, err)
            return [LabelScore(s.index, s.label.decode(), s.logit, s.logprob, s.probability)
                    for s in out[:n.value]]

    def logits(self, ids: Sequence[int], *, copy: bool = False) -> np.ndarray:
        """The logits after the token ids ([vocab] float32), the ids becoming the session's
        context. Without `copy` the array is a read-only view of the session's own buffer (no
        copy): valid until the session's next call, which overwrites it."""
        ids_arr = np.ascontiguousarray(ids, dtype=np.int32)
        if ids_arr.ndim != 1:
            raise ValueError("ids must be a flat sequence of token ids")
        ptr = ctypes.POINTER(ctypes.c_float)()
        err = N.Error()
        ref = self._ptr()
        st = N.session_eval(ref, ids_arr.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                            len(ids_arr), ctypes.byref(ptr), ctypes.byref(err))
        _check(st, err)
        view = np.ctypeslib.as_array(ptr, shape=(self._vocab,))
        if copy:
            return view.copy()
        view = _Owned(view, ref.handle)
        view.flags.writeable = False
        return view

    # ---- saved sessions ----
    def save(self, path: str, user_data: bytes = b"") -> None:
        """Writes the conversation (tokens, keys and values, last logits) and `user_data` to
        `path` (a temporary file renamed at the end)."""
        data = bytes(user_data)
        err = N.Error()
        _check(N.session_save(self._ptr(), _utf8(str(path), "path"), data, len(data),
                              ctypes.byref(err)), err)

    def load(self, path: str) -> bytes:
        """Makes the conversation the one saved at `path`; returns its user data."""
        p = _utf8(str(path), "path")
        err, n = N.Error(), ctypes.c_size_t()
        st = N.session_load(self._ptr(), p, None, 0, ctypes.byref(n), ctypes.byref(err))
        if st == Status.BUFFER_TOO_SMALL:
            buf = ctypes.create_string_buffer(max(n.value, 1))
            st = N.session_load(self._ptr(), p, buf, n.value, ctypes.byref(n), ctypes.byref(err))
            _check(st, err)
            return buf.raw[:n.value]
        _check(st, err)
        return b""


class _Owned(np.ndarray):
    """A view that keeps the native buffer's owner (a session handle) alive."""

    def __new__(cls, view: np.ndarray, owner: Any):
        obj = view.view(cls)
        obj._owner = owner
        return obj

    def __array_finalize__(self, obj):
        self._owner = getattr(obj, "_owner", None)


def _adapter_items(spec: AdapterSpec) -> list[tuple[Adapter, float]]:
    if isinstance(spec, Adapter):
        return [(spec, 1.0)]
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], Adapter):
        return [(spec[0], float(spec[1]))]
    out = []
    for i, item in enumerate(spec):
        if isinstance(item, Adapter):
            out.append((item, 1.0))
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Adapter):
            out.append((item[0], float(item[1])))
        else:
            raise TypeError(f"lora[{i}] must be an Adapter or (Adapter, scale)")
    return out


def version() -> str:
    """The library's version."""
    return N.version().decode()
