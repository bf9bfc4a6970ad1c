"""pocket: small language models inside apps (Python bindings over libpocket's C API).

    import pocket
    with pocket.Model.load("model.pocket", threads=2) as model:
        session = model.session()
        for piece in session.stream(messages=[{"role": "user", "content": "Hi"}], max_tokens=64):
            print(piece, end="", flush=True)
        answer = session.generate("Extract:", json_schema={"type": "object"}, temperature=0)

Errors raise PocketError (status + pocket's message). The model runs with the GIL released.
"""
from ._api import (Adapter, CandidateScore, ClosedError, GenerateResult, LabelScore, Model,
                   PocketError, Session, Status, StopReason, version)

__all__ = [
    "Adapter", "CandidateScore", "ClosedError", "GenerateResult", "LabelScore", "Model",
    "PocketError", "Session", "Status", "StopReason", "version"
]
__version__ = "0.13.0"
