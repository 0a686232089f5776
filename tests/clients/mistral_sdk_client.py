"""Drives the server with Mistral's official Python SDK (`mistralai`, pinned in
scripts/setup.sh), as a Mistral client pointed at it with `server_url`, and saves what it got
for tests/it/mistral_sdk.rs to check. Run with the SDK on PYTHONPATH:

    python3 mistral_sdk_client.py CASE OUT_DIR

Environment: SERVER_BASE_URL; SPEECH_MODEL (a Voxtral TTS model), STT_MODEL (a Voxtral
Realtime model); CLIP (a WAV clip to clone from); AUDIO and AUDIO_24K (16 and 24 kHz mono
16-bit WAVs to transcribe). Each case writes OUT_DIR/result.json and its audio files.

The only additions to what a Mistral client sends are the server's extension fields `seed`,
`max_frames` and `temperature`, so that the tiny test models' audio is short and comparable:
through the SDK's `additional_properties` (HTTP) and its `http_headers` (the realtime
session's X-Voxtral-Session header), the two ways the SDK offers to send more.
"""

import asyncio
import base64
import json
import os
import struct
import sys
import wave

from mistralai.client import Mistral, errors
from mistralai.client.models import (
    AudioFormat,
    RealtimeSpeechError,
    RealtimeSpeechSessionCreated,
    RealtimeSpeechSessionUpdated,
    RealtimeTranscriptionError,
    RealtimeTranscriptionSessionCreated,
    SpeechStreamAudioDelta,
    SpeechStreamDone,
    TranscriptionStreamDone,
    TranscriptionStreamTextDelta,
)
from mistralai.extra.realtime import UnknownRealtimeEvent, audio_bytes

TEXT = "Hello there. How are you?"
FRAMES = 3
EXTRA = {"seed": 7, "max_frames": FRAMES, "temperature": 0}
SESSION = {"X-Voxtral-Session": json.dumps(EXTRA)}
FORMATS = ["mp3", "wav", "pcm", "flac", "opus"]


def client() -> Mistral:
    return Mistral(api_key="unused", server_url=os.environ["SERVER_BASE_URL"])


def save(out: str, name: str, data: bytes) -> None:
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)


def clip_b64() -> str:
    with open(os.environ["CLIP"], "rb") as f:
        return base64.b64encode(f.read()).decode()


def error_of(call) -> dict:
    """The status and JSON body of an SDK call that must fail."""
    try:
        call()
    except errors.SDKError as e:
        return {"status": e.status_code, "body": json.loads(e.body)}
    raise AssertionError("the call succeeded")


def speech(out: str) -> dict:
    """client.audio.speech.complete (docs.mistral.ai Studio > Audio > Text to speech >
    Speech): a preset voice in each format, base64 `audio_data`; `stream=True`, events read
    by the SDK's EventStream; the fields the server cannot honour refused by name."""
    c = client()
    model = os.environ["SPEECH_MODEL"]
    for fmt in FORMATS:
        r = c.audio.speech.complete(model=model, input=TEXT, voice_id="casual_female",
                                    response_format=fmt, additional_properties=EXTRA)
        save(out, f"speech.{fmt}", base64.b64decode(r.audio_data))
    events, pcm = [], b""
    with c.audio.speech.complete(model=model, input=TEXT, voice_id="casual_female",
                                 response_format="pcm", stream=True,
                                 additional_properties=EXTRA) as stream:
        for event in stream:
            events.append(event.event)
            if isinstance(event.data, SpeechStreamAudioDelta):
                pcm += base64.b64decode(event.data.audio_data)
            elif isinstance(event.data, SpeechStreamDone):
                usage = event.data.usage.model_dump()
    save(out, "stream.pcm", pcm)
    refused = {
        "phoneme_hints": error_of(lambda: c.audio.speech.complete(
            model=model, input=TEXT, voice_id="casual_female",
            phoneme_hints={"Hello": ["h", "ə", "l", "oʊ"]})),
        "conversation_history": error_of(lambda: c.audio.speech.complete(
            model=model, input=TEXT, voice_id="casual_female",
            conversation_history=[{"role": "user", "audio": {"data": clip_b64()}}])),
        "expressiveness": error_of(lambda: c.audio.speech.complete(
            model=model, input=TEXT, voice_id="casual_female", expressiveness=2.0)),
        "voice_id": error_of(lambda: c.audio.speech.complete(
            model=model, input=TEXT, voice_id="robot")),
    }
    return {"events": events, "usage": usage, "refused": refused}


def clone(out: str) -> dict:
    """`ref_audio` on a request naming the Voxtral model (routed to the cloning model served
    beside it), and client.audio.voices (docs.mistral.ai Studio > Audio > Text to speech >
    Voices): create from the same clip, list, get, update, speak with it, delete."""
    c = client()
    model = os.environ["SPEECH_MODEL"]
    clip = clip_b64()
    # The voice below speaks English when a request names no language: these name it.
    english = {**EXTRA, "language": "en"}
    r = c.audio.speech.complete(model=model, input=TEXT, ref_audio=clip, response_format="wav",
                                additional_properties=english)
    save(out, "ref.wav", base64.b64decode(r.audio_data))
    pcm = b""
    with c.audio.speech.complete(model=model, input=TEXT, ref_audio=clip, response_format="pcm",
                                 stream=True, additional_properties=english) as stream:
        for event in stream:
            if isinstance(event.data, SpeechStreamAudioDelta):
                pcm += base64.b64decode(event.data.audio_data)
    save(out, "ref_stream.pcm", pcm)
    created = c.audio.voices.create(name="alice", sample_audio=clip, sample_filename="clip.wav",
                                    languages=["en"], gender="female", tags=["calm"])
    listed = c.audio.voices.list(type_="custom")
    presets = c.audio.voices.list(type_="preset", limit=5, offset=5)
    got = c.audio.voices.get(voice_id=created.id)
    updated = c.audio.voices.update(voice_id=created.id, name="alicia", tags=["warm", "calm"],
                                    description="A test voice")
    preset = c.audio.voices.get(voice_id="casual_female")
    r = c.audio.speech.complete(model=model, input=TEXT, voice_id=created.id,
                                response_format="wav", additional_properties=english)
    save(out, "voice.wav", base64.b64decode(r.audio_data))
    refused = {
        "update_preset": error_of(lambda: c.audio.voices.update(voice_id="casual_female",
                                                                name="x")),
        "both": error_of(lambda: c.audio.speech.complete(
            model=model, input=TEXT, voice_id=created.id, ref_audio=clip)),
        "not_audio": error_of(lambda: c.audio.speech.complete(
            model=model, input=TEXT, ref_audio=base64.b64encode(b"not audio" * 50).decode())),
    }
    deleted = c.audio.voices.delete(voice_id=created.id)
    refused["gone"] = error_of(lambda: c.audio.voices.get(voice_id=created.id))
    dump = lambda v: v.model_dump(mode="json")
    return {
        "created": dump(created),
        "listed": dump(listed),
        "presets": dump(presets),
        "got": dump(got),
        "updated": dump(updated),
        "preset": dump(preset),
        "deleted": dump(deleted),
        "refused": refused,
    }


def transcribe(out: str) -> dict:
    """client.audio.transcriptions.complete and .stream (docs.mistral.ai Studio > Audio >
    Speech to text > Offline transcription): plain, with segment and word timestamps, as
    Server-Sent Events; `diarize=True` and the other unsupported fields refused by name."""
    c = client()
    model = os.environ["STT_MODEL"]
    with open(os.environ["AUDIO"], "rb") as f:
        audio = {"file_name": "audio.wav", "content": f.read()}
    dump = lambda r: r.model_dump(mode="json")
    plain = c.audio.transcriptions.complete(model=model, file=audio)
    segments = c.audio.transcriptions.complete(model=model, file=audio,
                                               timestamp_granularities=["segment"])
    words = c.audio.transcriptions.complete(model=model, file=audio,
                                            timestamp_granularities=["word"])
    events = []
    with c.audio.transcriptions.stream(model=model, file=audio,
                                       timestamp_granularities=["segment"]) as stream:
        for event in stream:
            events.append({"event": event.event, "data": event.data.model_dump(mode="json")})
    refused = {
        "diarize": error_of(lambda: c.audio.transcriptions.complete(
            model=model, file=audio, diarize=True)),
        "context_bias": error_of(lambda: c.audio.transcriptions.complete(
            model=model, file=audio, context_bias=["Voxtral"])),
        "file_url": error_of(lambda: c.audio.transcriptions.complete(
            model=model, file_url="https://example.com/audio.mp3")),
    }
    return {"plain": dump(plain), "segments": dump(segments), "words": dump(words),
            "events": events, "refused": refused}


async def speak(out: str, name: str, **kwargs) -> dict:
    """One client.audio.realtime_speech.speak_stream over TEXT, sent in pieces."""

    async def text():
        for piece in ["Hello ", "there. How", " are you?"]:
            yield piece

    c = client()
    events, pcm = [], b""
    async for event in c.audio.realtime_speech.speak_stream(
            text(), os.environ["SPEECH_MODEL"], http_headers=SESSION, **kwargs):
        if isinstance(event, SpeechStreamAudioDelta):
            pcm += audio_bytes(event)
            continue
        if isinstance(event, (RealtimeSpeechSessionCreated, RealtimeSpeechSessionUpdated)):
            events.append({"type": event.type, "session": event.session.model_dump(mode="json")})
        elif isinstance(event, (SpeechStreamDone, RealtimeSpeechError)):
            events.append(event.model_dump(mode="json"))
        elif isinstance(event, UnknownRealtimeEvent):
            events.append({"type": event.type, "unknown": event.content})
    save(out, name, pcm)
    return {"events": events}


async def realtime_speech(out: str) -> dict:
    """client.audio.realtime_speech.speak_stream (docs.mistral.ai Studio > Audio > Text to
    speech > "Speak in realtime"; the SDK's extra/realtime/speech.py): a preset voice, a
    reference clip (routed to the cloning model), and a streaming mode the server refuses."""
    return {
        "preset": await speak(out, "preset.pcm", voice_id="casual_female"),
        "ref": await speak(out, "ref.pcm", ref_audio=clip_b64()),
        "long_form": await speak(out, "long_form.pcm", voice_id="casual_female",
                                 streaming_mode="long_form"),
    }


async def realtime_transcription(out: str) -> dict:
    """client.audio.realtime.transcribe_stream (docs.mistral.ai Studio > Audio > Speech to
    text > Realtime; the SDK's extra/realtime/transcription.py): 16 kHz pcm_s16le in 100 ms
    appends, the same audio as 24 kHz pcm_f32le (resampled by the server), and `diarize`."""
    with wave.open(os.environ["AUDIO"], "rb") as w:
        rate = w.getframerate()
        pcm = w.readframes(w.getnframes())

    async def chunks(data: bytes, size: int):
        for i in range(0, len(data), size):
            yield data[i:i + size]

    async def run(data: bytes, size: int, **kwargs) -> list:
        events = []
        async for event in client().audio.realtime.transcribe_stream(
                chunks(data, size), os.environ["STT_MODEL"], **kwargs):
            if isinstance(event, TranscriptionStreamTextDelta):
                events.append({"type": event.type, "text": event.text})
            elif isinstance(event, (RealtimeTranscriptionSessionCreated,
                                    TranscriptionStreamDone, RealtimeTranscriptionError)):
                events.append(event.model_dump(mode="json"))
            elif not isinstance(event, UnknownRealtimeEvent):
                events.append({"type": getattr(event, "type", None)})
        return events

    with wave.open(os.environ["AUDIO_24K"], "rb") as w:
        samples = struct.unpack(f"<{w.getnframes()}h", w.readframes(w.getnframes()))
    f32 = struct.pack(f"<{len(samples)}f", *(s / 32768 for s in samples))
    s16 = AudioFormat(encoding="pcm_s16le", sample_rate=rate)
    return {
        "s16": await run(pcm, rate // 10 * 2, audio_format=s16),
        "f32_24k": await run(f32, 2400 * 4,
                             audio_format=AudioFormat(encoding="pcm_f32le", sample_rate=24000)),
        "diarize": await run(pcm, rate // 10 * 2, audio_format=s16, diarize=True),
    }


CASES = {
    "speech": speech,
    "clone": clone,
    "transcribe": transcribe,
    "realtime_speech": lambda out: asyncio.run(realtime_speech(out)),
    "realtime_transcription": lambda out: asyncio.run(realtime_transcription(out)),
}

if __name__ == "__main__":
    case, out = sys.argv[1], sys.argv[2]
    result = CASES[case](out)
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
