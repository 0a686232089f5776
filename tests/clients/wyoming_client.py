"""Drives the server's Wyoming listener with the `wyoming` package from PyPI, as Home
Assistant's Wyoming integration does (homeassistant/components/wyoming/tts.py): `describe`
for the voices, `synthesize` read until `audio-stop`, and the streamed form
(`synthesize-start`, a `synthesize-chunk` per text delta, `synthesize` with the whole text for
servers that cannot stream, `synthesize-stop`) read until `synthesize-stopped`.

Run by tests/it/wyoming.rs with the package on PYTHONPATH (scripts/setup.sh installs it into
.deps/pywyoming): python3 wyoming_client.py HOST PORT OUT_DIR. Writes result.json and one .pcm
file per audio stream. The server's extension fields `seed` and `max_frames` are added to the
events' data, which Home Assistant's events do not carry, so that the audio can be compared
with an HTTP request of the same seed.
"""

import asyncio
import json
import os
import sys

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

EXTRA = {"seed": 23, "max_frames": 10}


def with_extra(event):
    event.data.update(EXTRA)
    return event


async def read_until(client, done, out, name, result):
    """Reads events until `done(type)`; writes each audio stream to NAME-N.pcm."""
    types, streams, audio = [], 0, None
    while True:
        event = await asyncio.wait_for(client.read_event(), timeout=60)
        assert event is not None, f"connection closed after {types}"
        types.append(event.type)
        if AudioStart.is_type(event.type):
            start = AudioStart.from_event(event)
            result[f"{name}-format"] = [start.rate, start.width, start.channels]
            audio = bytearray()
        elif AudioChunk.is_type(event.type):
            chunk = AudioChunk.from_event(event)
            assert (chunk.rate, chunk.width, chunk.channels) == (24000, 2, 1), chunk
            audio.extend(chunk.audio)
        elif AudioStop.is_type(event.type):
            with open(os.path.join(out, f"{name}-{streams}.pcm"), "wb") as f:
                f.write(audio)
            streams += 1
        elif Error.is_type(event.type):
            result[f"{name}-error"] = Error.from_event(event).text
            break
        if done(event.type):
            break
    result[f"{name}-events"] = [t for t in types if t != "audio-chunk"]


async def main(host, port, out):
    result = {}
    async with AsyncTcpClient(host, port) as client:
        await client.write_event(Describe().event())
        event = await asyncio.wait_for(client.read_event(), timeout=60)
        assert Info.is_type(event.type), event
        info = Info.from_event(event)
        tts = info.tts[0]
        result["program"] = tts.name
        result["streaming"] = tts.supports_synthesize_streaming
        result["voices"] = {v.name: v.languages for v in tts.voices if v.installed}

    # One connection per request, as Home Assistant opens them.
    async with AsyncTcpClient(host, port) as client:
        voice = SynthesizeVoice(name="fr_male")
        await client.write_event(with_extra(Synthesize(text="Bonjour tout le monde.", voice=voice).event()))
        await read_until(client, AudioStop.is_type, out, "synthesize", result)

    async with AsyncTcpClient(host, port) as client:
        voice = SynthesizeVoice(name="neutral_male")
        await client.write_event(with_extra(SynthesizeStart(voice=voice).event()))
        message = ""
        for delta in ["Hello wor", "ld. This is ", "the end."]:
            message += delta
            await client.write_event(SynthesizeChunk(text=delta).event())
        await client.write_event(Synthesize(text=message, voice=voice).event())
        await client.write_event(SynthesizeStop().event())
        await read_until(client, SynthesizeStopped.is_type, out, "stream", result)

    async with AsyncTcpClient(host, port) as client:
        await client.write_event(Synthesize(text="Hi.", voice=SynthesizeVoice(name="robot")).event())
        await read_until(client, AudioStop.is_type, out, "unknown", result)

    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), sys.argv[3]))
