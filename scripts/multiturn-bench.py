#!/usr/bin/env python3
"""Multi-turn chat benchmark of `pocket serve`, side by side with llama.cpp's llama-server
(issue 45), with Python's standard library only.

Each server in turn (one at a time) is started on the same GGUF with the same threads and
--parallel, warmed up, and given the same workload: CONVERSATIONS concurrent conversations of
TURNS turns through POST /v1/chat/completions (streamed, usage included, greedy, exactly
REPLY_TOKENS tokens a reply). A user message is ~USER_TOKENS tokens of seeded English text; the
messages grow by the assistant's actual reply each turn, as a chat app sends them. Then the
server is stopped.

Per turn it records the time to the first content chunk (TTFT), the prompt's tokens, the cached
ones (usage.prompt_tokens_details.cached_tokens on both servers; llama-server's timings.cache_n
and timings.prompt_n are recorded too), so evaluated = prompt_tokens - cached_tokens, and the
conversation's previous context (the previous prompt + its reply), so new = prompt_tokens -
previous context. It prints per turn index the means of TTFT, evaluated and new tokens; overall
the mean TTFT from turn 2 on and the aggregate generated tokens/s (all completion tokens / wall
time of the whole workload); with both servers the ratios pocket/llama-server (issue 45's
acceptance: TTFT <= 0.7x, tokens/s >= 1.3x).

On a machine shared with other work the two servers, run one after the other, may not see the
same load: --rounds N runs them alternately N times and takes the medians, and each run reports
the CPU that other processes used meanwhile (from /proc: the machine's busy time less the
server's and this script's), in cores.

Replies are random text on a synthetic model, and the previous reply comes back as text: its
tokenization can differ from the tokens sampled (e.g. two sampled "õ" re-tokenize as one "õõ"),
so even a perfect cache must evaluate the reply from the first such difference on. --token-check
measures that: it asks for logprobs (the sampled tokens' bytes), re-tokenizes each reply with the
server's /tokenize after the workload, and reports `differ` = prompt_tokens - (previous prompt +
the reply's tokens up to the first difference): the tokens that differ from the previous context.
Logprobs cost llama-server a sort of the vocabulary per token, so timings of a --token-check run
are not the benchmark's.

Both servers get "ignore_eos": true and logit_bias -100 on the GGUF's control and user-defined
tokens (<|im_end|>, <think>, </think>, ...) and on the tokens that are not UTF-8 alone (parts of a
character: 611 of the Qwen3 vocabulary fitted to 65536), so each reply is exactly REPLY_TOKENS
tokens of valid UTF-8 plain text that the chat template renders back as it was (llama-server's
chat endpoint fails a reply of malformed UTF-8 with a 500).

Examples:
  scripts/multiturn-bench.py --llama-server /tmp/llamacpp/build/bin/llama-server
  scripts/multiturn-bench.py --llama-server /tmp/llamacpp/build/bin/llama-server \\
      --conversations 2 --turns 2 --json
  scripts/multiturn-bench.py --no-llama --token-check
"""
import argparse
import http.client
import json
import os
import random
import shlex
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOKENIZER = os.path.join(ROOT, "cache/tokenizer-qwen3/package/models/tokenizer.json")

WORDS = """the a of to and in is it that for on with as was at by be this from or have an are not
but what all were when we there can your which their said if will each about how up out them then
she many some so these would other into has more her two like him see time could no make than
first been its who now people my made over did down only way find use may water long little very
after words called just where most know get through back much before go good new write our used
me man too any day same right look think also around another came come work three word must
because does part even place well such here take why things help put years different away again
off went old number great tell men say small every found still between name should home big give
air line set own under read last never us left end along while might next sound below saw
something thought both few those always looked show large often together asked house world going
want school important until form food keep children feet land side without boy once animals life
enough took sometimes four head above kind began almost live page got earth need far hand high
year mother light parts country father let night following picture being study second eyes soon
times story boys since white days ever paper hard near sentence better best across during today
others however sure means knew try told young miles sun ways thing whole hear example heard several
change answer room sea against top turned learn point city play toward five using himself usually
money seen car morning river garden window market bread letter music winter summer travel friend
village doctor teacher kitchen mountain forest island library museum bridge train station""".split()


# --- GGUF: the vocabulary (token strings and types), enough to find special tokens -----------

def gguf_vocab(path):
    """Returns (tokens, token_types) of a GGUF's tokenizer.ggml.* arrays."""
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q",
              12: "d"}
    with open(path, "rb") as f:
        def rd(fmt):
            n = struct.calcsize("<" + fmt)
            return struct.unpack("<" + fmt, f.read(n))[0]

        def rstr():
            return f.read(rd("Q")).decode("utf-8", "replace")

        def value(t):
            if t in scalar:
                return rd(scalar[t])
            if t == 8:
                return rstr()
            if t == 9:
                et, n = rd("I"), rd("Q")
                if et in scalar:
                    fmt = scalar[et]
                    return list(struct.unpack(f"<{n}{fmt}", f.read(struct.calcsize(fmt) * n)))
                return [value(et) for _ in range(n)]
            raise ValueError(f"{path}: GGUF value type {t}")

        if f.read(4) != b"GGUF":
            raise SystemExit(f"{path}: not a GGUF file")
        rd("I")
        rd("Q")
        out = {}
        for _ in range(rd("Q")):
            key = rstr()
            out[key] = value(rd("I"))
    tokens = out.get("tokenizer.ggml.tokens")
    if not tokens:
        raise SystemExit(f"{path}: no tokenizer.ggml.tokens (llama-server needs a tokenizer)")
    return tokens, out.get("tokenizer.ggml.token_type") or [1] * len(tokens)


def byte_decoder():
    """GPT-2 byte-level BPE: the unicode character of each byte, inverted."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Vocab:
    def __init__(self, path):
        tokens, types = gguf_vocab(path)
        # Control (3) and user-defined (4) tokens: <|im_end|>, <|endoftext|>, <think>, ...
        self.special = [i for i, t in enumerate(types) if t in (3, 4)]
        dec = byte_decoder()
        self.id_of_bytes = {}
        for i, (s, t) in enumerate(zip(tokens, types)):
            if t == 1:
                try:
                    b = bytes(dec[c] for c in s)
                except KeyError:
                    continue
                self.id_of_bytes.setdefault(b, i)
        # Tokens that are not UTF-8 alone (parts of a character). Banned: a random model strings
        # them into invalid UTF-8, which llama-server's chat endpoint (34af94cd) answers with a
        # 500 ("The model produced output that does not match the expected ... format": its
        # output parser, --jinja or not, refuses malformed UTF-8).
        self.partial = []
        for b, i in self.id_of_bytes.items():
            try:
                b.decode("utf-8")
            except UnicodeDecodeError:
                self.partial.append(i)
        self.banned = sorted(set(self.special) | set(self.partial))


# --- workload text ---------------------------------------------------------------------------

def user_message(seed, conv, turn, n_tokens):
    """~n_tokens of seeded English: sentences of common words (about one token each)."""
    rng = random.Random(seed * 1000003 + conv * 1009 + turn)
    words, est = [], 0
    while est < n_tokens - 1:
        k = rng.randint(7, 14)
        sent = [rng.choice(WORDS) for _ in range(k)]
        sent[0] = sent[0].capitalize()
        take = min(k, n_tokens - 1 - est)
        sent = sent[:max(take, 1)]
        words.append(" ".join(sent) + ".")
        est += len(sent) + 1
    return " ".join(words)


# --- servers ---------------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class Server:
    def __init__(self, name, argv, port, logdir):
        self.name, self.port, self.host = name, port, "127.0.0.1"
        self.log_path = os.path.join(logdir, f"{name}.log")
        self.log_file = open(self.log_path, "w")
        log(f"[{name}] {' '.join(shlex.quote(a) for a in argv)}")
        self.p = subprocess.Popen(argv, stdout=self.log_file, stderr=subprocess.STDOUT)
        self.model = None

    def wait_ready(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise SystemExit(f"[{self.name}] exited {self.p.returncode}: see {self.log_path}")
            try:
                status, body = request(self, "GET", "/health", timeout=5)
                if status == 200:
                    status, body = request(self, "GET", "/v1/models", timeout=5)
                    if status == 200:
                        self.model = json.loads(body)["data"][0]["id"]
                        return
            except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError):
                pass
            time.sleep(0.5)
        raise SystemExit(f"[{self.name}] not ready in {timeout} s: see {self.log_path}")

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log_file.close()


def request(server, method, path, body=None, timeout=600):
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def chat_stream(server, body, timeout=600):
    """Streams one chat completion. Returns a dict: ttft (s, to the first chunk with text), total
    (s), text, reasoning, usage, timings (llama-server), token_bytes (with logprobs)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        data = r.read()
        conn.close()
        raise RuntimeError(f"[{server.name}] HTTP {r.status}: {data[:500]!r}")
    out = {"ttft": None, "text": [], "reasoning": [], "usage": None, "timings": None,
           "token_bytes": [], "finish_reason": None}
    buf = b""
    done = False
    while not done:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            event = event.strip()
            if not event.startswith(b"data:"):
                continue
            payload = event[5:].strip()
            if payload == b"[DONE]":
                done = True
                break
            j = json.loads(payload)
            if "error" in j:
                raise RuntimeError(f"[{server.name}] stream error: {j['error']}")
            if j.get("usage"):
                out["usage"] = j["usage"]
            if j.get("timings"):
                out["timings"] = j["timings"]
            for c in j.get("choices") or []:
                d = c.get("delta") or {}
                text, reasoning = d.get("content") or "", d.get("reasoning_content") or ""
                if (text or reasoning) and out["ttft"] is None:
                    out["ttft"] = time.perf_counter() - t0
                out["text"].append(text)
                out["reasoning"].append(reasoning)
                if c.get("finish_reason"):
                    out["finish_reason"] = c["finish_reason"]
                lp = c.get("logprobs") or {}
                for t in lp.get("content") or []:
                    out["token_bytes"].append(bytes(t.get("bytes") or t["token"].encode()))
    out["total"] = time.perf_counter() - t0
    conn.close()
    out["text"] = "".join(out["text"])
    out["reasoning"] = "".join(out["reasoning"])
    if out["usage"] is None:
        raise RuntimeError(f"[{server.name}] no usage in the stream")
    return out


def tokenize(server, text):
    status, body = request(server, "POST", "/tokenize",
                           {"content": text, "add_special": False, "parse_special": False})
    if status != 200:
        raise RuntimeError(f"[{server.name}] /tokenize: HTTP {status}: {body[:300]!r}")
    return [t if isinstance(t, int) else t["id"] for t in json.loads(body)["tokens"]]


# --- the workload ----------------------------------------------------------------------------

def run_workload(server, args, vocab):
    bias = {str(i): -100 for i in vocab.banned}
    base = {"model": server.model, "stream": True, "stream_options": {"include_usage": True},
            "temperature": 0, "max_tokens": args.reply_tokens, "ignore_eos": True,
            "logit_bias": bias}
    if args.token_check:
        # llama-server returns logprobs only for top_logprobs > 0; pocket for 0 too.
        base.update({"logprobs": True, "top_logprobs": 1 if server.kind == "llama-server" else 0})

    # Warm-up (not measured): one short chat of text unlike the workload's.
    chat_stream(server, dict(base, max_tokens=4,
                             messages=[{"role": "user", "content": "0 1 2 3 4 5 6 7 8 9"}]))

    records = [[None] * args.turns for _ in range(args.conversations)]
    errors = []
    start = threading.Barrier(args.conversations + 1)
    lock = threading.Lock()
    done_turns = [0]

    def conversation(ci):
        messages = []
        prev_ctx = None
        start.wait()
        try:
            for t in range(args.turns):
                messages.append({"role": "user",
                                 "content": user_message(args.seed, ci, t, args.user_tokens)})
                res = chat_stream(server, dict(base, messages=messages))
                u = res["usage"]
                prompt = u.get("prompt_tokens", 0)
                cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens", 0) or 0
                rec = {"conv": ci, "turn": t + 1, "ttft_s": res["ttft"], "total_s": res["total"],
                       "prompt_tokens": prompt, "cached_tokens": cached,
                       "evaluated": prompt - cached,
                       "completion_tokens": u.get("completion_tokens", 0),
                       "prev_context": prev_ctx,
                       "new_tokens": None if prev_ctx is None else prompt - prev_ctx,
                       "finish_reason": res["finish_reason"],
                       "reply": res["text"], "reasoning_chars": len(res["reasoning"])}
                if res["timings"]:
                    rec["timings_cache_n"] = res["timings"].get("cache_n")
                    rec["timings_prompt_n"] = res["timings"].get("prompt_n")
                if args.token_check:
                    rec["sampled"] = [vocab.id_of_bytes.get(b) for b in res["token_bytes"]]
                records[ci][t] = rec
                prev_ctx = prompt + rec["completion_tokens"]
                # The assistant's reply as the client got it (content; reasoning, if a server
                # split one off, is not sent back, as chat apps do).
                messages.append({"role": "assistant", "content": res["text"]})
                with lock:
                    done_turns[0] += 1
                    ttft = "-" if res["ttft"] is None else f"{res['ttft'] * 1000:.0f} ms"
                    log(f"[{server.name}] conv {ci} turn {t + 1}: ttft {ttft}, prompt {prompt} "
                        f"(cached {cached}, new "
                        f"{'-' if rec['new_tokens'] is None else rec['new_tokens']}), "
                        f"{rec['completion_tokens']} tokens in {res['total']:.2f} s "
                        f"[{done_turns[0]}/{args.conversations * args.turns}]")
        except Exception as e:  # noqa: BLE001 (reported below)
            with lock:
                errors.append(f"conv {ci}: {e}")

    threads = [threading.Thread(target=conversation, args=(ci,), daemon=True)
               for ci in range(args.conversations)]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    cpu0 = cpu_snapshot(server.p.pid)
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    cpu1 = cpu_snapshot(server.p.pid)
    if errors:
        raise SystemExit(f"[{server.name}] failed:\n  " + "\n  ".join(errors))

    # Not timed: the user messages' token counts; with --token-check, the replies re-tokenized.
    for ci, conv in enumerate(records):
        for t, rec in enumerate(conv):
            rec["user_tokens"] = len(tokenize(server, user_message(args.seed, ci, t,
                                                                   args.user_tokens)))
    if args.token_check:
        for conv in records:
            for t, rec in enumerate(conv):
                retok = tokenize(server, rec["reply"])
                sampled = rec.pop("sampled")
                lcp = 0
                while lcp < min(len(sampled), len(retok)) and sampled[lcp] == retok[lcp]:
                    lcp += 1
                rec["reply_retokenized"] = len(retok)
                rec["reply_common_prefix"] = lcp
                if len(sampled) != rec["completion_tokens"]:
                    rec["token_check_note"] = (f"{len(sampled)} logprobs for "
                                               f"{rec['completion_tokens']} tokens")
                if t > 0:
                    prev = conv[t - 1]
                    rec["differ"] = rec["prompt_tokens"] - (prev["prompt_tokens"] +
                                                            prev["reply_common_prefix"])
                    # The template's tokens between the previous reply and this turn's reply
                    # (ChatML: <|im_end|> \n <|im_start|> user \n ... <|im_end|> \n
                    # <|im_start|> assistant \n, 11 with the fitted Qwen3 vocabulary's "ass"
                    # "istant"): one count for all turns, else a reply re-tokenized differently in
                    # context than alone, and `differ` is off by the difference.
                    rec["template_tokens"] = (rec["prompt_tokens"] - prev["prompt_tokens"] -
                                              prev["reply_retokenized"] - rec["user_tokens"])
    return {"records": [r for conv in records for r in conv], "wall_s": wall,
            "cpu": cpu_account(cpu0, cpu1)}


# --- what else ran: the machine's busy CPU time less the server's and this script's ------------

def cpu_snapshot(pid):
    """(machine busy s, server process s, this process s, monotonic s), Linux /proc."""
    tck = os.sysconf("SC_CLK_TCK")
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(v[:8]) - v[3] - v[4]) / tck  # all but idle and iowait
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        server = (int(fields[11]) + int(fields[12])) / tck  # utime + stime
    except (OSError, ValueError, IndexError):
        return None
    t = os.times()
    return busy, server, t.user + t.system, time.monotonic()


def wait_idle(max_s, cores=0.15, window=3.0):
    """Waits (at most max_s) for a window in which other processes use under `cores` CPUs."""
    deadline = time.monotonic() + max_s
    while True:
        a = cpu_snapshot(os.getpid())
        time.sleep(window)
        b = cpu_snapshot(os.getpid())
        if a is None or b is None:
            return None
        busy = (b[0] - a[0]) / (b[3] - a[3])
        if busy < cores:
            return busy
        if time.monotonic() >= deadline:
            log(f"the machine is still busy ({busy:.2f} cores): going on")
            return busy
        log(f"waiting for the machine to be idle ({busy:.2f} cores busy)")


def cpu_account(a, b):
    if a is None or b is None:
        return None
    wall = b[3] - a[3]
    server, client = b[1] - a[1], b[2] - a[2]
    other = max(0.0, (b[0] - a[0]) - server - client)
    return {"wall_s": wall, "server_cpu_s": server, "client_cpu_s": client,
            "other_cpu_s": other, "other_cores": other / wall if wall > 0 else 0.0}


# --- the summary -------------------------------------------------------------------------------

def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def summarize(name, rounds, args):
    """Per turn index: the means over all conversations and rounds. Overall: per round, then the
    median over the rounds."""
    flat = [r for rd in rounds for r in rd["records"]]
    per_turn = []
    for t in range(1, args.turns + 1):
        rs = [r for r in flat if r["turn"] == t]
        row = {"turn": t,
               "ttft_ms": mean([None if r["ttft_s"] is None else r["ttft_s"] * 1000 for r in rs]),
               "prompt_tokens": mean([r["prompt_tokens"] for r in rs]),
               "cached_tokens": mean([r["cached_tokens"] for r in rs]),
               "evaluated": mean([r["evaluated"] for r in rs]),
               "new_tokens": mean([r["new_tokens"] for r in rs])}
        if args.token_check:
            row["differ"] = mean([r.get("differ") for r in rs])
            row["reply_common_prefix"] = mean([r["reply_common_prefix"] for r in rs])
        per_turn.append(row)
    per_round = []
    for rd in rounds:
        recs = rd["records"]
        later = [r for r in recs if r["turn"] >= 2]
        completion = sum(r["completion_tokens"] for r in recs)
        x = {"wall_s": rd["wall_s"], "completion_tokens": completion,
             "gen_tokens_per_s": completion / rd["wall_s"],
             "ttft_ms_turn1": mean([None if r["ttft_s"] is None else r["ttft_s"] * 1000
                                    for r in recs if r["turn"] == 1]),
             "ttft_ms_turn2on": mean([None if r["ttft_s"] is None else r["ttft_s"] * 1000
                                      for r in later]),
             "evaluated_turn2on": sum(r["evaluated"] for r in later),
             "new_tokens_turn2on": sum(r["new_tokens"] for r in later),
             "cpu": rd["cpu"]}
        if args.token_check:
            x["differ_turn2on"] = sum(r["differ"] for r in later)
        per_round.append(x)

    def med(key):
        vals = [x[key] for x in per_round if x[key] is not None]
        return statistics.median(vals) if vals else None

    later_ttft = [r["ttft_s"] * 1000 for r in flat if r["turn"] >= 2 and r["ttft_s"] is not None]
    out = {"server": name,
           "rounds": len(rounds),
           "gen_tokens_per_s": med("gen_tokens_per_s"),
           "ttft_ms_turn2on": med("ttft_ms_turn2on"),
           "ttft_ms_turn2on_p50": statistics.median(later_ttft) if later_ttft else None,
           "ttft_ms_turn1": med("ttft_ms_turn1"),
           "evaluated_turn2on": med("evaluated_turn2on"),
           "new_tokens_turn2on": med("new_tokens_turn2on"),
           "user_message_tokens": mean([r["user_tokens"] for r in flat]),
           "replies_not_reply_tokens": sum(1 for r in flat
                                           if r["completion_tokens"] != args.reply_tokens),
           "replies_with_reasoning": sum(1 for r in flat if r["reasoning_chars"]),
           "per_turn": per_turn,
           "per_round": per_round,
           "records": flat}
    if args.token_check:
        out["differ_turn2on"] = med("differ_turn2on")
        out["template_tokens_seen"] = sorted({r["template_tokens"] for r in flat
                                              if r["turn"] >= 2})
    return out


def print_table(s, args, out):
    p = lambda *a: print(*a, file=out)  # noqa: E731
    fmt = lambda v, w, d=0: f"{'-':>{w}}" if v is None else f"{v:>{w}.{d}f}"  # noqa: E731
    rounds = f", medians of {s['rounds']} rounds" if s["rounds"] > 1 else ""
    p(f"\n== {s['server']} ==")
    hdr = f"{'turn':>4} {'ttft ms':>9} {'prompt':>7} {'cached':>7} {'evaluated':>9} {'new':>6}"
    if args.token_check:
        hdr += f" {'differ':>7} {'reply prefix kept':>17}"
    p(hdr)
    for row in s["per_turn"]:
        line = (f"{row['turn']:>4} {fmt(row['ttft_ms'], 9)} {fmt(row['prompt_tokens'], 7, 1)} "
                f"{fmt(row['cached_tokens'], 7, 1)} {fmt(row['evaluated'], 9, 1)} "
                f"{fmt(row['new_tokens'], 6, 1)}")
        if args.token_check:
            line += f" {fmt(row['differ'], 7, 1)} {fmt(row['reply_common_prefix'], 17, 1)}"
        p(line)
    if s["ttft_ms_turn2on"] is not None:
        p(f"mean TTFT from turn 2 on: {s['ttft_ms_turn2on']:.0f} ms (p50 "
          f"{s['ttft_ms_turn2on_p50']:.0f} ms; turn 1: {s['ttft_ms_turn1']:.0f} ms{rounds})")
    else:
        p(f"mean TTFT of turn 1: {s['ttft_ms_turn1']:.0f} ms{rounds}")
    p(f"aggregate generated tokens/s: {s['gen_tokens_per_s']:.2f}{rounds} (per round: "
      + ", ".join(f"{x['completion_tokens']} tokens in {x['wall_s']:.1f} s"
                  for x in s["per_round"]) + ")")
    extra = (f", differing from the previous context {s['differ_turn2on']:.0f}"
             if args.token_check else "")
    p(f"prompt tokens evaluated from turn 2 on: {s['evaluated_turn2on']:.0f} "
      f"(new since the previous context {s['new_tokens_turn2on']:.0f}{extra})")
    p(f"user message tokens: mean {s['user_message_tokens']:.1f}")
    if args.token_check:
        p(f"template tokens between turns (one count: `differ` is exact): "
          f"{s['template_tokens_seen']}")
    cpus = [x["cpu"] for x in s["per_round"] if x["cpu"]]
    if cpus:
        p("other processes' CPU during the workload: "
          + ", ".join(f"{c['other_cores']:.2f} cores" for c in cpus)
          + f" (of {os.cpu_count()}; the server used "
          + ", ".join(f"{c['server_cpu_s'] / c['wall_s']:.2f}" for c in cpus) + ")")
    if s["replies_not_reply_tokens"]:
        p(f"WARNING: {s['replies_not_reply_tokens']} replies of another length than "
          f"{args.reply_tokens} tokens")
    if s["replies_with_reasoning"]:
        p(f"WARNING: {s['replies_with_reasoning']} replies had reasoning_content (not sent back)")


# --- main --------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--pocket", default=os.path.join(ROOT, "build/bin/pocket"))
    ap.add_argument("--llama-server", default=os.environ.get("LLAMA_SERVER"),
                    help="llama.cpp's llama-server (default: $LLAMA_SERVER; absent: pocket only)")
    ap.add_argument("--no-pocket", action="store_true", help="llama-server only")
    ap.add_argument("--no-llama", action="store_true", help="pocket only")
    ap.add_argument("--model", default="/tmp/pocket-0.3b-q4_0-qwen3.gguf",
                    help="the GGUF (made with pocket make-model --preset pocket-0.3b --type q4_0 "
                         "and the Qwen3 tokenizer if missing)")
    ap.add_argument("--tokenizer", default=TOKENIZER, help="for making the model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--user-tokens", type=int, default=60)
    ap.add_argument("--reply-tokens", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=2048,
                    help="context per slot (pocket serve -c; llama-server gets -c PARALLEL*CTX, "
                         "which it divides among its slots)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the servers alternately this many times (pocket, llama-server, "
                         "pocket, ...); overall figures are the medians of the rounds")
    ap.add_argument("--wait-idle", type=float, default=0, metavar="S",
                    help="before each server's run, wait up to S seconds for a few seconds in "
                         "which other processes use under 0.15 cores")
    ap.add_argument("--token-check", action="store_true",
                    help="with logprobs: the tokens that differ from the previous context")
    ap.add_argument("--pocket-args", default="",
                    help="more arguments for pocket serve (one string: --pocket-args='...')")
    ap.add_argument("--llama-args", default="",
                    help="more arguments for llama-server (one string: --llama-args='...')")
    ap.add_argument("--startup-timeout", type=float, default=300)
    ap.add_argument("--keep-logs", action="store_true", help="keep the servers' logs")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    ap.add_argument("--json-out", metavar="FILE", help="also write the JSON object to FILE")
    args = ap.parse_args()

    need = args.turns * (int(args.user_tokens * 1.5) + args.reply_tokens + 16) + 64
    if need > args.ctx:
        raise SystemExit(f"--ctx {args.ctx} may not hold a conversation (~{need} tokens)")
    if not os.path.exists(args.model):
        cmd = [args.pocket, "make-model", "--preset", "pocket-0.3b", "--type", "q4_0",
               "--tokenizer", args.tokenizer, "-o", args.model]
        log("making the model: " + " ".join(cmd))
        subprocess.run(cmd, check=True, stdout=sys.stderr)
    vocab = Vocab(args.model)

    runs = []
    if not args.no_pocket:
        runs.append(("pocket", lambda port: [
            args.pocket, "serve", "-m", args.model, "-t", str(args.threads),
            "--parallel", str(args.parallel), "-c", str(args.ctx), "--port", str(port),
            *shlex.split(args.pocket_args)]))
    if not args.no_llama:
        if args.llama_server and os.path.exists(args.llama_server):
            # llama.cpp 34af94cd: --jinja (the GGUF's Qwen3 template), the prompt cache
            # (--cache-prompt, on by default) and the RAM cache of idle slots' prompts
            # (--cache-ram, 8192 MiB by default), written out to be sure. -c is the total:
            # with -np and no --kv-unified each slot gets -c / -np.
            runs.append(("llama-server", lambda port: [
                args.llama_server, "-m", args.model, "-t", str(args.threads),
                "-np", str(args.parallel), "-c", str(args.parallel * args.ctx),
                "--port", str(port), "--host", "127.0.0.1", "--jinja", "--cache-prompt",
                "--cache-ram", "8192", "--no-webui", *shlex.split(args.llama_args)]))
        else:
            log(f"llama-server not found ({args.llama_server}): pocket only")
    if not runs:
        raise SystemExit("nothing to run")

    logdir = tempfile.mkdtemp(prefix="multiturn-bench-")
    rounds = {name: [] for name, _ in runs}
    for r in range(args.rounds):
        for name, argv in runs:
            if args.wait_idle > 0:
                wait_idle(args.wait_idle)
            port = free_port()
            server = Server(f"{name}" if args.rounds == 1 else f"{name}.{r + 1}", argv(port),
                            port, logdir)
            server.kind = name
            try:
                server.wait_ready(args.startup_timeout)
                log(f"[{server.name}] ready on port {port} (model {server.model!r})")
                rd = run_workload(server, args, vocab)
                for rec in rd["records"]:
                    rec["round"] = r + 1
                rounds[name].append(rd)
            finally:
                server.stop()
    if not args.keep_logs:
        for f in os.listdir(logdir):
            os.remove(os.path.join(logdir, f))
        os.rmdir(logdir)
    else:
        log(f"logs in {logdir}")
    results = {name: summarize(name, rds, args) for name, rds in rounds.items()}

    ratios = None
    if "pocket" in results and "llama-server" in results:
        p, l = results["pocket"], results["llama-server"]

        def ratio(key):
            return p[key] / l[key] if p[key] and l[key] else None

        ratios = {"ttft_turn2on": ratio("ttft_ms_turn2on"),
                  "gen_tokens_per_s": ratio("gen_tokens_per_s"),
                  "evaluated_turn2on": ratio("evaluated_turn2on"),
                  # Each round's pocket against the llama-server run right after it.
                  "per_round": [{"ttft_turn2on": (a["ttft_ms_turn2on"] / b["ttft_ms_turn2on"]
                                                  if a["ttft_ms_turn2on"] and b["ttft_ms_turn2on"]
                                                  else None),
                                 "gen_tokens_per_s": a["gen_tokens_per_s"] / b["gen_tokens_per_s"]}
                                for a, b in zip(p["per_round"], l["per_round"])]}
        ratios["pass_ttft"] = (ratios["ttft_turn2on"] <= 0.7
                               if ratios["ttft_turn2on"] is not None else None)
        ratios["pass_tokens_per_s"] = ratios["gen_tokens_per_s"] >= 1.3
    config = {k: getattr(args, k) for k in ("model", "threads", "parallel", "conversations",
                                            "turns", "user_tokens", "reply_tokens", "ctx",
                                            "seed", "rounds", "wait_idle", "token_check",
                                            "pocket_args", "llama_args")}
    config["banned_tokens"] = len(vocab.banned)
    report = {"config": config, "servers": results, "ratios": ratios}
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)
    if args.json:
        print(json.dumps(report, indent=1))
        return
    print(f"multi-turn: {args.conversations} conversations x {args.turns} turns, "
          f"~{args.user_tokens}-token user messages, {args.reply_tokens}-token replies, "
          f"greedy, -t {args.threads}, --parallel {args.parallel}, {args.model}")
    for s in results.values():
        print_table(s, args, sys.stdout)
    if ratios:
        print("\n== pocket / llama-server (same run) ==")
        if ratios["ttft_turn2on"] is not None:
            print(f"mean TTFT from turn 2 on: {ratios['ttft_turn2on']:.2f}x "
                  f"(target <= 0.7x: {'pass' if ratios['pass_ttft'] else 'FAIL'})")
        print(f"aggregate generated tokens/s: {ratios['gen_tokens_per_s']:.2f}x "
              f"(target >= 1.3x: {'pass' if ratios['pass_tokens_per_s'] else 'FAIL'})")
        if ratios["evaluated_turn2on"] is not None:
            print(f"prompt tokens evaluated from turn 2 on: {ratios['evaluated_turn2on']:.2f}x")
        if len(ratios["per_round"]) > 1:
            print("per round (TTFT, tokens/s): " + ", ".join(
                f"{'-' if x['ttft_turn2on'] is None else format(x['ttft_turn2on'], '.2f')}x "
                f"{x['gen_tokens_per_s']:.2f}x" for x in ratios["per_round"]))


if __name__ == "__main__":
    main()
