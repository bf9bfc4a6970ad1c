#!/usr/bin/env python3
"""Load and soak test of `pocket serve` (issue 16), with Python's standard library only.

Starts build/bin/pocket serve on MODEL, warms it up, then runs CLIENTS concurrent clients for
DURATION seconds, each looping over a mix of requests: streaming and non-streamed completions and
chats, JSON-schema-constrained chats, /v1/score, clients that disconnect mid-stream, and malformed
bodies. Every well-formed request must get a correct response (status 200, the shapes, a schema
answer that parses), every malformed one its 4xx; the server must not crash; its RSS after the run
must stay within 5% of its RSS after the warm-up. Prints time to first token (p50, p99, streaming
requests), aggregate completion tokens/s and the counts, or one JSON object with --json.

--ratio instead measures batching through HTTP: aggregate decode tokens/s of 1 and of N streaming
clients (fixed-length generations), each for DURATION seconds, and their ratio.

Examples:
  scripts/serve-load.py -m cache/models/pocket-0.3b-int4.pocket --clients 16 --duration 600
  scripts/serve-load.py -m cache/models/pocket-0.3b-int4.pocket --ratio 8 --duration 60 --json
"""
import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Server:
    def __init__(self, pocket, model, extra):
        args = [pocket, "serve", "-m", model, "--port", "0", *extra]
        self.p = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.log = []
        while True:
            line = self.p.stderr.readline()
            if not line:
                raise SystemExit(f"pocket serve exited {self.p.wait()}: {''.join(self.log)}")
            self.log.append(line)
            m = re.search(r"listening on http://([^:]+):(\d+) \(model \"([^\"]+)\"\)", line)
            if m:
                self.host, self.port, self.model = m.group(1), int(m.group(2)), m.group(3)
                break
        self.reader = threading.Thread(target=lambda: [self.log.append(l) for l in self.p.stderr],
                                       daemon=True)
        self.reader.start()

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        code = self.p.wait(timeout=120)
        self.reader.join(timeout=60)
        return code


def kv_mib(server):
    """The KV-cache bytes the server holds (/metrics pocket_kv_bytes: sessions and prefix cache),
    in MiB: memory bounded by the server's own budgets, not a leak."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    for line in text.splitlines():
        if line.startswith("pocket_kv_bytes "):
            return float(line.split()[1]) / (1 << 20)
    return 0.0


def post(server, path, body, stream=False, timeout=600):
    """Returns (status, body bytes or list of SSE events, seconds to the first content event)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    t0 = time.perf_counter()
    conn.request("POST", path, body=data, headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    if not stream or r.status != 200:
        out = r.read()
        conn.close()
        return r.status, out, None
    events, ttft, buf = [], None, b""
    while True:
        chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            if not event.startswith(b"data: "):
                continue
            payload = event[len(b"data: "):].decode()
            if payload != "[DONE]":
                j = json.loads(payload)
                c = j["choices"][0] if j.get("choices") else {}
                text = c.get("text") or (c.get("delta") or {}).get("content")
                if text and ttft is None:
                    ttft = time.perf_counter() - t0
            events.append(payload)
    conn.close()
    return r.status, events, ttft


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.ttft = []
        self.tokens = 0
        self.counts = {}
        self.failures = []

    def count(self, kind, ok, detail=""):
        with self.lock:
            self.counts.setdefault(kind, [0, 0])[0 if ok else 1] += 1
            if not ok and len(self.failures) < 20:
                self.failures.append(f"{kind}: {detail}"[:500])


def stream_text(events, chat):
    if events[-1] != "[DONE]":
        raise AssertionError("no [DONE]")
    parts, usage = [], None
    for e in events[:-1]:
        j = json.loads(e)
        if j.get("usage"):
            usage = j["usage"]
        for c in j["choices"]:
            parts.append((c.get("delta") or {}).get("content") or "" if chat else c["text"])
    return "".join(parts), usage


def one_request(server, kind, rng, stats, max_tokens):
    model = server.model
    seed = rng.randrange(1 << 30)
    prompt = f"Request {seed}: once upon a time"
    chat_msgs = [{"role": "user", "content": prompt}]
    try:
        if kind in ("stream", "chat_stream"):
            chat = kind == "chat_stream"
            body = {"model": model, "max_tokens": max_tokens, "seed": seed, "stream": True,
                    "stream_options": {"include_usage": True}}
            body.update({"messages": chat_msgs} if chat else {"prompt": prompt})
            status, events, ttft = post(server, "/v1/chat/completions" if chat
                                        else "/v1/completions", body, stream=True)
            assert status == 200, (status, events)
            text, usage = stream_text(events, chat)
            # Tokens generated: text streamed (a token of no text alone is possible, not many).
            assert not (usage["completion_tokens"] > 2 and not text), (usage, events[:3])
            with stats.lock:
                if ttft is not None:
                    stats.ttft.append(ttft)
                stats.tokens += usage["completion_tokens"]
        elif kind in ("whole", "chat_whole"):
            chat = kind == "chat_whole"
            body = {"model": model, "max_tokens": max_tokens, "seed": seed}
            body.update({"messages": chat_msgs} if chat else {"prompt": prompt})
            status, data, _ = post(server, "/v1/chat/completions" if chat
                                   else "/v1/completions", body)
            assert status == 200, (status, data[:300])
            j = json.loads(data)
            assert j["choices"][0]["finish_reason"] in ("stop", "length"), j
            with stats.lock:
                stats.tokens += j["usage"]["completion_tokens"]
        elif kind == "schema":
            body = {"model": model, "messages": chat_msgs, "max_tokens": 200, "seed": seed,
                    "response_format": {"type": "json_schema",
                                        "json_schema": {"name": "p", "schema": SCHEMA}}}
            status, data, _ = post(server, "/v1/chat/completions", body)
            assert status == 200, (status, data[:300])
            j = json.loads(data)
            answer = json.loads(j["choices"][0]["message"]["content"])
            assert set(answer) == {"name", "age"} and 0 <= answer["age"] <= 120, answer
            with stats.lock:
                stats.tokens += j["usage"]["completion_tokens"]
        elif kind == "score":
            body = {"model": model, "prompt": prompt, "candidates": [" yes", " no", " maybe"]}
            status, data, _ = post(server, "/v1/score", body)
            assert status == 200, (status, data[:300])
            probs = [r["probability"] for r in json.loads(data)["results"]]
            assert abs(sum(probs) - 1) < 1e-6, probs
        elif kind == "cancel":
            # A streaming client that leaves after its first event.
            body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 4 * max_tokens,
                               "stream": True, "ignore_eos": True}).encode()
            sock = socket.create_connection((server.host, server.port), timeout=600)
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
                         b"application/json\r\nContent-Length: " + str(len(body)).encode() +
                         b"\r\n\r\n" + body)
            got = b""
            while b"data: " not in got:
                more = sock.recv(4096)
                assert more, got
                got += more
            assert got.startswith(b"HTTP/1.1 200"), got[:100]
            sock.close()
        elif kind == "malformed":
            bad = rng.choice([b"{not json", json.dumps({"model": model, "prompt": prompt,
                                                        "max_tokens": "x"}),
                              json.dumps({"model": model, "messages": "hi"}),
                              json.dumps({"model": model, "prompt": prompt, "top_p": 7})])
            path = "/v1/chat/completions" if b"messages" in (bad if isinstance(bad, bytes)
                                                             else bad.encode()) else \
                "/v1/completions"
            status, data, _ = post(server, path, bad)
            assert status == 400, (status, data[:300])
            assert set(json.loads(data)["error"]) == {"message", "type", "param", "code"}
        stats.count(kind, True)
    except Exception as e:  # noqa: BLE001 - every failure is reported
        stats.count(kind, False, repr(e))


def soak(server, args, stats, kinds, duration, seed):
    deadline = time.time() + duration

    def client(i):
        rng = random.Random(seed * 1000 + i)
        while time.time() < deadline:
            one_request(server, rng.choice(kinds), rng, stats, args.max_tokens)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def ratio(server, args):
    """Aggregate decode tokens/s of 1 and of N streaming clients (fixed-length generations)."""
    out = {}
    for n in (1, args.ratio):
        stats = Stats()
        deadline = time.time() + args.duration

        def client(i):
            rng = random.Random(i)
            while time.time() < deadline:
                body = {"model": server.model, "prompt": f"Story {rng.randrange(1 << 30)}:",
                        "max_tokens": args.max_tokens, "ignore_eos": True, "stream": True,
                        "temperature": 0.8, "stream_options": {"include_usage": True}}
                status, events, _ = post(server, "/v1/completions", body, stream=True)
                ok = status == 200 and events[-1] == "[DONE]"
                stats.count("stream", ok, str(events[-1:]))
                if ok:
                    with stats.lock:
                        stats.tokens += stream_text(events, False)[1]["completion_tokens"]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - t0
        out[n] = {"clients": n, "tokens": stats.tokens, "seconds": round(wall, 2),
                  "tokens_per_s": round(stats.tokens / wall, 1), "counts": stats.counts,
                  "failures": stats.failures}
        print(f"serve-load: {n} streaming client(s): {stats.tokens} tokens in {wall:.1f} s = "
              f"{stats.tokens / wall:.1f} tokens/s", file=sys.stderr)
    return {"one": out[1], "many": out[args.ratio],
            "ratio": round(out[args.ratio]["tokens_per_s"] / out[1]["tokens_per_s"], 2)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--pocket", default=os.path.join(ROOT, "build", "bin", "pocket"))
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--duration", type=float, default=600, help="seconds (default 600)")
    ap.add_argument("--warmup", type=float, default=20, help="seconds of load before the RSS "
                    "reference (default 20)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=8, help="the server's --parallel")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--ratio", type=int, default=0,
                    help="measure N streaming clients against one instead of the soak")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="more arguments for pocket serve (repeatable)")
    ap.add_argument("--rss-slack-mib", type=float, default=0.0,
                    help="RSS after the run, less the growth of the KV cache it holds on purpose "
                    "(/metrics pocket_kv_bytes), may exceed RSS after the warm-up by 5%% plus "
                    "this (short runs on tiny models, whose RSS is a few MiB)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    extra = ["--parallel", str(args.parallel), "-t", str(args.threads), "--queue", "256",
             *args.server_arg]
    server = Server(args.pocket, args.model, extra)
    result = {"model": args.model, "server_args": extra}
    try:
        if args.ratio:
            result.update(ratio(server, args))
        else:
            kinds = ["stream", "stream", "chat_stream", "whole", "chat_whole", "schema", "score",
                     "cancel", "malformed"]
            try:
                post(server, "/v1/chat/completions", {"model": server.model, "max_tokens": 1,
                                                      "messages": [{"role": "user",
                                                                    "content": "hi"}]})
            except Exception:  # noqa: BLE001
                pass
            chat_ok = "chat template" not in "".join(server.log)
            if not chat_ok:
                kinds = [k for k in kinds if not k.startswith("chat") and k != "schema"]
            warm = Stats()
            soak(server, args, warm, kinds, args.warmup, seed=1)
            rss_warm = rss_kib(server.p.pid)
            kv_warm = kv_mib(server)
            print(f"serve-load: warmed up ({sum(a for a, _ in warm.counts.values())} requests), "
                  f"RSS {rss_warm / 1024:.1f} MiB; {args.clients} clients for {args.duration:.0f} s",
                  file=sys.stderr)
            stats = Stats()
            wall = soak(server, args, stats, kinds, args.duration, seed=2)
            time.sleep(1)
            rss_after = rss_kib(server.p.pid)
            kv_after = kv_mib(server)
            ttft = sorted(stats.ttft)
            result.update({
                "clients": args.clients, "seconds": round(wall, 1),
                "requests": sum(a + b for a, b in stats.counts.values()),
                "failed": sum(b for _, b in stats.counts.values()),
                "counts": {k: {"ok": a, "failed": b} for k, (a, b) in stats.counts.items()},
                "failures": stats.failures + warm.failures,
                "ttft_ms_p50": round(1000 * statistics.median(ttft), 1) if ttft else None,
                "ttft_ms_p99": round(1000 * ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))], 1)
                if ttft else None,
                "tokens_per_s": round(stats.tokens / wall, 1),
                "rss_mib_after_warmup": round(rss_warm / 1024, 1),
                "rss_mib_after_run": round(rss_after / 1024, 1),
                "rss_growth": round(rss_after / rss_warm - 1, 4),
                # The KV cache's growth (finished conversations kept in the prefix cache up to
                # --prefix-cache): held on purpose, so not counted against the RSS check.
                "kv_mib_after_warmup": round(kv_warm, 1),
                "kv_mib_after_run": round(kv_after, 1),
            })
    finally:
        code = server.stop()
    result["server_exit"] = code
    ok = code == 0 and (result.get("failed", 0) == 0 and not result.get("failures")
                        if not args.ratio else
                        not result["one"]["failures"] and not result["many"]["failures"])
    if not args.ratio:
        kv_growth = max(0.0, result["kv_mib_after_run"] - result["kv_mib_after_warmup"])
        ok = ok and (result["rss_mib_after_run"] - kv_growth <=
                     1.05 * result["rss_mib_after_warmup"] + args.rss_slack_mib)
    result["ok"] = ok
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    if not ok:
        print("serve-load: FAILED\n" + "".join(server.log[-40:]), file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
