#!/usr/bin/env python3
"""run.py against a stand-in for `pocket run` (a small script that follows the CLI contract:
--json-schema-file, --span-source, --json, errors as a nonzero exit with a message on stderr), so
the runner's own logic is tested without a model or a build: the prompt and span-source files
it writes, the command line, parsing, and that one bad review is recorded and the run goes on.
python3 examples/review-mining/test_run_fake.py"""
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

# What the stand-in does depends on a marker word in the review.
FAKE_POCKET = r'''#!PYTHON
import json, sys, time
args = sys.argv[1:]
assert args[0] == "run", args
def opt(name):
    return args[args.index(name) + 1] if name in args else None
prompt = open(opt("-f"), encoding="utf-8").read()
source = open(opt("--span-source"), encoding="utf-8").read()
schema = json.load(open(opt("--json-schema-file"), encoding="utf-8"))
with open(LOG_PATH, "a", encoding="utf-8") as log:
    log.write(json.dumps({"args": args, "prompt": prompt, "source": source}) + "\n")
def answer(text, stop="eos"):
    print(json.dumps({"text": text, "stop_reason": stop, "tokens": [1, 2]}))
    sys.exit(0)
if "BUDGET" in source:
    sys.stderr.write("pocket: error: the token budget of %s ran out before the constrained "
                     "output was complete\n" % opt("-n"))
    sys.exit(1)
if "GARBAGE" in source:
    answer("this is not json", "max_tokens")
if "OUTSIDE" in source:
    answer('{"opinions":[{"aspect":"not in the review","opinion":"","category":"price",'
           '"polarity":"neutral"}]}')
if "CRASH" in source:
    sys.exit(134)
if "NOJSON" in source:
    print("plain text, not the --json object")
    sys.exit(0)
if "SLOW" in source:
    time.sleep(60)
words = source.split()
first = words[0] if words else ""
answer(json.dumps({"opinions": [{"aspect": first, "opinion": "", "category": "overall",
                                 "polarity": "positive"}]}, ensure_ascii=False))
'''


class RunWithFakePocket(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="review-mining-test-")
        self.dir = self.tmp.name
        self.log = os.path.join(self.dir, "calls.jsonl")
        self.pocket = os.path.join(self.dir, "pocket")
        with open(self.pocket, "w") as f:
            f.write(FAKE_POCKET.replace("#!PYTHON", "#!" + sys.executable)
                    .replace("LOG_PATH", repr(self.log)))
        os.chmod(self.pocket, os.stat(self.pocket).st_mode | stat.S_IXUSR)

    def tearDown(self):
        self.tmp.cleanup()

    def run_py(self, lines, *flags, raw=None):
        data = os.path.join(self.dir, "in.jsonl")
        with open(data, "w", encoding="utf-8") as f:
            f.write(raw if raw is not None else
                    "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
        out = os.path.join(self.dir, "pred.jsonl")
        p = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), data, "-m", "model.bin",
                            "--pocket", self.pocket, "--out", out, *flags],
                           capture_output=True, text=True, timeout=120)
        preds = []
        if os.path.exists(out):
            with open(out, encoding="utf-8") as f:
                preds = [json.loads(line) for line in f]
        return p, preds

    def calls(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log, encoding="utf-8") as f:
            return [json.loads(line) for line in f]

    def test_one_review(self):
        review = 'Great "price" {review} and 物流很快\nsecond line '
        p, preds = self.run_py([{"id": 7, "review": review, "opinions": []}], "--chat",
                               "--no-think", "-n", "99", "--tokenizer", "tok.bin", "-t", "1",
                               "--pocket-arg=--seed=3")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(preds), 1)
        pr = preds[0]
        self.assertEqual(pr["id"], 7)
        self.assertEqual(pr["review"], review)
        self.assertIsNone(pr["error"])
        self.assertEqual(pr["opinions"], [{"aspect": "Great", "opinion": "", "category": "overall",
                                           "polarity": "positive"}])
        self.assertEqual(pr["stop_reason"], "eos")
        self.assertIsInstance(pr["seconds"], float)
        (call,) = self.calls()
        self.assertEqual(call["source"], review)  # byte for byte, no newline added
        with open(os.path.join(HERE, "prompt.txt"), encoding="utf-8") as f:
            self.assertEqual(call["prompt"], f.read().replace("{review}", review))
        args = call["args"]
        for flag in ("--json", "--chat", "--no-think", "--seed=3"):
            self.assertIn(flag, args)
        for flag, value in (("-m", "model.bin"), ("-n", "99"), ("--temp", "0.0"),
                            ("--tokenizer", "tok.bin"), ("-t", "1"),
                            ("--json-schema-file", os.path.join(HERE, "schema.json"))):
            self.assertEqual(args[args.index(flag) + 1], value, flag)
        self.assertIn("1 reviews, 0 errors", p.stderr)

    def test_bad_reviews_are_recorded_and_the_run_goes_on(self):
        lines = [{"id": "ok1", "review": "Nice mug"},
                 {"id": "budget", "review": "BUDGET review"},
                 {"id": "garbage", "review": "GARBAGE review"},
                 {"id": "outside", "review": "OUTSIDE review"},
                 {"id": "crash", "review": "CRASH review"},
                 {"id": "nojson", "review": "NOJSON review"},
                 {"id": "noreview", "text": "no review field"},
                 {"id": "ok2", "review": "Cheap price"}]
        raw = "".join(json.dumps(x) + "\n" for x in lines[:3]) + "{not json\n\n" + \
            "".join(json.dumps(x) + "\n" for x in lines[3:])
        p, preds = self.run_py(None, "-n", "5", raw=raw)
        self.assertEqual(p.returncode, 0, p.stderr)
        by_id = {x["id"]: x for x in preds}
        self.assertEqual(len(preds), 9)
        self.assertEqual([x["id"] for x in preds],
                         ["ok1", "budget", "garbage", "line-4", "outside", "crash", "nojson",
                          "noreview", "ok2"])
        self.assertIsNone(by_id["ok1"]["error"])
        self.assertIsNone(by_id["ok2"]["error"])
        self.assertEqual(by_id["ok2"]["opinions"][0]["aspect"], "Cheap")
        expect = {"budget": "token budget of 5 ran out", "garbage": "not JSON",
                  "line-4": "line 4 is not JSON", "outside": "not a substring",
                  "crash": "status 134", "nojson": "--json output",
                  "noreview": "no \"review\""}
        for rid, message in expect.items():
            self.assertIn(message, by_id[rid]["error"] or "", rid)
            self.assertEqual(by_id[rid]["opinions"], [], rid)
        self.assertEqual(by_id["garbage"]["text"], "this is not json")  # kept for debugging
        self.assertEqual(by_id["garbage"]["stop_reason"], "max_tokens")
        self.assertIn("9 reviews, 7 errors", p.stderr)

    def test_timeout(self):
        p, preds = self.run_py([{"id": 1, "review": "SLOW"}, {"id": 2, "review": "fine"}],
                               "--timeout", "3")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("longer than 3 s", preds[0]["error"])
        self.assertIsNone(preds[1]["error"])

    def test_limit_and_stdout(self):
        data = os.path.join(HERE, "data", "sample.jsonl")
        p = subprocess.run([sys.executable, os.path.join(HERE, "run.py"), data, "-m", "m",
                            "--pocket", self.pocket, "--limit", "3"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        preds = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual([x["id"] for x in preds], ["en-01", "en-02", "en-03"])
        self.assertEqual(len(self.calls()), 3)

    def test_setup_errors_exit_2(self):
        p, _ = self.run_py([{"id": 1, "review": "x"}], "--pocket", "/nonexistent/pocket")
        self.assertEqual(p.returncode, 2)
        self.assertIn("pocket binary", p.stderr)
        template = os.path.join(self.dir, "t.txt")
        with open(template, "w") as f:
            f.write("no placeholder")
        p, _ = self.run_py([{"id": 1, "review": "x"}], "--prompt", template)
        self.assertEqual(p.returncode, 2)
        self.assertIn("{review}", p.stderr)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
