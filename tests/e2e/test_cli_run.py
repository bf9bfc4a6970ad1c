"""pocket run and pocket chat as a llama.cpp user expects them (issue 11): constraints that are
never silently dropped, --choice that returns the best whole candidate, Ctrl-C that cancels
instead of killing, a chat that survives a long conversation, llama.cpp's option conventions,
uniform errors and exit codes (usage 2, runtime 1), and the seed reported for every run."""
import fcntl
import json
import os
import re
import signal
import subprocess
import time
import unittest

from harness import (POCKET, QWEN3_TOKENIZER, STORIES, STORIES_TOK, main_unittest, make_model,
                     pocket, require, work_path)

STORIES_ARGS = ["-m", STORIES, "--tokenizer", STORIES_TOK]
F_SETPIPE_SZ = 1031


def run(args, input=None, timeout=300):
    return subprocess.run([POCKET] + [str(a) for a in args], capture_output=True, text=True,
                          input=input, timeout=timeout)


def run_json(args, **kw):
    p = run(list(args) + ["--json"], **kw)
    if p.returncode != 0:
        raise AssertionError(f"exit {p.returncode}: {p.stderr[-2000:]}")
    return json.loads(p.stdout)


class Usage(unittest.TestCase):
    """Usage errors print `pocket: error: ...` and exit 2; runtime errors exit 1."""

    def usage_error(self, args, *words, input=None):
        p = run(args, input=input)
        self.assertEqual(p.returncode, 2, f"exit {p.returncode}; stderr: {p.stderr[-2000:]}")
        self.assertIn("pocket: error:", p.stderr)
        for w in words:
            self.assertIn(w, p.stderr)
        return p.stderr

    def test_unknown_command_suggests(self):
        err = self.usage_error(["runn", "-m", "x"])
        self.assertIn('unknown command "runn" (did you mean "run"?)', err)
        self.usage_error(["zzzzzz"], 'unknown command "zzzzzz"', "commands:")

    def test_parser_errors_read_like_the_others(self):
        self.usage_error(["run", *STORIES_ARGS, "-p", "x", "--temp", "abc"], "--temp")
        self.usage_error(["run", *STORIES_ARGS, "-p", "x", "--no-such-option"], "no-such-option")
        self.usage_error(["run", "-p", "x"], "--model")

    def test_runtime_errors_exit_1(self):
        p = run(["run", "-m", work_path("no-such-model.gguf"), "-p", "x"])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("pocket: error:", p.stderr)

    def test_empty_constraints_are_errors(self):
        for option in ("--choice", "--regex", "--grammar", "--json-schema"):
            for value in ("", "  "):
                self.usage_error(["run", *STORIES_ARGS, "-p", "x", option, value], option,
                                 "empty")
        empty = work_path("run-empty.gbnf")
        with open(empty, "w") as f:
            f.write("\n")
        self.usage_error(["run", *STORIES_ARGS, "-p", "x", "--grammar-file", empty], empty)

    def test_empty_candidates_are_errors(self):
        for choice in (",", "a,,b", " ,a"):
            self.usage_error(["run", *STORIES_ARGS, "-p", "x", "--choice", choice], "--choice",
                             "empty")

    def test_engine_options_are_checked_before_loading(self):
        missing = work_path("run-no-such-model.gguf")  # never opened: the options come first
        for option, value in (("-c", "0"), ("-b", "0"), ("-t", "1000"), ("--kv-type", "q9")):
            self.usage_error(["run", "-m", missing, "-p", "x", option, value], option)
            self.usage_error(["chat", "-m", missing, option, value], option, input="")

    def test_prompt_options(self):
        self.usage_error(["run", *STORIES_ARGS], "-p", "-f")
        prompt = work_path("run-prompt.txt")
        with open(prompt, "w") as f:
            f.write("Once upon a time")
        self.usage_error(["run", *STORIES_ARGS, "-p", "x", "-f", prompt], "not both")
        self.usage_error(["run", *STORIES_ARGS, "-p", "x", "--system", "be nice"], "--chat")
        self.usage_error(["run", *STORIES_ARGS, "-p", "x", "-n", "-5"], "-n")

    def test_file_given_to_the_inline_forms(self):
        schema = work_path("run-schema.json")
        with open(schema, "w") as f:
            f.write('{"type": "integer"}')
        self.usage_error(["run", *STORIES_ARGS, "-p", "x", "--json-schema", schema],
                         "--json-schema-file")

    def test_help_has_examples_and_descriptions(self):
        for command in ("run", "chat", "serve", "voice"):
            p = run([command, "--help"])
            self.assertEqual(p.returncode, 0)
            self.assertIn("Examples:", p.stdout)
            examples = p.stdout.split("Examples:")[1].strip().splitlines()
            self.assertGreaterEqual(len(examples), 2)
            self.assertLessEqual(len(examples), 3)
            # Every option line has a description after its name (and type), or on the next
            # line when the name is long.
            lines = p.stdout.split("Examples:")[0].splitlines() + [""]
            for line, after in zip(lines, lines[1:]):
                if re.match(r"^\s+(-\S+(?:,\s*-\S+)*)(\s+\S+)?\s*$", line):
                    self.assertRegex(after, r"^\s+[^\s-]", f"option without a description: {line!r}")


class Conventions(unittest.TestCase):
    """llama.cpp's conventions."""

    def test_inline_grammar_and_schema(self):
        r = run_json(["run", *STORIES_ARGS, "-p", "Yes or no?", "--grammar",
                      'root ::= " yes" | " no"', "--temp", "0"])
        self.assertIn(r["text"], (" yes", " no"))
        gbnf = work_path("run-yes-no.gbnf")
        with open(gbnf, "w") as f:
            f.write('root ::= " yes" | " no"\n')
        r2 = run_json(["run", *STORIES_ARGS, "-p", "Yes or no?", "--grammar-file", gbnf,
                       "--temp", "0"])
        # Here and for the schema below: the same constraint from a file, the same computation.
        self.assertEqual(r2["text"], r["text"])
        schema = ('{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], '
                  '"additionalProperties": false}')
        r = run_json(["run", *STORIES_ARGS, "-p", "Number:", "--json-schema", schema, "--temp",
                      "0", "-n", "64"])
        self.assertIsInstance(json.loads(r["text"])["n"], int)
        path = work_path("run-schema-n.json")
        with open(path, "w") as f:
            f.write(schema)
        r2 = run_json(["run", *STORIES_ARGS, "-p", "Number:", "--json-schema-file", path,
                       "--temp", "0", "-n", "64"])
        self.assertEqual(r2["text"], r["text"])

    def test_unsatisfiable_schema_is_an_error_before_generation(self):
        p = run(["run", *STORIES_ARGS, "-p", "x", "--json-schema",
                 '{"type": "string", "minLength": 5, "maxLength": 2}'])
        self.assertEqual(p.returncode, 1, p.stderr)
        # The compiler names the keyword (not a file that could not be opened, not a failure
        # in the middle of generation).
        self.assertIn("minLength", p.stderr)
        self.assertNotIn("open", p.stderr)
        self.assertNotIn("allows no token", p.stderr)

    def test_n_minus_one_runs_to_the_end(self):
        r = run_json(["run", *STORIES_ARGS, "-p", "Once upon a time", "-n", "-1", "--temp", "0",
                      "-c", "64"])
        self.assertIn(r["stop_reason"], ("eos", "context_full"))
        self.assertGreater(len(r["tokens"]), 0)
        if r["stop_reason"] == "context_full":
            # Every context row holds a token; the last token is sampled, never evaluated.
            self.assertEqual(r["n_prompt_tokens"] + len(r["tokens"]), 64 + 1)

    def test_repeated_option_takes_the_last(self):
        a = run_json(["run", *STORIES_ARGS, "-p", "Once", "-n", "12", "--temp", "1.5", "--temp",
                      "0", "-n", "8"])
        b = run_json(["run", *STORIES_ARGS, "-p", "Once", "-n", "8", "--temp", "0"])
        self.assertEqual(a["tokens"], b["tokens"])
        self.assertEqual(len(a["tokens"]), 8)

    def test_prompt_from_stdin(self):
        a = run_json(["run", *STORIES_ARGS, "-f", "-", "-n", "8", "--temp", "0"],
                     input="Once upon a time")
        b = run_json(["run", *STORIES_ARGS, "-p", "Once upon a time", "-n", "8", "--temp", "0"])
        self.assertEqual(a["tokens"], b["tokens"])

    def test_empty_prompt_starts_from_bos(self):
        r = run_json(["run", *STORIES_ARGS, "-p", "", "-n", "30", "--temp", "0"])
        self.assertEqual(r["n_prompt_tokens"], 1)
        self.assertGreater(len(r["text"].strip()), 10)

    def test_context_above_training_warns(self):
        p = run(["run", *STORIES_ARGS, "-p", "Once", "-n", "4", "--temp", "0", "-c", "100000"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("pocket: warning:", p.stderr)
        self.assertIn("100000", p.stderr)


class Seeds(unittest.TestCase):
    def test_seed_is_reported_and_reproduces(self):
        r = run_json(["run", *STORIES_ARGS, "-p", "Once", "-n", "16", "--temp", "1"])
        self.assertIn("seed", r)
        # 32 bits: exact in every JSON reader (jq and JavaScript read numbers as doubles).
        self.assertLess(r["seed"], 2 ** 32)
        again = run_json(["run", *STORIES_ARGS, "-p", "Once", "-n", "16", "--temp", "1",
                          "--seed", str(r["seed"])])
        self.assertEqual(again["tokens"], r["tokens"])
        self.assertEqual(again["seed"], r["seed"])
        p = run(["run", *STORIES_ARGS, "-p", "Once", "-n", "4", "--seed", "42"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("seed: 42", p.stderr)


class Choice(unittest.TestCase):
    """--choice returns the whole candidate `score` ranks first (one rule for both)."""

    CASES = [("Once upon a time, there was a", [" girl", " little dog", " boy named Tim",
                                                 " big tree"]),
             ("Lily went to the", [" park", " store to buy milk", " zoo", " pond"]),
             ("The cat", [" sat", " was happy", " ran away", " jumped"]),
             ("One day, Tom saw a", [" bird", " big red ball", " dog", " cat"])]

    def score(self, prompt, candidates):
        p = pocket("score", *STORIES_ARGS, "-p", prompt, "--candidates", ",".join(candidates),
                   "--json")
        return json.loads(p.stdout)

    def test_best_candidate_is_scores_first(self):
        differs = 0
        for prompt, candidates in self.CASES:
            ranked = self.score(prompt, candidates)["candidates"]
            best = run_json(["run", *STORIES_ARGS, "-p", prompt, "--choice", ",".join(candidates),
                             "--temp", "0"])
            self.assertEqual(best["text"], ranked[0]["text"], prompt)
            self.assertEqual(best["choice"]["index"], candidates.index(ranked[0]["text"]))
            self.assertEqual(best["tokens"], ranked[0]["tokens"])
            stream = run_json(["run", *STORIES_ARGS, "-p", prompt, "--choice",
                               ",".join(candidates), "--choice-mode", "stream", "--temp", "0"])
            self.assertIn(stream["text"], candidates)
            differs += stream["text"] != best["text"]
        print(f"token-by-token choice differs from the best candidate in {differs} of "
              f"{len(self.CASES)} cases")

    def test_a_budget_that_cuts_the_choice_is_an_error(self):
        # Every candidate is several tokens long: one token of budget cuts any of them, in both
        # modes (never a cut output).
        candidates = [" was very happy", " ran away from home"]
        for mode in ("best", "stream"):
            p = run(["run", *STORIES_ARGS, "-p", "The cat", "--choice", ",".join(candidates),
                     "--choice-mode", mode, "--temp", "0", "-n", "1"])
            self.assertEqual(p.returncode, 1, (mode, p.stderr))
            self.assertIn("budget", p.stderr)

    def test_sampling_follows_the_candidates_distribution(self):
        prompt, candidates = self.CASES[0]
        ranked = self.score(prompt, candidates)["candidates"]
        counts = {c: 0 for c in candidates}
        n = 60
        for seed in range(n):
            r = run_json(["run", *STORIES_ARGS, "-p", prompt, "--choice", ",".join(candidates),
                          "--temp", "1", "--seed", str(seed)])
            counts[r["text"]] += 1
        for c in ranked:
            self.assertLess(abs(counts[c["text"]] / n - c["probability"]), 0.25,
                            (counts, ranked))


def tiny_chat_model():
    require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
    return make_model("chat-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))


class Interrupt(unittest.TestCase):
    """Ctrl-C cancels through Session::Cancel; it does not kill."""

    def start(self, args):
        p = subprocess.Popen([POCKET] + [str(a) for a in args], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # A one-page pipe: once it is full the generation waits on the test to read (so the
        # interrupt arrives while tokens are being generated, however fast the machine).
        fcntl.fcntl(p.stdout.fileno(), F_SETPIPE_SZ, 4096)
        return p

    def test_run_prints_what_was_generated(self):
        model = tiny_chat_model()
        p = self.start(["run", "-m", model, "-p", "hello", "-n", "-1", "--temp", "0", "-t", "1"])
        first = p.stdout.read(16)  # generation has started
        time.sleep(0.5)            # and filled the pipe
        p.send_signal(signal.SIGINT)
        rest = p.stdout.read()
        err = p.stderr.read().decode()
        self.assertEqual(p.wait(timeout=60), 130, err)
        self.assertIn("stop: cancelled", err)
        self.assertGreater(len(first + rest), 16)

    def test_run_json_is_complete(self):
        model = tiny_chat_model()
        # --json streams nothing: a long prefill of a long prompt keeps it busy (cancellation is
        # checked between prefill chunks and between tokens).
        prompt = "hello " * 300
        p = subprocess.Popen([POCKET, "run", "-m", model, "-f", "-", "-n", "-1", "--temp", "0",
                              "-t", "1", "-b", "8", "--kernels", "reference", "--json"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        p.stdin.write(prompt.encode())
        p.stdin.close()
        time.sleep(1.5)
        p.send_signal(signal.SIGINT)
        out = p.stdout.read()
        err = p.stderr.read()
        self.assertEqual(p.wait(timeout=120), 130, err.decode())
        r = json.loads(out)
        self.assertEqual(r["stop_reason"], "cancelled")
        self.assertIn("seed", r)

    def test_chat_goes_on_after_ctrl_c(self):
        model = tiny_chat_model()
        p = self.start(["chat", "-m", model, "-n", "-1", "--temp", "0", "-t", "1", "-c", "2048"])
        p.stdin.write(b"hello\n")
        p.stdin.flush()
        p.stdout.read(16)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        p.stdin.write(b"/reset\n/exit\n")
        p.stdin.flush()
        p.stdout.read()
        err = p.stderr.read().decode()
        self.assertEqual(p.wait(timeout=60), 0, err)
        self.assertIn("reply stopped", err)
        self.assertIn("conversation cleared", err)

    def test_chat_ctrl_c_at_the_prompt_exits(self):
        model = tiny_chat_model()
        p = subprocess.Popen([POCKET, "chat", "-m", model], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # Wait for the prompt "> " on stderr, then interrupt.
        seen = b""
        while not seen.endswith(b"> "):
            chunk = p.stderr.read(1)
            self.assertTrue(chunk, seen)
            seen += chunk
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(timeout=60), 130)


class LongChat(unittest.TestCase):
    def test_oldest_turns_are_dropped(self):
        model = tiny_chat_model()
        turns = [f"this is message number {i} of a conversation that goes on" for i in range(8)]
        p = run(["chat", "-m", model, "-n", "8", "--temp", "0", "-c", "96", "--system",
                 "be brief", "-v"], input="\n".join(turns) + "\n/exit\n")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("oldest message", p.stderr)
        # Every turn was answered (one stats line each).
        self.assertEqual(len(re.findall(r"generated \d+ tokens", p.stderr)), len(turns), p.stderr)
        self.assertNotIn("pocket: error", p.stderr)


if __name__ == "__main__":
    main_unittest()
