"""The Python bindings against the CLI, on the real stories260K model and a random-weight Qwen3
model with the real Qwen3 tokenizer. Run by bindings/python/run_tests.sh (ctest bindings.python)
with POCKET_BIN, POCKET_SHARED_DIR, POCKET_CACHE_DIR and POCKET_WORK_DIR set."""
import json
import os
import subprocess
import threading
import time

import jsonschema
import numpy as np
import pytest

import pocket

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
BIN = os.environ.get("POCKET_BIN", os.path.join(SOURCE, "build", "bin", "pocket"))
SHARED = os.environ.get("POCKET_SHARED_DIR", os.path.join(SOURCE, "..", "shared"))
CACHE = os.environ.get("POCKET_CACHE_DIR", os.path.join(SOURCE, "cache"))
STORIES = os.path.join(SHARED, "testdata", "stories260K", "stories260K.bin")
STORIES_TOK = os.path.join(SHARED, "testdata", "stories260K", "tok512.bin")
QWEN3_TOK = os.path.join(CACHE, "tokenizer-qwen3", "package", "models", "tokenizer.json")
PROMPT = "Once upon a time"


def cli(*args):
    p = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, f"pocket {' '.join(map(str, args))}: {p.stderr[-2000:]}"
    return p.stdout


@pytest.fixture(scope="session")
def work(tmp_path_factory):
    return str(tmp_path_factory.mktemp("pocket-py"))


@pytest.fixture(scope="session")
def qwen3_path(work):
    path = os.path.join(work, "qwen3-tiny.gguf")
    cli("make-model", "--preset", "tiny", "--arch", "qwen3", "--type", "f32", "--seed", 3,
        "--tokenizer", QWEN3_TOK, "-o", path)
    return path




@pytest.fixture(scope="session", params=["stories", "qwen3"])
def any_model(request, qwen3_path):
    """(Model, the CLI's model flags) for each model."""
    if request.param == "stories":
        m = pocket.Model.load(STORIES, tokenizer=STORIES_TOK, threads=2)
        flags = ["-m", STORIES, "--tokenizer", STORIES_TOK]
    else:
        m = pocket.Model.load(qwen3_path, threads=2)
        flags = ["-m", qwen3_path]
    yield m, flags
    m.close()


@pytest.fixture(scope="session")
def stories():
    m = pocket.Model.load(STORIES, tokenizer=STORIES_TOK, threads=2)
    yield m
    m.close()


def test_greedy_text_equals_cli(any_model):
    model, flags = any_model
    ours = model.session().generate(PROMPT, max_tokens=24, temperature=0)
    theirs = json.loads(cli("run", *flags, "-p", PROMPT, "-n", 24, "--temp", 0, "--json"))
    assert ours.text == theirs["text"]
    assert ours.n_generated_tokens == len(theirs["tokens"])
    assert ours.stop_reason == pocket.StopReason.MAX_TOKENS
    # Token for token: the text's tokens are those the CLI generated.
    assert model.detokenize(theirs["tokens"]) == ours.text


def test_seeded_sampling_equals_cli(any_model):
    model, flags = any_model
    ours = model.session().generate(PROMPT, max_tokens=16, temperature=0.9, seed=7)
    theirs = json.loads(cli("run", *flags, "-p", PROMPT, "-n", 16, "--temp", 0.9, "--seed", 7,
                            "--json"))
    assert ours.text == theirs["text"] and ours.seed == 7


def test_stream_equals_generate_and_on_text(stories):
    s = stories.session()
    pieces = list(s.stream(PROMPT, max_tokens=20, temperature=0))
    assert len(pieces) > 3
    assert s.last_result.n_generated_tokens == 20
    seen = []
    r = s.generate(PROMPT, max_tokens=20, temperature=0, on_text=seen.append)
    assert "".join(pieces) == r.text == "".join(seen)


def test_stream_broken_after_three_pieces_leaves_session_usable(stories):
    s = stories.session()
    got = []
    for piece in s.stream(PROMPT, max_tokens=200, temperature=0):
        got.append(piece)
        if len(got) == 3:
            break
    full = s.generate(PROMPT, max_tokens=20, temperature=0)
    fresh = stories.session().generate(PROMPT, max_tokens=20, temperature=0)
    assert full.text == fresh.text and full.text.startswith("".join(got))
    # on_text returning False stops the same way.
    r = s.generate(PROMPT, max_tokens=200, temperature=0, on_text=lambda p: False)
    assert r.stop_reason == pocket.StopReason.CALLBACK and r.n_generated_tokens == 1


def test_cancel_from_another_thread_stops_within_a_token(stories):
    s = stories.session()
    started = threading.Event()
    count = [0]
    at_cancel = []

    def on_text(piece):
        count[0] += 1
        if count[0] == 5:
            started.set()
            time.sleep(0.05)  # the canceller runs meanwhile (this call holds the GIL otherwise)

    def canceller():
        started.wait(10)
        at_cancel.append(count[0])
        s.cancel()

    t = threading.Thread(target=canceller)
    t.start()
    r = s.generate(PROMPT, max_tokens=250, temperature=0, on_text=on_text)
    t.join()
    assert r.stop_reason == pocket.StopReason.CANCELLED
    assert count[0] - at_cancel[0] <= 1, (count[0], at_cancel)
    assert s.generate(PROMPT, max_tokens=4, temperature=0).n_generated_tokens == 4


def test_close_from_another_thread_during_a_generation(stories):
    s = stories.session()
    three = threading.Event()
    count = [0]
    results = []

    def on_text(piece):
        count[0] += 1
        if count[0] == 3:
            three.set()
            time.sleep(0.05)

    t = threading.Thread(target=lambda: results.append(
        s.generate(PROMPT, max_tokens=250, temperature=0, on_text=on_text)))
    t.start()
    three.wait(10)
    s.close()  # the running call keeps the native session until it returns
    t.join()
    assert results and results[0].stop_reason == pocket.StopReason.CANCELLED
    with pytest.raises(pocket.ClosedError):
        s.generate(PROMPT)


def test_generation_releases_the_gil(stories):
    s = stories.session(threads=1)
    ticks = [0]
    done = threading.Event()

    def spin():
        while not done.is_set():
            ticks[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    # One long C call (a 256-token prompt's logits): the other thread runs while it computes.
    before = ticks[0]
    s.logits(list(range(1, 257)))
    during = ticks[0] - before
    done.set()
    t.join()
    assert during > 1000, during


def test_score_equals_cli(any_model):
    model, flags = any_model
    candidates = [" there", " the", " a little"]
    ours = model.session().score(PROMPT, candidates)
    theirs = json.loads(cli("score", *flags, "-p", PROMPT, "--candidates", ",".join(candidates),
                            "--json"))
    assert [c.candidate for c in ours] == [c["text"] for c in theirs["candidates"]]
    for a, b in zip(ours, theirs["candidates"]):
        assert abs(a.logprob - b["logprob"]) <= 1e-6
    assert abs(sum(c.probability for c in ours) - 1.0) < 1e-9


def test_logits_are_a_view_and_equal_cli(any_model, work):
    model, flags = any_model
    s = model.session()
    ids = model.tokenize(PROMPT)
    view = s.logits(ids)
    assert view.shape == (model.vocab_size,) and view.dtype == np.float32
    assert not view.flags.writeable and not view.flags.owndata  # no copy
    out = os.path.join(work, "logits.npy")
    cli("logits", *flags, "--ids", ",".join(map(str, ids)), "-o", out)
    theirs = np.load(out).reshape(-1)[-model.vocab_size:]
    np.testing.assert_allclose(view, theirs, rtol=1e-5, atol=1e-5)
    first = s.generate(PROMPT, max_tokens=1, temperature=0)
    assert model.detokenize([int(np.argmax(s.logits(ids, copy=True)))]) == first.text
    with pytest.raises(pocket.PocketError) as e:
        s.logits([0, model.vocab_size])
    assert e.value.status == pocket.Status.INVALID_ARGUMENT and "token id 1" in e.value.message


def test_schema_constrained_answer_validates(qwen3_path):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                               "n": {"type": "integer", "minimum": 0,
                                                     "maximum": 9}},
              "required": ["ok", "n"], "additionalProperties": False}
    with pocket.Model.load(qwen3_path) as model:
        s = model.session()
        answers = []
        for seed in range(4):
            try:
                r = s.generate("Answer in JSON:", json_schema=schema, max_tokens=96,
                               temperature=1.0, seed=seed)
            except pocket.PocketError as e:  # the budget ran out: reported, never cut output
                assert e.status == pocket.Status.RESOURCE_EXHAUSTED
                continue
            jsonschema.validate(r.json(), schema)
            answers.append(r)
        assert answers, "no seed finished within the budget"


def test_choice_regex_grammar(stories):
    s = stories.session()
    choices = [" Lily", " Tom", " the dog"]
    r = s.generate(PROMPT + " there was", choice=choices, max_tokens=16, temperature=0)
    assert r.text in choices
    r = s.generate(PROMPT, regex=" [a-z]+", max_tokens=16, temperature=0)
    assert r.text.startswith(" ") and r.text[1:].isalpha() and r.text[1:].islower()


def test_chat_messages_and_stop_strings(qwen3_path):
    with pocket.Model.load(qwen3_path) as model:
        s = model.session()
        msgs = [{"role": "user", "content": "Hello"}]
        r = s.generate(messages=msgs, max_tokens=8, temperature=0, enable_thinking=False)
        flags = ["-m", qwen3_path, "--chat", "--no-think", "-p", "Hello", "-n", 8, "--temp", 0]
        assert r.text == json.loads(cli("run", *flags, "--json"))["text"]
        assert len(model.tokenize_chat(msgs, enable_thinking=False)) > 3


def test_adapters_loaded_once_set_per_session(qwen3_path, work):
    adapter_dir = os.path.join(work, "lora")
    cli("make-adapter", "-m", qwen3_path, "--rank", 4, "--seed", 5, "-o", adapter_dir)
    with pocket.Model.load(qwen3_path) as model:
        adapter = model.load_adapter(adapter_dir)
        assert adapter.max_rank == 4 and "q" in adapter.targets
        with_lora = model.session().generate(PROMPT, max_tokens=12, temperature=0, lora=adapter)
        plain = model.session().generate(PROMPT, max_tokens=12, temperature=0)
        theirs = json.loads(cli("run", "-m", qwen3_path, "--lora", adapter_dir, "-p", PROMPT,
                                "-n", 12, "--temp", 0, "--json"))
        assert with_lora.text == theirs["text"]
        s = model.session()
        s.set_adapters([(adapter, 1.0)])
        assert s.generate(PROMPT, max_tokens=12, temperature=0).text == with_lora.text
        s.set_adapters([])
        assert s.generate(PROMPT, max_tokens=12, temperature=0).text == plain.text
        adapter.close()
        with pytest.raises(pocket.ClosedError):
            s.set_adapters(adapter)


def test_save_and_load_a_session(stories, work):
    path = os.path.join(work, "chat.session")
    a = stories.session()
    a.generate(PROMPT, max_tokens=8, temperature=0)
    a.save(path, b"app state")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    b = stories.session()
    assert b.load(path) == b"app state"
    with pytest.raises(pocket.PocketError) as e:
        b.load(os.path.join(work, "missing.session"))
    assert e.value.status == pocket.Status.NOT_FOUND


def test_closed_objects_raise_clear_errors():
    model = pocket.Model.load(STORIES, tokenizer=STORIES_TOK)
    s = model.session()
    model.close()
    with pytest.raises(pocket.ClosedError, match="model is closed"):
        model.tokenize("x")
    with pytest.raises(pocket.ClosedError):
        model.session()
    # A session made before keeps its model alive.
    assert s.generate(PROMPT, max_tokens=2, temperature=0).n_generated_tokens == 2
    view = s.logits([1, 2, 3])
    s.close()
    with pytest.raises(pocket.ClosedError, match="session is closed"):
        s.generate(PROMPT)
    assert np.isfinite(view).all()  # the view keeps the session's memory alive


def test_bad_input_raises_with_pockets_message(stories, work, tmp_path):
    with pytest.raises(pocket.PocketError) as e:
        pocket.Model.load(os.path.join(work, "no-such-model.pocket"))
    assert e.value.status == pocket.Status.NOT_FOUND and "no-such-model.pocket" in e.value.message
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\x00" * 20)
    with pytest.raises(pocket.PocketError) as e:
        pocket.Model.load(str(junk))
    assert "junk.gguf" in e.value.message
    s = stories.session()
    with pytest.raises(pocket.PocketError) as e:
        s.generate(PROMPT, json_schema='{"type": "object", "not": {}}')
    assert e.value.status == pocket.Status.INVALID_ARGUMENT and '"not"' in e.value.message
    with pytest.raises(pocket.PocketError) as e:
        s.generate(PROMPT, json_schema="{not json")
    assert e.value.status == pocket.Status.INVALID_ARGUMENT
    with pytest.raises(TypeError):
        s.generate(PROMPT, max_tokens=4, no_such_option=1)
    with pytest.raises(TypeError):
        s.generate(b"bytes are not text")
    with pytest.raises(pocket.PocketError) as e:
        s.generate(PROMPT, temperature=-1.0)
    assert e.value.status == pocket.Status.INVALID_ARGUMENT
    with pytest.raises(pocket.PocketError) as e:
        s.classify(PROMPT)
    assert e.value.status == pocket.Status.FAILED_PRECONDITION
    with pytest.raises(pocket.PocketError) as e:
        s.generate("x" * 50000, max_tokens=1)
    assert e.value.status == pocket.Status.OUT_OF_RANGE


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.mark.skipif(os.environ.get("POCKET_SANITIZED") == "1", reason="RSS under ASan is not "
                    "the library's")
def test_load_generate_close_cycles_keep_rss_flat():
    def cycle():
        with pocket.Model.load(STORIES, tokenizer=STORIES_TOK, threads=1) as m:
            with m.session() as s:
                s.generate(PROMPT, max_tokens=4, temperature=0)
                list(s.stream(PROMPT, max_tokens=2, temperature=0))
    for _ in range(50):
        cycle()
    before = rss_kb()
    for _ in range(1000):
        cycle()
    grown = rss_kb() - before
    assert grown < 5 * 1024, f"RSS grew {grown} kB over 1,000 cycles"


def test_classify_with_a_head_equals_cli(work):
    """A .pocket copy of stories260K with a random 3-label head (made by the CLI)."""
    dim = int(np.fromfile(STORIES, dtype="<i4", count=1)[0])  # llama2.c: the config comes first
    head = os.path.join(work, "head.npy")
    np.save(head, np.random.default_rng(5).standard_normal((3, dim)).astype(np.float32))
    head_model = os.path.join(work, "head.pocket")
    cli("convert", STORIES, "--tokenizer", STORIES_TOK, "--weights", "f32", "--classifier-head",
        head, "--classifier-labels", "happy,sad,neutral", "-o", head_model)
    with pocket.Model.load(head_model) as model:
        assert model.labels == ["happy", "sad", "neutral"]
        ours = model.session().classify("The dog was happy.")
        theirs = json.loads(cli("score", "-m", head_model, "-p", "The dog was happy.", "--head",
                                "--json"))
        ranked = theirs.get("labels", theirs.get("candidates"))
        assert [l.label for l in ours] == [r.get("label", r.get("text")) for r in ranked]
        for a, b in zip(ours, ranked):
            assert abs(a.probability - b["probability"]) <= 1e-6
        assert abs(sum(l.probability for l in ours) - 1.0) < 1e-9


def test_speculative_decoding_is_lossless(any_model):
    model, _ = any_model
    s = model.session()
    prompt = PROMPT + ", there was a little girl. " * 3 + PROMPT
    plain = s.generate(prompt, max_tokens=24, temperature=0)
    spec = s.generate(prompt, max_tokens=24, temperature=0, spec="lookup", draft_max=8)
    assert spec.text == plain.text
    assert spec.n_verify_passes > 0 and spec.n_drafted_tokens >= spec.n_accepted_draft_tokens
