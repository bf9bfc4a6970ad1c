#!/usr/bin/env python3
"""Streams' inter-token latency while /v1/score runs beside them (issue 45), stdlib only.

The acceptance point: "While 4 clients stream, a client sending /v1/score requests with 16
candidates over a 1,000-token prompt raises the streams' P99 inter-token latency by at most 2x."

Starts POCKET serve -m MODEL --port 0 -t THREADS --parallel PARALLEL [EXTRA], warms it up, then:

  phase A (baseline): STREAMS client threads, each POSTing streamed /v1/completions back to back
      (temperature 0, ignore_eos, max_tokens TOKENS, logprobs 1, a short prompt of its own), for
      SECONDS;
  phase B: the same streams plus one client POSTing /v1/score back to back: CANDIDATES short
      candidates (2-6 words) over a prompt of about PROMPT_TOKENS tokens (varied English words;
      each request gets another prompt, so none reuses the previous one's context), for SECONDS.

Inter-token latency (ITL): pocket's server flushes streamed text every ~40 ms, so an SSE event
carries several tokens. For each event after a response's first, with gap = the time since the
response's previous event that carried tokens and k = the tokens it carries, ITL gets k samples of
gap / k. The first event (time to first token) is left out. Streamed events carry no logprobs:
the tokens come in the response's last event (logprobs.tokens), and each token is assigned to the
event whose text holds its last character.
Only events that arrive within the phase's SECONDS count; requests still running then finish
(uncounted) before the next phase starts.

Prints P50/P90/P99/max ITL of each phase, P99(B)/P99(A), the scores completed and their median
latency, and the aggregate streamed tokens/s of each phase; --json prints one JSON object instead.
Progress goes to stderr. Exits nonzero on errors only, never on the ratio.

Example:
  scripts/score-itl.py --pocket /tmp/pocket-base45 --seconds 15
"""
import argparse
import bisect
import difflib
import http.client
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WORDS = """
time year people way day man thing woman life child world school state family student group
country problem hand part place case week company system program question work government number
night point home water room mother area money story fact month lot right study book eye job word
business issue side kind head house service friend father power hour game line end member law car
city community name president team minute idea kid body information back parent face others level
office door health person art war history party result change morning reason research girl guy
moment air teacher force education river garden window letter market village bridge winter summer
forest island kitchen doctor music picture paper morning train station harbor lantern orchard
quiet bright ancient gentle heavy simple careful sudden narrow golden silver distant familiar
walk carry build follow remember explain consider believe describe imagine wonder gather measure
slowly often rarely almost perhaps quickly together always never again already nearly
""".split()
FUNCTION = "the a of and to in that it with as for on at by from but or".split()

CANDIDATE_WORDS = """
red blue green quiet bright old new small large happy sad early late warm cold soft hard river
mountain city forest ocean garden window letter song story dream morning evening winter summer
bird horse apple stone cloud road bridge lamp book friend teacher doctor sailor farmer painter
""".split()


def log(msg):
    print(f"score-itl: {msg}", file=sys.stderr, flush=True)


def percentile(xs, q):
    """Linear interpolation between closest ranks (numpy's default); None when xs is empty."""
    if not xs:
        return None
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class Server:
    def __init__(self, pocket, model, threads, parallel, extra):
        args = [pocket, "serve", "-m", model, "--port", "0", "-t", str(threads),
                "--parallel", str(parallel), *extra]
        log("starting " + " ".join(shlex.quote(a) for a in args))
        self.p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        self.log = []
        while True:
            line = self.p.stderr.readline()
            if not line:
                raise RuntimeError(f"pocket serve exited {self.p.wait()}: {''.join(self.log)}")
            self.log.append(line)
            m = re.search(r"listening on http://([^:]+):(\d+) \(model \"([^\"]+)\"\)", line)
            if m:
                self.host, self.port, self.model = m.group(1), int(m.group(2)), m.group(3)
                break
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        deadline = time.monotonic() + 120
        while True:
            try:
                status, _ = self.request("GET", "/health")
                if status == 200:
                    break
            except OSError:
                pass
            if self.p.poll() is not None:
                raise RuntimeError(f"pocket serve exited {self.p.returncode}: {self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError("pocket serve did not get ready in 120 s")
            time.sleep(0.1)

    def _read(self):
        for line in self.p.stderr:
            self.log.append(line)

    def tail(self, n=20):
        return "".join(self.log[-n:])

    def connect(self, timeout=600):
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def request(self, method, path, body=None):
        conn = self.connect()
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
            return r.status, data
        finally:
            conn.close()

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.reader.join(timeout=10)
        return self.p.returncode


# ---------------------------------------------------------------------------------------------
# Texts.

def english(rng, n_words):
    """n_words of varied English-like text: sentences of 8-16 words."""
    out = []
    left = 0
    for _ in range(n_words):
        if rng.random() < 0.25:
            w = rng.choice(FUNCTION)
        else:
            w = rng.choice(WORDS)
        if left == 0:
            left = rng.randint(8, 16)
            w = w.capitalize()
        left -= 1
        if left == 0:
            w += "."
        elif rng.random() < 0.06:
            w += ","
        out.append(w)
    return " ".join(out)


def count_tokens(server, text):
    status, data = server.request("POST", "/tokenize", {"content": text})
    if status != 200:
        raise RuntimeError(f"/tokenize answered {status}: {data[:300]!r}")
    return len(json.loads(data)["tokens"])


def sized_prompt(server, seed, target):
    """A text of about `target` tokens (by /tokenize), its words drawn with `seed`."""
    rng = random.Random(seed)
    words = english(rng, target * 2).split(" ")
    n = int(target * 0.8)
    best = None
    for _ in range(8):
        text = " ".join(words[:n])
        t = count_tokens(server, text)
        if best is None or abs(t - target) < abs(best[1] - target):
            best = (text, t)
        if abs(t - target) <= max(2, target // 200):
            break
        n = max(1, min(len(words), n + round((target - t) * n / max(t, 1))))
    return best


def make_candidates(n, seed=45):
    rng = random.Random(seed)
    seen, out = set(), []
    while len(out) < n:
        c = " ".join(rng.choice(CANDIDATE_WORDS) for _ in range(rng.randint(2, 6)))
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


STREAM_PROMPTS = [
    "Write a long story about a lighthouse keeper who finds a message in a bottle.",
    "Describe, step by step, how a small town prepares for its winter festival.",
    "Tell the history of an imaginary kingdom from its founding to its fall.",
    "Explain to a child how rivers shape the land over thousands of years.",
    "Write a travel diary of a week spent walking along a mountain railway.",
    "Describe a busy harbor market at dawn, stall by stall.",
    "Tell a tale of two rival bakers who must cook a feast together.",
    "Write the letters a sailor sends home during a long voyage.",
]


# ---------------------------------------------------------------------------------------------
# Streams.

class Phase:
    def __init__(self, name, seconds):
        self.name = name
        self.seconds = seconds
        self.start = None
        self.deadline = None
        self.lock = threading.Lock()
        self.itl = []              # seconds, k samples of gap/k per counted event
        self.window_tokens = 0     # tokens in events that arrived within the window
        self.events = 0            # counted events (after the first of a response, in the window)
        self.event_tokens = 0      # tokens in those events
        self.responses = 0
        self.aligned = 0           # responses whose token strings differ from the streamed text
        self.raw = []              # (event times, event texts, tokens) of each response
        self.scores = []           # (start, end) of each score request, seconds from the start
        self.score_prompt_tokens = []
        self.errors = []

    def error(self, msg):
        with self.lock:
            self.errors.append(msg)
        log(f"{self.name}: error: {msg}")


def place_tokens(event_texts, tokens):
    """Tokens carried by each event: a token goes to the event whose text holds its last
    character. Returns (counts, exact). The server replaces bytes that are not UTF-8 (a random
    model's byte tokens) with U+FFFD in the JSON, in the token strings and in the streamed text
    alike but not always at the same places (bytes split across tokens can make a valid character
    in the text), and its text_offset counts the raw bytes: so the token strings are aligned with
    the streamed text character by character (difflib where they differ; then not exact)."""
    streamed = "".join(event_texts)
    joined = "".join(tokens)
    cum, c = [], 0
    for t in event_texts:
        c += len(t)
        cum.append(c)
    counts = [0] * len(event_texts)
    if not counts:
        return counts, False
    exact = streamed == joined
    if not exact:
        matcher = difflib.SequenceMatcher(None, joined, streamed, autojunk=False)
        blocks = matcher.get_matching_blocks()
        starts = [blk.a for blk in blocks]

    def where(i):  # position in `streamed` of joined[i]
        if exact:
            return i
        k = bisect.bisect_right(starts, i) - 1
        if k < 0:
            return 0
        blk = blocks[k]
        if i < blk.a + blk.size:
            return blk.b + (i - blk.a)
        # Between matching blocks: as far past this block's end, but before the next block.
        nxt = blocks[k + 1].b if k + 1 < len(blocks) else len(streamed)
        return min(blk.b + blk.size + (i - blk.a - blk.size), max(nxt - 1, 0))

    end = 0
    for t in tokens:
        end += len(t)
        pos = where(end - 1) if end > 0 else 0  # its last character (empty tokens: the previous)
        j = bisect.bisect_right(cum, pos)       # the first event whose text reaches past pos
        counts[min(j, len(counts) - 1)] += 1
    return counts, exact


def stream_once(server, phase, prompt, max_tokens):
    """One streamed request; its events' arrival times and texts and its tokens go to
    phase.raw, processed after the phase (so that the clients spend no time on it meanwhile)."""
    body = {"model": server.model, "prompt": prompt, "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "ignore_eos": True, "logprobs": 1}
    conn = server.connect()
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        if r.status != 200:
            phase.error(f"/v1/completions answered {r.status}: {r.read()[:300]!r}")
            return False
        times, texts = [], []
        final = None
        while True:
            line = r.readline()
            if not line:
                phase.error("the stream ended without [DONE]")
                return False
            t = time.monotonic()
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                break
            ev = json.loads(payload)
            if "error" in ev:
                phase.error(f"error event: {ev['error']}")
                return False
            choices = ev.get("choices") or []
            if not choices:
                continue
            ch = choices[0]
            if ch.get("logprobs"):
                final = ch["logprobs"]
            text = ch.get("text") or ""
            if text:
                times.append(t)
                texts.append(text)
    finally:
        conn.close()
    if final is None:
        phase.error("no logprobs in the stream (is this pocket too old?)")
        return False
    with phase.lock:
        phase.raw.append((times, texts, final.get("tokens") or []))
    return True


def process(phase):
    """ITL samples and token counts of the phase's responses."""
    for times, texts, tokens in phase.raw:
        counts, exact = place_tokens(texts, tokens)
        prev = None
        for t, k in zip(times, counts):
            inside = phase.start <= t <= phase.deadline
            if inside:
                phase.window_tokens += k
            if k == 0:
                continue
            if prev is not None and inside:
                gap = t - prev
                phase.itl.extend([gap / k] * k)
                phase.events += 1
                phase.event_tokens += k
            prev = t
        phase.responses += 1
        if not exact:
            phase.aligned += 1
        if sum(counts) != len(tokens):
            phase.error(f"placed {sum(counts)} of {len(tokens)} tokens")


def stream_client(server, phase, prompt, max_tokens):
    try:
        while time.monotonic() < phase.deadline:
            if not stream_once(server, phase, prompt, max_tokens):
                return
    except Exception as e:  # noqa: BLE001 - any failure is the run's error
        phase.error(f"stream client: {type(e).__name__}: {e}")


def score_client(server, phase, prompts, candidates):
    i = 0
    try:
        while time.monotonic() < phase.deadline:
            text = prompts[i % len(prompts)]
            if i == len(prompts):
                log(f"{phase.name}: the {len(prompts)} score prompts are used up; reusing them")
            i += 1
            body = {"model": server.model, "prompt": text, "candidates": candidates}
            t0 = time.monotonic()
            status, data = server.request("POST", "/v1/score", body)
            t1 = time.monotonic()
            if status != 200:
                phase.error(f"/v1/score answered {status}: {data[:300]!r}")
                return
            out = json.loads(data)
            if len(out.get("results", [])) != len(candidates):
                phase.error(f"/v1/score gave {len(out.get('results', []))} results")
                return
            with phase.lock:
                phase.scores.append((t0 - phase.start, t1 - phase.start))
                phase.score_prompt_tokens.append(out.get("usage", {}).get("prompt_tokens"))
    except Exception as e:  # noqa: BLE001
        phase.error(f"score client: {type(e).__name__}: {e}")


def run_phase(server, phase, args, score_prompts=None, candidates=None):
    log(f"{phase.name}: {args.streams} streams"
        + (" + 1 score client" if score_prompts else "") + f" for {phase.seconds} s")
    phase.start = time.monotonic()
    phase.deadline = phase.start + phase.seconds
    threads = [threading.Thread(target=stream_client,
                                args=(server, phase, STREAM_PROMPTS[i % len(STREAM_PROMPTS)]
                                      + ("" if i < len(STREAM_PROMPTS) else f" (part {i})"),
                                      args.tokens), daemon=True)
               for i in range(args.streams)]
    if score_prompts:
        threads.append(threading.Thread(target=score_client,
                                        args=(server, phase, score_prompts, candidates),
                                        daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log(f"{phase.name}: done ({time.monotonic() - phase.start:.1f} s with the requests that "
        f"ran past the window), {len(phase.raw)} responses")


def summary(phase):
    ms = [x * 1000 for x in phase.itl]
    s = {
        "itl_samples": len(ms),
        "itl_p50_ms": percentile(ms, 50),
        "itl_p90_ms": percentile(ms, 90),
        "itl_p99_ms": percentile(ms, 99),
        "itl_max_ms": max(ms) if ms else None,
        "itl_mean_ms": sum(ms) / len(ms) if ms else None,
        "events": phase.events,
        "tokens_per_event": phase.event_tokens / phase.events if phase.events else None,
        "responses": phase.responses,
        "responses_aligned_by_difflib": phase.aligned,
        "tokens_per_s": phase.window_tokens / phase.seconds,
    }
    if phase.name == "B":
        done = [(a, b) for a, b in phase.scores if b <= phase.seconds]
        lat = [(b - a) * 1000 for a, b in phase.scores]
        s["scores_completed"] = len(done)
        s["scores_completed_incl_after_window"] = len(phase.scores)
        s["score_p50_ms"] = percentile(lat, 50)
        s["score_max_ms"] = max(lat) if lat else None
        pts = [p for p in phase.score_prompt_tokens if p is not None]
        s["score_prompt_tokens_median"] = percentile(pts, 50)
    return s


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pocket", default=os.path.join(ROOT, "build", "bin", "pocket"))
    ap.add_argument("-m", "--model",
                    default=os.path.join(ROOT, "cache", "models", "pocket-0.3b-int4.pocket"))
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=256, help="max_tokens of each streamed request")
    ap.add_argument("--seconds", type=float, default=20, help="duration of each phase")
    ap.add_argument("--prompt-tokens", type=int, default=1000)
    ap.add_argument("--candidates", type=int, default=16)
    ap.add_argument("--score-prompts", type=int, default=32,
                    help="distinct score prompts made up front (cycled if used up)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--extra-server-args", default="",
                    help="more arguments for pocket serve, one shell-quoted string")
    args = ap.parse_args()
    if not os.path.exists(args.pocket):
        sys.exit(f"score-itl: no {args.pocket} (build it, or pass --pocket)")
    if not os.path.exists(args.model):
        sys.exit(f"score-itl: no {args.model}")

    server = Server(args.pocket, args.model, args.threads, args.parallel,
                    shlex.split(args.extra_server_args))
    errors = []
    a = b = None
    sizes = []
    try:
        log(f"serving {server.model} on {server.host}:{server.port}")
        candidates = make_candidates(args.candidates)
        log(f"making {args.score_prompts} score prompts of ~{args.prompt_tokens} tokens")
        prompts, sizes = [], []
        for i in range(args.score_prompts):
            text, n = sized_prompt(server, 1000 + i, args.prompt_tokens)
            prompts.append(text)
            sizes.append(n)
        log(f"score prompts: {min(sizes)}-{max(sizes)} tokens (by /tokenize)")

        # Warm-up: a short stream and one score (another prompt), untimed.
        log("warming up")
        warm = Phase("warm-up", 0)
        warm.start, warm.deadline = time.monotonic(), time.monotonic()
        stream_once(server, warm, STREAM_PROMPTS[0], 16)
        wtext, _ = sized_prompt(server, 999, args.prompt_tokens)
        status, data = server.request("POST", "/v1/score", {"model": server.model,
                                                            "prompt": wtext,
                                                            "candidates": candidates})
        if status != 200:
            warm.error(f"/v1/score answered {status}: {data[:300]!r}")
        errors += warm.errors

        a = Phase("A", args.seconds)
        b = Phase("B", args.seconds)
        if not errors:
            run_phase(server, a, args)
            run_phase(server, b, args, prompts, candidates)
            process(a)
            process(b)
        errors += a.errors + b.errors
    finally:
        code = server.stop()
        if code not in (0, None):
            errors.append(f"pocket serve exited {code}: {server.tail()}")

    if a is None or b is None or not a.itl:
        for e in errors or ["phase A gave no inter-token latency samples"]:
            log(e)
        sys.exit(1)

    sa, sb = summary(a), summary(b)
    ratio = (sb["itl_p99_ms"] / sa["itl_p99_ms"]
             if sa["itl_p99_ms"] and sb["itl_p99_ms"] is not None else None)
    result = {
        "pocket": args.pocket,
        "model": args.model,
        "threads": args.threads,
        "parallel": args.parallel,
        "streams": args.streams,
        "tokens": args.tokens,
        "seconds": args.seconds,
        "prompt_tokens_target": args.prompt_tokens,
        "score_prompt_tokens_by_tokenize": [min(sizes), max(sizes)],
        "candidates": args.candidates,
        "note": "the server flushes streamed text every ~40 ms, so an SSE event carries several "
                "tokens; ITL samples are gap/k for each of an event's k tokens",
        "A": sa,
        "B": sb,
        "p99_ratio": ratio,
        "errors": errors,
    }
    if args.json:
        print(json.dumps(result, indent=None))
    else:
        print(f"pocket serve {args.pocket} -m {os.path.basename(args.model)} -t {args.threads} "
              f"--parallel {args.parallel}; {args.streams} streams of {args.tokens} tokens; "
              f"{args.seconds:g} s per phase")
        print("note: the server flushes streamed text every ~40 ms, so one SSE event carries "
              "several tokens; ITL = gap/k for each of an event's k tokens "
              "(time to first token left out)")
        print(f"{'phase':<6}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}"
              f"{'samples':>9}{'tok/ev':>8}{'tok/s':>8}")
        for name, s in (("A", sa), ("B", sb)):
            print(f"{name:<6}{fmt(s['itl_p50_ms']):>9}{fmt(s['itl_p90_ms']):>9}"
                  f"{fmt(s['itl_p99_ms']):>9}{fmt(s['itl_max_ms']):>9}{s['itl_samples']:>9}"
                  f"{fmt(s['tokens_per_event'], 2):>8}{fmt(s['tokens_per_s']):>8}")
        print(f"P99 ratio B/A: {fmt(ratio, 2)} (acceptance: at most 2.00)")
        print(f"scores (B): {sb['scores_completed']} completed in the window "
              f"({sb['scores_completed_incl_after_window']} in all), median latency "
              f"{fmt(sb['score_p50_ms'], 0)} ms, max {fmt(sb['score_max_ms'], 0)} ms; "
              f"{args.candidates} candidates over {fmt(sb['score_prompt_tokens_median'], 0)} "
              f"prompt tokens")
        n = sa["responses_aligned_by_difflib"] + sb["responses_aligned_by_difflib"]
        if n:
            print(f"note: {n} of {sa['responses'] + sb['responses']} responses' token strings "
                  f"differ from their streamed text (U+FFFD for bytes that are not UTF-8); their "
                  f"tokens were placed by aligning the two")
    if errors:
        for e in errors:
            log(e)
        sys.exit(1)


if __name__ == "__main__":
    main()
