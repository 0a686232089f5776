"""A live transcription session through the official `openai` Python SDK's realtime client.

Run by tests/it/realtime.rs (test `the_openai_sdks_realtime_client_transcribes`) with the SDK and
its `realtime` extra on PYTHONPATH (scripts/setup.sh installs `openai[realtime]` into
.deps/pyclient). Environment: SERVER_BASE_URL (no /v1), MODEL, AUDIO (a file of PCM16 24 kHz
mono samples), EXPECTED (the offline transcript of that audio). Exits non-zero, with the
failing check, on any mismatch.
"""

import base64
import os
import sys

from openai import OpenAI
from openai.types.realtime import (
    ConversationItemInputAudioTranscriptionCompletedEvent,
    ConversationItemInputAudioTranscriptionDeltaEvent,
    InputAudioBufferCommittedEvent,
    RealtimeErrorEvent,
    SessionCreatedEvent,
    SessionUpdatedEvent,
)


def check(condition: bool, what: str) -> None:
    if not condition:
        print(f"FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def main() -> None:
    model = os.environ["MODEL"]
    expected = os.environ["EXPECTED"]
    with open(os.environ["AUDIO"], "rb") as f:
        pcm = f.read()
    client = OpenAI(base_url=os.environ["SERVER_BASE_URL"] + "/v1", api_key="unused", max_retries=0)
    with client.realtime.connect(model=model, extra_query={"intent": "transcription"}) as conn:
        created = conn.recv()
        check(isinstance(created, SessionCreatedEvent), f"session.created first, got {created}")
        check(created.session.type == "transcription", f"a transcription session: {created}")

        conn.session.update(session={
            "type": "transcription",
            "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "transcription": {"model": model, "language": "en"},
                "turn_detection": None,
            }},
        })
        updated = conn.recv()
        check(isinstance(updated, SessionUpdatedEvent), f"session.updated, got {updated}")

        # 40 ms appends, as a microphone would send them.
        piece = 2 * 960
        for start in range(0, len(pcm), piece):
            conn.input_audio_buffer.append(audio=base64.b64encode(pcm[start:start + piece]).decode())
        conn.input_audio_buffer.commit()

        deltas, committed = [], None
        for event in conn:
            check(not isinstance(event, RealtimeErrorEvent), f"no error: {event}")
            if isinstance(event, InputAudioBufferCommittedEvent):
                committed = event
            elif isinstance(event, ConversationItemInputAudioTranscriptionDeltaEvent):
                deltas.append(event.delta or "")
            elif isinstance(event, ConversationItemInputAudioTranscriptionCompletedEvent):
                check(committed is not None, "input_audio_buffer.committed before .completed")
                check(event.item_id == committed.item_id, f"the committed item: {event}")
                check(event.transcript == expected,
                      f"transcript {event.transcript!r}, expected {expected!r}")
                check("".join(deltas) == expected, f"deltas {deltas!r} join to the transcript")
                check(event.usage.type == "duration" and event.usage.seconds > 0,
                      f"usage in seconds: {event.usage}")
                break
    print(f"transcript {expected!r} from {len(deltas)} deltas")


if __name__ == "__main__":
    main()
