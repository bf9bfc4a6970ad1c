"""pocket serve's parallel tool calls (issue 45, point 4) through the official `openai` npm client
(tests/e2e/serve/openai_parallel_tools.mjs), on a random-weight model with the real Qwen3 tokenizer:
two calls in one turn, each valid against its own tool's schema, streamed as the same two calls;
parallel_tool_calls false (or not given) keeps one; a conversation goes on with both calls and
their responses."""
import json
import os
import subprocess
import unittest

import jsonschema

from harness import QWEN3_TOKENIZER, main_unittest, make_model, pocket, require
from test_serve import KEY, NODE, OPENAI, Server

HERE = os.path.dirname(os.path.abspath(__file__))
CLIENT = os.path.join(HERE, "serve", "openai_parallel_tools.mjs")


def token_ids(model, text):
    """The ids of `text`, control tokens recognised, in `model` (a synthetic model's vocabulary is
    cut to its size: the tokenizer's own ids do not apply)."""
    return json.loads(pocket("tokenize", "-m", model, "-p", text, "--no-bos").stdout)["ids"]


class ParallelToolCallsTest(unittest.TestCase):
    def check_calls(self, tools, choice, n, name=None):
        self.assertEqual(choice["finish"], "tool_calls", choice)
        calls = choice["message"]["tool_calls"]
        self.assertEqual(len(calls), n, choice)
        schema = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        for call in calls:
            self.assertEqual(call["type"], "function")
            self.assertTrue(call["id"].startswith("call_"), call)
            self.assertIn(call["function"]["name"], schema)
            if name is not None:
                self.assertEqual(call["function"]["name"], name)
            jsonschema.validate(json.loads(call["function"]["arguments"]),
                                schema[call["function"]["name"]])
        self.assertEqual(len({c["id"] for c in calls}), n, "call ids must differ")
        return calls

    def test_parallel_tool_calls_with_the_openai_client(self):
        require(os.path.join(OPENAI, "package.json"), "run scripts/fetch_fixtures.sh")
        require(QWEN3_TOKENIZER, "run scripts/fetch_fixtures.sh")
        require(NODE, "run scripts/fetch_fixtures.sh")
        model = make_model("serve-qwen3-tiny.gguf", extra=("--tokenizer", QWEN3_TOKENIZER))
        server = Server("-m", model, "--api-key", KEY, "--parallel", "2", "-t", "2",
                        "--kv-type", "f32", "--max-tool-calls", "2")
        try:
            end = token_ids(model, "<|im_end|><|endoftext|>")
            self.assertEqual(len(end), 2, end)
            [call_token] = token_ids(model, "<tool_call>")
            env = dict(os.environ, OPENAI_MODULE=os.path.join(OPENAI, "index.mjs"),
                       BASE_URL=f"http://{server.host}:{server.port}/v1", MODEL=server.model,
                       API_KEY=KEY, END_TOKENS=",".join(map(str, end)),
                       TOOL_CALL_TOKEN=str(call_token))
            p = subprocess.run([NODE, CLIENT], env=env, capture_output=True, text=True,
                               timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr[-4000:])
            out = json.loads(p.stdout)
            tools = out["tools"]
            # Two calls in one turn, each valid against its own tool's schema.
            calls = self.check_calls(tools, out["required"], 2)
            self.assertIsNone(out["required"]["message"]["content"])
            self.check_calls(tools, out["named"], 2, name="get_weather")
            self.check_calls(tools, out["auto"], 2)
            # Streamed: one delta with both calls (indices 0 and 1), the same calls as not
            # streamed for the same seed (ids differ).
            streamed = [tc for c in out["chunks"] if c["choices"]
                        for tc in (c["choices"][0]["delta"].get("tool_calls") or [])]
            self.assertEqual([tc["index"] for tc in streamed], [0, 1])
            self.assertEqual([tc["function"] for tc in streamed], [c["function"] for c in calls])
            self.assertEqual(out["chunks"][-1]["choices"][0]["finish_reason"], "tool_calls")
            # parallel_tool_calls false or not given: exactly one, though the model is kept from
            # ending.
            self.check_calls(tools, out["single"], 1)
            self.check_calls(tools, out["single_default"], 1)
            # The conversation goes on with both calls and both responses.
            self.assertIn(out["after"]["finish"], ("stop", "length", "tool_calls"))
        finally:
            self.assertEqual(server.stop(), 0, "".join(server.log))


if __name__ == "__main__":
    main_unittest()
