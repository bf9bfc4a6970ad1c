"""Chat with streaming, then a schema-valid JSON answer: pocket from Python in 30 lines.
Usage: python3 chat.py MODEL.pocket [question]   (pip install ./bindings/python first)"""
import json
import sys

import pocket

SCHEMA = {
    "type": "object",
    "properties": {"mood": {"enum": ["happy", "neutral", "sad"]},
                   "stars": {"type": "integer", "minimum": 1, "maximum": 5}},
    "required": ["mood", "stars"],
    "additionalProperties": False,
}

with pocket.Model.load(sys.argv[1], threads=2) as model:
    session = model.session()
    question = sys.argv[2] if len(sys.argv) > 2 else "What makes a good day?"
    messages = [{"role": "user", "content": question}]
    print(f"[{model.kernels}] assistant: ", end="", flush=True)
    for piece in session.stream(messages=messages, max_tokens=32, enable_thinking=False):
        print(piece, end="", flush=True)
    print(f"\n({session.last_result.n_generated_tokens} tokens, "
          f"{session.last_result.n_generated_tokens / session.last_result.decode_ms * 1e3:.1f} tok/s)")
    review = "Lovely hotel, friendly staff, but the breakfast was cold."
    answer = session.generate(messages=[{"role": "user", "content": f"Rate this review: {review}"}],
                              json_schema=SCHEMA, temperature=0, max_tokens=48,
                              enable_thinking=False)
    print("json:", json.dumps(answer.json()))
