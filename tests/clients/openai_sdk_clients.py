"""Replays the speech requests of the clients that call the server through the official
`openai` Python SDK, each as its source makes them (cited per function), and saves what each
client would keep. Run by tests/it/clients.rs with the SDK on PYTHONPATH:

    python3 openai_sdk_clients.py CLIENT OUT_DIR

Environment: SERVER_BASE_URL (no /v1). The only change to a client's request is `extra_body`
with the server's extension fields `seed` and `max_frames`, so that the tiny test model's
audio is short and can be compared with a plain HTTP request of the same seed.
"""

import asyncio
import base64
import json
import os
import sys

import openai

EXTRA = {"seed": 17, "max_frames": 12}
TEXT = "Hello there. This is a voice agent speaking."


def client() -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=os.environ["SERVER_BASE_URL"] + "/v1", api_key="sk-unused", max_retries=0
    )


def save(out: str, name: str, data: bytes, meta: dict) -> None:
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
    with open(os.path.join(out, name + ".json"), "w") as f:
        json.dump(meta, f)


async def pipecat(out: str) -> None:
    """pipecat-ai/pipecat src/pipecat/services/openai/tts.py, OpenAITTSService.run_tts: pcm,
    read with `with_streaming_response` in 0.5 s chunks (24 kHz s16le) as frames."""
    sample_rate = 24000
    chunk_size = int(sample_rate * 0.5 * 2)
    create_params = {"input": TEXT, "model": "gpt-4o-mini-tts", "voice": "alloy",
                     "response_format": "pcm"}
    async with client().audio.speech.with_streaming_response.create(
        **create_params, extra_body=EXTRA
    ) as r:
        assert r.status_code == 200, r.status_code
        chunks = [c async for c in r.iter_bytes(chunk_size) if len(c) > 0]
        meta = {"content_type": r.headers.get("content-type"),
                "transfer_encoding": r.headers.get("transfer-encoding"),
                "chunks": len(chunks)}
    save(out, "pipecat.pcm", b"".join(chunks), meta)


async def livekit(out: str) -> None:
    """livekit/agents livekit-plugins/livekit-plugins-openai/livekit/plugins/openai/tts.py,
    ChunkedStream._run: `stream_format` "audio" for tts-1/tts-1-hd and "sse" otherwise; the
    body is parsed by its Content-Type (SSE `speech.audio.delta` events carry `delta` or
    `audio`)."""
    for model, fmt in [("gpt-4o-mini-tts", "mp3"), ("gpt-4o-mini-tts", "pcm"), ("tts-1", "mp3")]:
        stream_format = "audio" if model in {"tts-1", "tts-1-hd"} else "sse"
        oai_stream = client().audio.speech.with_streaming_response.create(
            input=TEXT, model=model, voice="ash", response_format=fmt, speed=1.0,
            instructions=openai.omit, stream_format=stream_format,
            # LiveKit passes httpx.Timeout(30, connect=...): a client-side limit only.
            timeout=30.0, extra_body=EXTRA,
        )
        audio = bytearray()
        usage = None
        async with oai_stream as stream:
            media_type = stream.headers.get("content-type", "").split(";")[0].strip().lower()
            if media_type != "text/event-stream":
                async for chunk in stream.iter_bytes():
                    audio.extend(chunk)
            else:
                async for line in stream.iter_lines():
                    if not line or not line.startswith("data: "):
                        continue
                    event = json.loads(line[6:])
                    if event.get("type") == "speech.audio.delta":
                        audio.extend(base64.b64decode(event.get("delta", "") or event.get("audio", "")))
                    elif event.get("type") == "speech.audio.done":
                        usage = event.get("usage")
        save(out, f"livekit-{model}.{fmt}", bytes(audio),
             {"content_type": media_type, "usage": usage, "request_id": stream.request_id})


async def home_assistant(out: str) -> None:
    """home-assistant/core homeassistant/components/openai_conversation/tts.py,
    OpenAITTSEntity.async_get_tts_audio: `instructions=str(options.get(CONF_PROMPT))` (the
    text "None" when no prompt is set), the speed option, and the preferred format (ogg ->
    opus, raw -> pcm), all bytes of a `with_streaming_response` collected."""
    for fmt, prompt, speed in [("mp3", None, 1.0), ("opus", "Speak calmly.", 1.5), ("pcm", None, 1.0)]:
        async with client().audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="marin", input=TEXT, instructions=str(prompt),
            speed=speed, response_format=fmt, extra_body=EXTRA,
        ) as response:
            data = bytearray()
            async for chunk in response.iter_bytes():
                data.extend(chunk)
            meta = {"content_type": response.headers.get("content-type"), "speed": speed}
        save(out, f"home-assistant.{fmt}", bytes(data), meta)


if __name__ == "__main__":
    name, out = sys.argv[1], sys.argv[2]
    asyncio.run({"pipecat": pipecat, "livekit": livekit, "home-assistant": home_assistant}[name](out))
