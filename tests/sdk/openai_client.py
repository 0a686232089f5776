"""Calls a running voxtral-tts server through the official `openai` Python SDK.

Run by tests/it/server.rs (test `openai_python_sdk_works_unchanged`) with the SDK on PYTHONPATH
(scripts/setup.sh installs it into .deps/pyclient). Environment: SERVER_BASE_URL (no /v1),
SERVER_API_KEY. Exits non-zero, with the failing check, on any mismatch.
"""

import io
import os
import sys
import wave

import openai
from openai import OpenAI

FRAMES = 6
SAMPLES = FRAMES * 1920  # 80 ms frames at 24 kHz
EXTRA = {"seed": 11, "max_frames": FRAMES}


def main() -> None:
    base = os.environ["SERVER_BASE_URL"] + "/v1"
    client = OpenAI(base_url=base, api_key=os.environ["SERVER_API_KEY"], max_retries=0)

    # The plain call: the whole file in memory.
    speech = client.audio.speech.create(
        model="tts-1", voice="alloy", input="Hello from the SDK.",
        response_format="wav", extra_body=EXTRA,
    )
    with wave.open(io.BytesIO(speech.content)) as w:
        got = (w.getframerate(), w.getnchannels(), w.getsampwidth(), w.getnframes())
    assert got == (24000, 1, 2, SAMPLES), f"wav header {got}"

    # The streaming call, with every OpenAI field set (instructions are accepted, unused).
    with client.audio.speech.with_streaming_response.create(
        model="gpt-4o-mini-tts", voice={"id": "coral"}, input="Streaming through the SDK.",
        instructions="Speak warmly.", response_format="pcm", speed=1.0,
        stream_format="audio", extra_body=EXTRA,
    ) as response:
        assert response.headers["content-type"] == "audio/pcm", response.headers
        assert response.headers["x-voxtral-seed"] == "11", response.headers
        pcm = b"".join(response.iter_bytes())
    assert len(pcm) == SAMPLES * 2, f"pcm length {len(pcm)}"

    # The default format is mp3, as with OpenAI.
    mp3 = client.audio.speech.create(model="tts-1-hd", voice="onyx", input="Default.",
                                     extra_body=EXTRA)
    assert mp3.response.headers["content-type"] == "audio/mpeg"
    assert mp3.content[:3] == b"ID3" or mp3.content[0] == 0xFF, mp3.content[:4]

    models = [m.id for m in client.models.list()]
    for alias in ("tts-1", "tts-1-hd", "gpt-4o-mini-tts"):
        assert alias in models, models

    # Errors arrive as the SDK's typed exceptions, with OpenAI's fields filled in.
    try:
        client.audio.speech.create(model="tts-1", voice="nobody", input="x")
        raise AssertionError("unknown voice accepted")
    except openai.BadRequestError as e:
        assert (e.status_code, e.param, e.type) == (400, "voice", "invalid_request_error"), e
    try:
        client.audio.speech.create(model="tts-1", voice="alloy", input="x", speed=9.0)
        raise AssertionError("speed 9 accepted")
    except openai.BadRequestError as e:
        assert e.param == "speed", e
    stranger = OpenAI(base_url=base, api_key="not-a-key", max_retries=0)
    try:
        stranger.models.list()
        raise AssertionError("wrong key accepted")
    except openai.AuthenticationError as e:
        assert e.status_code == 401 and e.code == "invalid_api_key", e

    print(f"openai {openai.__version__}: all SDK checks passed")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # one line for the Rust test's failure message
        print(f"FAILED: {type(e).__name__}: {e}", file=sys.stderr)
        raise
