#!/usr/bin/env python3
"""Review opinion mining with the pocket CLI: for each review of a JSONL file, fill the prompt
template, run `pocket run --json-schema-file schema.json --span-source REVIEW` (the output is JSON
of that schema, its aspect and opinion strings copied from the review), and write one
prediction per review:

  {"id": ..., "review": ..., "opinions": [...], "error": null | "message", "seconds": 1.23,
   "stop_reason": ..., "text": "the raw output"}

Input lines: {"id": ..., "review": "...", "opinions": [gold quadruples, optional]}.
A review that fails (pocket exits nonzero, e.g. the token budget ran out; the output is not
valid JSON of the schema; a bad input line) gets "opinions": [] and the error message; the run
goes on. Progress goes to stderr. See README.md."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import schema_check  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_POCKET = os.path.join(REPO, "build", "bin", "pocket")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="JSONL file: {\"id\", \"review\", \"opinions\"?} per line")
    p.add_argument("-m", "--model", required=True, help="any model file pocket loads")
    p.add_argument("--tokenizer", help="tokenizer for the model (llama2.c models need one)")
    p.add_argument("-o", "--out", default="-", help="predictions JSONL (default: stdout)")
    p.add_argument("--pocket", default=DEFAULT_POCKET,
                   help="the pocket binary (default: build/bin/pocket of this checkout)")
    p.add_argument("--schema", default=os.path.join(HERE, "schema.json"))
    p.add_argument("--prompt", default=os.path.join(HERE, "prompt.txt"),
                   help="prompt template; {review} is replaced by the review")
    p.add_argument("-n", "--max-tokens", type=int, default=512,
                   help="token budget per review (pocket -n)")
    p.add_argument("--chat", action="store_true", help="use the model's chat template")
    p.add_argument("--no-think", action="store_true", help="Qwen3: no thinking block")
    p.add_argument("--temp", type=float, default=0.0, help="temperature (default 0: greedy)")
    p.add_argument("-t", "--threads", type=int, help="pocket -t")
    p.add_argument("-c", "--ctx-size", type=int, help="pocket -c")
    p.add_argument("--limit", type=int, help="only the first N reviews")
    p.add_argument("--timeout", type=float, default=600, help="seconds per review")
    p.add_argument("--pocket-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for pocket run (repeatable), e.g. --pocket-arg=--seed=1")
    return p.parse_args(argv)


def pocket_command(args, prompt_file, source_file):
    cmd = [args.pocket, "run", "-m", args.model, "-f", prompt_file, "--json-schema-file", args.schema,
           "--span-source", source_file, "-n", str(args.max_tokens), "--temp", str(args.temp),
           "--json"]
    if args.tokenizer:
        cmd += ["--tokenizer", args.tokenizer]
    if args.chat:
        cmd.append("--chat")
    if args.no_think:
        cmd.append("--no-think")
    if args.threads is not None:
        cmd += ["-t", str(args.threads)]
    if args.ctx_size is not None:
        cmd += ["-c", str(args.ctx_size)]
    return cmd + args.pocket_arg


def error_message(stderr, returncode):
    """The last error line pocket printed (it prints `pocket: error: ...`), else all of
    stderr (argument parsing errors come as several lines)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if "error" in line.lower():
            return line
    text = " ".join(lines)[-500:] if lines else "no message on stderr"
    return f"pocket exited with status {returncode}: {text}"


def predict(args, schema, template, review):
    """Runs pocket on one review; returns (opinions, text, stop_reason). Raises RuntimeError
    with a message a user can act on."""
    with tempfile.TemporaryDirectory(prefix="review-mining-") as tmp:
        prompt_file = os.path.join(tmp, "prompt.txt")
        source_file = os.path.join(tmp, "review.txt")
        # str.replace, not str.format: the template holds JSON braces.
        with open(prompt_file, "w", encoding="utf-8", newline="") as f:
            f.write(template.replace("{review}", review))
        with open(source_file, "w", encoding="utf-8", newline="") as f:
            f.write(review)
        try:
            p = subprocess.run(pocket_command(args, prompt_file, source_file),
                               capture_output=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"pocket took longer than {args.timeout:g} s")
    stdout = p.stdout.decode("utf-8", errors="replace")
    stderr = p.stderr.decode("utf-8", errors="replace")
    if p.returncode != 0:
        raise RuntimeError(error_message(stderr, p.returncode))
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        raise RuntimeError("pocket printed nothing on stdout")
    try:
        result = json.loads(lines[-1])
        text = result["text"]
    except (ValueError, KeyError, TypeError) as e:
        raise RuntimeError(f"pocket's --json output is not an object with \"text\": {e}")
    stop_reason = result.get("stop_reason")
    try:
        answer = json.loads(text)
    except ValueError as e:
        raise _WithText(f"the output is not JSON ({e}), stop_reason {stop_reason}", text,
                        stop_reason)
    errors = schema_check.validate(answer, schema, span_source=review)
    if errors:
        raise _WithText("the output does not match the schema: " + "; ".join(errors[:5]), text,
                        stop_reason)
    return answer["opinions"], text, stop_reason


class _WithText(RuntimeError):
    def __init__(self, message, text, stop_reason):
        super().__init__(message)
        self.text = text
        self.stop_reason = stop_reason


def read_jsonl(path):
    """Yields (line_number, record or None, error or None) for each non-blank line."""
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as e:
                yield number, None, f"line {number} is not JSON: {e}"
                continue
            if not isinstance(record, dict):
                yield number, None, f"line {number} is not a JSON object"
            elif not isinstance(record.get("review"), str):
                yield number, record, f"line {number} has no \"review\" string"
            else:
                yield number, record, None


def main(argv=None):
    args = parse_args(argv)
    for path, what in ((args.pocket, "the pocket binary (--pocket)"), (args.input, "the input"),
                       (args.schema, "the schema (--schema)"),
                       (args.prompt, "the prompt template (--prompt)")):
        if not os.path.exists(path):
            print(f"run.py: error: {what} {path} does not exist", file=sys.stderr)
            return 2
    schema = schema_check.load_schema(args.schema)
    with open(args.prompt, encoding="utf-8") as f:
        template = f.read()
    if "{review}" not in template:
        print(f"run.py: error: the prompt template {args.prompt} has no {{review}} placeholder",
              file=sys.stderr)
        return 2

    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="utf-8")
    n_done = n_errors = 0
    started = time.monotonic()
    try:
        for number, record, bad in read_jsonl(args.input):
            if args.limit is not None and n_done >= args.limit:
                break
            record = record or {}
            review = record.get("review")
            prediction = {"id": record.get("id", f"line-{number}"), "review": review,
                          "opinions": [], "error": bad, "seconds": 0.0, "stop_reason": None,
                          "text": None}
            if bad is None:
                t0 = time.monotonic()
                try:
                    opinions, text, stop = predict(args, schema, template, review)
                    prediction.update(opinions=opinions, text=text, stop_reason=stop)
                except _WithText as e:
                    prediction.update(error=str(e), text=e.text, stop_reason=e.stop_reason)
                except Exception as e:  # one bad review never stops the run
                    prediction["error"] = str(e) or type(e).__name__
                prediction["seconds"] = round(time.monotonic() - t0, 3)
            n_done += 1
            n_errors += prediction["error"] is not None
            out.write(json.dumps(prediction, ensure_ascii=False) + "\n")
            out.flush()
            status = (f"error: {prediction['error']}" if prediction["error"] else
                      f"{len(prediction['opinions'])} opinions")
            print(f"[{n_done}] {prediction['id']}: {status} ({prediction['seconds']:.2f} s)",
                  file=sys.stderr, flush=True)
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"{n_done} reviews, {n_errors} errors, {time.monotonic() - started:.1f} s",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
