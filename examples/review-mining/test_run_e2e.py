#!/usr/bin/env python3
"""run.py end to end with the real pocket CLI and the tiny real model stories260K (llama2.c,
512-token vocabulary with byte fallback, 512-token context): every answer must be JSON valid
against schema.json (and the tighter test schema), with each aspect and opinion a substring of
its review, and compact separators (pocket accepts object members in any order, so property
order is not checked). The model is far too small to
find opinions; this checks the constraint machinery, not quality.

  python3 examples/review-mining/test_run_e2e.py [--pocket build/bin/pocket]
      [--model stories260K.bin --tokenizer tok512.bin] [unittest options]

Defaults come from POCKET_BIN and POCKET_SHARED_DIR (as ctest sets them), else
build/bin/pocket and ../shared of this checkout."""
import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import schema_check  # noqa: E402

SCHEMA_PATH = os.path.join(HERE, "schema.json")
# prompt.txt is ~650 tokens in stories260K's vocabulary, more than its whole context: the tests
# use a one-line template instead (run.py --prompt).
SHORT_TEMPLATE = "Review: {review}\nOpinions:"
CONFIG = {}


def parse_args():
    shared = os.environ.get("POCKET_SHARED_DIR", os.path.join(REPO, "..", "shared"))
    stories = os.path.join(shared, "testdata", "stories260K")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pocket", default=os.environ.get("POCKET_BIN",
                                                      os.path.join(REPO, "build", "bin",
                                                                   "pocket")))
    p.add_argument("--model", default=os.path.join(stories, "stories260K.bin"))
    p.add_argument("--tokenizer", default=os.path.join(stories, "tok512.bin"))
    args, rest = p.parse_known_args()
    for path in (args.pocket, args.model, args.tokenizer):
        if not os.path.exists(path):
            raise SystemExit(f"test_run_e2e.py: missing {path}")
    return args, rest


def tight_schema(max_items, max_length):
    """schema.json with fewer items and shorter spans, so the longest possible answer fits the
    token budget and the 512-token context. Anything valid here is valid against schema.json."""
    schema = schema_check.load_schema(SCHEMA_PATH)
    s = copy.deepcopy(schema)
    s["properties"]["opinions"]["maxItems"] = max_items
    for name in ("aspect", "opinion"):
        s["properties"]["opinions"]["items"]["properties"][name]["maxLength"] = max_length
    return s


def longest_answer_chars(schema, max_chars_per_span_char=1):
    """Characters (an upper bound on tokens when each token is at least one character or
    byte) of the longest answer the schema allows, with the optional spaces."""
    items = schema["properties"]["opinions"]
    props = items["items"]["properties"]
    item = len('{"aspect": "", "opinion": "", "category": "", "polarity": ""}')
    item += 2 * props["aspect"]["maxLength"] * max_chars_per_span_char
    item += max(map(len, props["category"]["enum"])) + max(map(len, props["polarity"]["enum"]))
    return len('{"opinions": []}') + items["maxItems"] * (item + 2)


class E2E(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="review-mining-e2e-")
        self.schema = schema_check.load_schema(SCHEMA_PATH)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def run_py(self, data, schema_path, n_tokens, *flags, limit=3):
        template = self.write("prompt.txt", SHORT_TEMPLATE)
        out = os.path.join(self.tmp.name, "pred.jsonl")
        cmd = [sys.executable, os.path.join(HERE, "run.py"), os.path.join(HERE, "data", data),
               "--pocket", CONFIG["pocket"], "-m", CONFIG["model"], "--tokenizer",
               CONFIG["tokenizer"], "--schema", schema_path, "--prompt", template,
               "-n", str(n_tokens), "-t", "1", "--limit", str(limit), "--out", out, *flags]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, f"{' '.join(cmd)}\n{p.stderr}")
        with open(out, encoding="utf-8") as f:
            preds = [json.loads(line) for line in f]
        self.assertEqual(len(preds), limit, p.stderr)
        print(p.stderr, file=sys.stderr, end="")
        return preds

    def check_answer(self, pred, schemas):
        """One successful prediction: its raw text and opinions against every schema."""
        review, text = pred["review"], pred["text"]
        self.assertIsNone(pred["error"], pred["id"])
        self.assertIsInstance(text, str, pred["id"])
        what = f"{pred['id']}: {text!r}"
        answer = json.loads(text)
        self.assertEqual(answer["opinions"], pred["opinions"], what)
        for schema in schemas:
            self.assertEqual(schema_check.validate(answer, schema, span_source=review), [], what)
        self.assertEqual(schema_check.separator_errors(text.strip()), [], what)
        for o in pred["opinions"]:
            self.assertIn(o["aspect"], review, what)
            self.assertIn(o["opinion"], review, what)
        try:  # a second opinion where the jsonschema module is installed (it skips x-pocket-span)
            import jsonschema
        except ImportError:
            return
        for schema in schemas:
            jsonschema.Draft202012Validator(schema).validate(answer)

    def test_greedy_english(self):
        schema = tight_schema(max_items=2, max_length=12)
        budget = longest_answer_chars(schema) + 8
        path = self.write("schema.json", json.dumps(schema))
        for pred in self.run_py("sample.jsonl", path, budget, "--temp", "0"):
            self.check_answer(pred, [schema, self.schema])

    def test_sampled_english(self):
        # Sampling walks other paths through the constraint than greedy decoding.
        schema = tight_schema(max_items=2, max_length=12)
        budget = longest_answer_chars(schema) + 8
        path = self.write("schema.json", json.dumps(schema))
        for seed in (1, 2, 3):
            preds = self.run_py("sample.jsonl", path, budget, "--temp", "1.5",
                                f"--pocket-arg=--seed={seed}", "--pocket-arg=--top-k=0",
                                "--pocket-arg=--top-p=1", "--pocket-arg=--min-p=0")
            for pred in preds:
                self.check_answer(pred, [schema, self.schema])

    def test_chinese_spans_through_byte_fallback(self):
        # stories260K spells Chinese only with byte tokens (3 per character): the span constraint
        # must still produce whole characters copied from the review.
        schema = tight_schema(max_items=2, max_length=6)
        budget = longest_answer_chars(schema, max_chars_per_span_char=3) + 8
        path = self.write("schema.json", json.dumps(schema))
        for temp in ("0", "1.5"):
            preds = self.run_py("sample_zh.jsonl", path, budget, "--temp", temp,
                                "--pocket-arg=--seed=4")
            for pred in preds:
                self.check_answer(pred, [schema, self.schema])

    def test_real_schema(self):
        # schema.json itself (8 opinions of up to 32 characters) can outgrow the 512-token
        # context of this model: an answer is either valid or cut by the budget, said so.
        preds = self.run_py("sample.jsonl", SCHEMA_PATH, 400, "--temp", "0")
        n_ok = 0
        for pred in preds:
            if pred["error"] is None:
                self.check_answer(pred, [self.schema])
                n_ok += 1
            else:
                self.assertRegex(pred["error"], "budget|context", pred["id"])
        print(f"schema.json: {n_ok} of {len(preds)} answers complete within 400 tokens",
              file=sys.stderr)

    def test_budget_error_is_recorded(self):
        # 5 tokens cannot hold any answer: each review gets pocket's budget message.
        preds = self.run_py("sample.jsonl", SCHEMA_PATH, 5, "--temp", "0", limit=2)
        for pred in preds:
            self.assertRegex(pred["error"] or "", "budget", pred["id"])
            self.assertEqual(pred["opinions"], [])


if __name__ == "__main__":
    args, rest = parse_args()
    CONFIG.update(pocket=args.pocket, model=args.model, tokenizer=args.tokenizer)
    unittest.main(argv=[sys.argv[0], "-v", *rest])
