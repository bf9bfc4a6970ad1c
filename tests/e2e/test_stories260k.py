"""The real tiny trained model: pocket's greedy output for stories260K is readable English and
equals the numpy reference token for token up to a near-tie, if any (and llama2.c's own
known-good output, which the reference's self-check pins), with the f16 and the f32 KV cache."""
import json
import re
import unittest

from harness import (STORIES, STORIES_TOK, assert_greedy_agrees, main_unittest, pocket, reference,
                     require)


class Stories260K(unittest.TestCase):
    def test_greedy_matches_reference(self):
        require(STORIES, "the shared test data (../shared/testdata) is missing")
        prompt = "Once upon a time"
        out = pocket("run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", prompt, "-n", 200,
                     "--temp", 0, "--json")
        ours = json.loads(out.stdout)
        ref = reference("generate", STORIES, "--tokenizer", STORIES_TOK, "--prompt", prompt,
                        "-n", 200, "--stop", 1)
        ref_ids = [int(x) for x in ref.stdout.strip().split(",") if x]
        print("pocket:", ours["text"][:300])
        print(f"{len(ours['tokens'])} tokens, stop: {ours['stop_reason']}")
        prompt_ids = json.loads(pocket("tokenize", "-m", STORIES, "--tokenizer", STORIES_TOK,
                                       "-p", prompt).stdout)["ids"]
        # The default f16 KV cache: max |logit error| against the reference measured 0.023 over
        # these 205 positions on the reference, avx2 and amx tables, while the reference's top-2
        # gap falls to 0.004 at one of them: a near-tie bound of twice the error.
        agreed = assert_greedy_agrees(self, ours["tokens"], ref_ids, STORIES, prompt_ids, 0.05)
        # The f32 cache: error 1.8e-5 (the same tables), bound 1e-3.
        ours32 = json.loads(pocket("run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", prompt,
                                   "-n", 200, "--temp", 0, "--json", "--kv-type", "f32").stdout)
        agreed32 = assert_greedy_agrees(self, ours32["tokens"], ref_ids, STORIES, prompt_ids, 1e-3)
        print(f"tokens equal to the reference's: {agreed} (f16 KV), {agreed32} (f32 KV) of "
              f"{len(ref_ids)}")
        # Readable English: mostly letters and spaces, real words, sentences.
        text = ours["text"]
        words = re.findall(r"[A-Za-z]+", text)
        self.assertGreater(len(words), 60)
        common = {"the", "was", "and", "a", "to", "she", "he", "they", "her", "day"}
        self.assertGreater(sum(w.lower() in common for w in words), 10)
        self.assertIn(".", text)

    def test_plain_run_streams_text_only(self):
        out = pocket("run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "Once upon a time",
                     "-n", 20, "--temp", 0)
        # stdout: generated text only; stats go to stderr.
        self.assertNotIn("tokens/s", out.stdout)
        self.assertIn("tokens/s", out.stderr)
        self.assertGreater(len(out.stdout.strip()), 10)

    def test_empty_prompt_starts_without_a_space(self):
        # Issue 44: from BOS alone the first piece ("\u2581Once") printed " Once"; llama2.c and
        # llama.cpp drop the space SentencePiece puts before the first word after BOS.
        for extra in ((), ("--json",)):
            out = pocket("run", "-m", STORIES, "--tokenizer", STORIES_TOK, "-p", "", "-n", 8,
                         "--temp", 0, *extra).stdout
            text = json.loads(out)["text"] if extra else out
            self.assertTrue(text.startswith("Once"), repr(text))


if __name__ == "__main__":
    main_unittest()
