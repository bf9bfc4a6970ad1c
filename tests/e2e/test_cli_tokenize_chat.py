"""pocket tokenize (JSON Lines in, ids out; llama.cpp's Qwen2 vectors through the CLI), pocket info
on a model with the real Qwen3 tokenizer, on a saved session, a tokenizer.json and an adapter's
config, pocket chat keeping the KV cache between turns, and pocket chat --session resuming a
conversation across runs (also with a smaller context, which drops the oldest turns)."""
import json
import os
import shutil
import re
import struct
import subprocess
import unittest

from harness import (POCKET, QWEN3_TOKENIZER, SHARED, main_unittest, make_model, pocket, require)


def read_session(path):
    """A session file's header and pocket chat's messages, read by the layout of docs/format.md
    ("Session files"), not by pocket."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"POCKETSS", path
    _, header_bytes = struct.unpack_from("<II", data, 8)
    header = json.loads(data[16:16 + header_bytes])
    at = 16 + header_bytes + 4 * header["n_tokens"]
    if header["has_logits"]:
        at += 4 * header["vocab_size"]
    user = json.loads(data[at:at + header["user_data_bytes"]])
    return header, user["messages"]


class TokenizeAndChat(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")

    def test_tokenize_llama_cpp_vectors(self):
        base = os.path.join(SHARED, "testdata", "tokenizer", "ggml-vocab-qwen2.gguf")
        with open(base + ".inp", encoding="utf-8", newline="") as f:
            cases = f.read().split("\n__ggml_vocab_test__\n")[:-1]
        with open(base + ".out", encoding="utf-8") as f:
            expected = [[int(x) for x in line.split()] for line in f.read().split("\n")[:len(cases)]]
        stdin = "".join(json.dumps({"text": c}) + "\n" for c in cases)
        out = pocket("tokenize", "-m", QWEN3_TOKENIZER, input=stdin)
        got = [json.loads(line)["ids"] for line in out.stdout.splitlines()]
        self.assertEqual(len(got), len(cases))
        for text, want, ids in zip(cases, expected, got):
            self.assertEqual(ids, want, repr(text))

    def test_special_tokens_recognised_unless_disabled(self):
        stdin = json.dumps({"text": "<|im_start|>user"}) + "\n"
        ids = json.loads(pocket("tokenize", "-m", QWEN3_TOKENIZER, input=stdin).stdout)["ids"]
        self.assertEqual(ids[0], 151644)
        ids = json.loads(pocket("tokenize", "-m", QWEN3_TOKENIZER, "--no-parse-special",
                                input=stdin).stdout)["ids"]
        self.assertNotIn(151644, ids)

    def test_model_with_real_tokenizer(self):
        model = make_model("chat-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        info = json.loads(pocket("info", model, "--json").stdout)
        self.assertEqual(info["tokenizer_vocab"], 1024)
        self.assertEqual(info["chat_template"], "qwen3")
        # The fitted vocabulary places the 26 added tokens at the end.
        out = pocket("tokenize", "-m", model, input=json.dumps({"text": "<|im_end|>"}) + "\n")
        self.assertEqual(json.loads(out.stdout)["ids"], [1024 - 26 + 2])

    def test_chat_keeps_the_kv_cache_between_turns(self):
        model = make_model("chat-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        p = subprocess.run([POCKET, "chat", "-m", model, "-n", "6", "--temp", "0", "-v"],
                           input="hello there\nand a second question\n/exit\n", capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        reused = [int(x) for x in re.findall(r"\((\d+) reused\)", p.stderr)]
        self.assertEqual(len(reused), 2, p.stderr)
        self.assertEqual(reused[0], 0)
        # Turn 2 re-evaluates only what changed after the first turn's prompt.
        self.assertGreater(reused[1], 8, p.stderr)

    def test_chat_session_resumes_across_runs(self):
        """Two turns in one run, and the same two turns in two runs with --session: the second
        reply is the same, the resumed run evaluates only the new turn (the saved keys and values
        are reused), and a damaged session file is an error naming it."""
        model = make_model("chat-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        args = [POCKET, "chat", "-m", model, "-n", "6", "--temp", "0", "-v", "--system", "Be brief."]
        whole = subprocess.run(args, input="hello there\nand a second question\n/exit\n",
                               capture_output=True, text=True, timeout=300)
        self.assertEqual(whole.returncode, 0, whole.stderr)
        path = os.path.join(os.environ.get("POCKET_WORK_DIR", "/tmp"), "chat-resume.session")
        if os.path.exists(path):
            os.remove(path)
        first = subprocess.run(args + ["--session", path], input="hello there\n/exit\n",
                               capture_output=True, text=True, timeout=300)
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertTrue(os.path.exists(path))
        second = subprocess.run(args + ["--session", path], input="and a second question\n/exit\n",
                                capture_output=True, text=True, timeout=300)
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertIn("resumed", second.stderr)
        # The replies of the two runs, one after the other, are those of the one run.
        # Exact by design: the saved KV loads bit for bit, and the same segments are evaluated.
        self.assertEqual(first.stdout + second.stdout, whole.stdout)
        reused_whole = [int(x) for x in re.findall(r"\((\d+) reused\)", whole.stderr)]
        reused_resumed = [int(x) for x in re.findall(r"\((\d+) reused\)", second.stderr)]
        self.assertEqual(reused_resumed, reused_whole[1:], second.stderr)
        self.assertGreater(reused_resumed[0], 8)
        with open(path, "r+b") as f:
            f.seek(-10, os.SEEK_END)
            f.write(b"\x00\x01")
        bad = subprocess.run(args + ["--session", path], input="/exit\n", capture_output=True,
                             text=True, timeout=300)
        self.assertEqual(bad.returncode, 1)
        self.assertIn(path, bad.stderr)
        self.assertIn("checksum", bad.stderr)

    def test_chat_session_file_must_be_writable_and_system_is_not_silently_ignored(self):
        """Issue 44: an unwritable --session chatted and printed an error after every reply, then
        exited 0; a --system given on resume was dropped without a word."""
        model = make_model("chat-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        args = [POCKET, "chat", "-m", model, "-n", "4", "--temp", "0"]
        p = subprocess.run(args + ["--session", "/nonexistent-dir/x.session"],
                           input="hello\n/exit\n", capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("/nonexistent-dir", p.stderr)
        self.assertEqual(p.stdout, "")  # refused before the first turn
        path = os.path.join(os.environ.get("POCKET_WORK_DIR", "/tmp"), "chat-system.session")
        if os.path.exists(path):
            os.remove(path)
        first = subprocess.run(args + ["--system", "Be brief.", "--session", path],
                               input="hello\n/exit\n", capture_output=True, text=True,
                               timeout=300)
        self.assertEqual(first.returncode, 0, first.stderr)
        same = subprocess.run(args + ["--system", "Be brief.", "--session", path],
                              input="/exit\n", capture_output=True, text=True, timeout=300)
        self.assertEqual(same.returncode, 0, same.stderr)
        self.assertNotIn("--system is not used", same.stderr)
        other = subprocess.run(args + ["--system", "Be verbose.", "--session", path],
                               input="/exit\n", capture_output=True, text=True, timeout=300)
        self.assertEqual(other.returncode, 0, other.stderr)
        self.assertIn("--system is not used", other.stderr)
        # A save that fails after a turn (its directory removed while the chat waits for the
        # first line): reported, and the exit status says so.
        own = os.path.join(os.environ.get("POCKET_WORK_DIR", "/tmp"), "chat-save-fails")
        shutil.rmtree(own, ignore_errors=True)
        os.makedirs(own)
        p = subprocess.Popen(args + ["--session", os.path.join(own, "x.session")],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.stderr.read(2), "> ")  # ready for the first line
        shutil.rmtree(own)
        out, err = p.communicate("hello\n/exit\n", timeout=300)
        self.assertEqual(p.returncode, 1, err)
        self.assertTrue(out.strip(), err)  # the reply came; only its save failed
        self.assertIn("chat-save-fails", err)

    def test_info_describes_sessions_tokenizers_and_adapter_configs(self):
        """Issue 44: pocket info on a session file, a tokenizer.json or a PEFT adapter's
        adapter_config.json said "not a model file pocket knows"."""
        model = make_model("chat-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        path = os.path.join(os.environ.get("POCKET_WORK_DIR", "/tmp"), "chat-info.session")
        if os.path.exists(path):
            os.remove(path)
        chat = subprocess.run([POCKET, "chat", "-m", model, "-n", "4", "--temp", "0", "--system",
                               "Be brief.", "--session", path], input="hello there\n/exit\n",
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(chat.returncode, 0, chat.stderr)
        model_info = json.loads(pocket("info", model, "--json").stdout)
        info = json.loads(pocket("info", path, "--json").stdout)
        print(info)
        self.assertEqual(info["kind"], "session")
        self.assertEqual(info["architecture"], "qwen3")
        for key in ("n_layers", "n_kv_heads", "head_dim", "vocab_size"):
            self.assertEqual(info[key], model_info[key], key)
        self.assertEqual(info["kv_type"], "f16")
        self.assertEqual(info["adapters"], "")
        self.assertGreater(info["n_tokens"], 8)
        self.assertEqual(info["chat_messages"], ["system", "user", "assistant"])
        self.assertEqual(info["file_bytes"], os.path.getsize(path))
        text = pocket("info", path).stdout
        print(text)
        self.assertIn(f"session:      {path}", text)
        self.assertIn(f"{info['n_tokens']} tokens", text)
        self.assertIn("3 messages (1 system, 1 user, 1 assistant)", text)
        # A damaged session is an error naming it.
        with open(path, "r+b") as f:
            f.seek(-10, os.SEEK_END)
            f.write(b"\x00\x01")
        bad = pocket("info", path, check=False)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("checksum", bad.stderr)

        tok = json.loads(pocket("info", QWEN3_TOKENIZER, "--json").stdout)
        print({k: v for k, v in tok.items() if k != "special_tokens"})
        self.assertEqual(tok["kind"], "tokenizer")
        self.assertEqual(tok["type"], "byte-level BPE")
        self.assertEqual(tok["vocab_size"], 151669)
        self.assertEqual(tok["n_added_tokens"], 26)
        self.assertEqual(tok["eos"], {"id": 151645, "text": "<|im_end|>"})
        self.assertIsNone(tok["bos"])
        self.assertIn({"id": 151644, "text": "<|im_start|>"}, tok["special_tokens"])
        self.assertEqual(tok["chat_template"], "qwen3")
        text = pocket("info", QWEN3_TOKENIZER).stdout
        self.assertIn("151669 tokens", text)
        self.assertIn("<|im_start|> 151644", text)
        not_tok = os.path.join(os.environ.get("POCKET_WORK_DIR", "/tmp"), "not-tokenizer.json")
        with open(not_tok, "w") as f:
            f.write('{"architectures": ["Qwen3ForCausalLM"]}\n')
        bad = pocket("info", not_tok, check=False)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("not a tokenizer.json", bad.stderr)

        adapter = os.path.join(os.environ.get("POCKET_WORK_DIR", "/tmp"), "chat-info-lora")
        if not os.path.exists(os.path.join(adapter, "adapter_config.json")):
            pocket("make-adapter", "-m", model, "--rank", "4", "-o", adapter)
        a = json.loads(pocket("info", os.path.join(adapter, "adapter_config.json"),
                              "--json").stdout)
        self.assertEqual((a["kind"], a["format"], a["max_rank"]), ("lora_adapter", "peft", 4))

    def test_chat_resumed_with_a_smaller_context_drops_old_turns(self):
        """Issue 44: resuming a --session with a -c smaller than the saved conversation was an
        error, where the docs promise that the oldest turns are dropped (never the system
        message)."""
        model = make_model("chat-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        args = [POCKET, "chat", "-m", model, "-n", "8", "--temp", "0", "--system", "Be brief."]
        path = os.path.join(os.environ.get("POCKET_WORK_DIR", "/tmp"), "chat-smaller.session")
        if os.path.exists(path):
            os.remove(path)
        first = subprocess.run(args + ["--session", path],
                               input="hello there\nhow are you today\nwhat is the time\n/exit\n",
                               capture_output=True, text=True, timeout=300)
        self.assertEqual(first.returncode, 0, first.stderr)
        header, messages = read_session(path)
        self.assertEqual(len(messages), 7)
        n_ctx = 64
        self.assertGreater(header["n_tokens"], n_ctx)
        second = subprocess.run(args + ["-c", str(n_ctx), "--session", path],
                                input="and one more\n/exit\n", capture_output=True, text=True,
                                timeout=300)
        print(second.stderr)
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertIn(f"do not fit the context of {n_ctx}", second.stderr)
        self.assertRegex(second.stderr, r"dropped the \d+ oldest messages")
        self.assertTrue(second.stdout.strip(), "no reply")
        # Saved again: what fitted, the system message first and the new turn last.
        header, messages = read_session(path)
        self.assertLessEqual(header["n_tokens"], n_ctx)
        self.assertEqual(messages[0], {"role": "system", "content": "Be brief."})
        self.assertEqual(messages[-2], {"role": "user", "content": "and one more"})
        self.assertEqual(messages[-1]["role"], "assistant")
        self.assertLess(len(messages), 9)

    def test_run_chat_rejects_models_without_a_template(self):
        model = make_model("errors-tiny.gguf")
        p = subprocess.run([POCKET, "run", "-m", model, "--tokenizer", QWEN3_TOKENIZER, "-p", "x",
                            "--chat", "-n", "2"], capture_output=True, text=True)
        # The Qwen3 tokenizer.json's directory has tokenizer_config.json with the template, but
        # its vocabulary (151669) does not fit this model's 1024 rows: a clear error.
        self.assertEqual(p.returncode, 1)
        self.assertIn("1024", p.stderr)


if __name__ == "__main__":
    main_unittest()
