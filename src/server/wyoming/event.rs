//! Wyoming's framing, as the `wyoming` package's `event.py` reads and writes it: a JSON header
//! line `{"type", "data"?, "data_length"?, "payload_length"?, "version"?}`, then `data_length`
//! bytes of JSON merged into `data`, then `payload_length` bytes of binary payload.

use serde_json::{Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Written in every header: the `wyoming` release this implementation was tested against.
const VERSION: &str = "1.10.2";
/// Bounds on what a client may send; Wyoming's events are far smaller. A TTS client sends no
/// payloads, but one is read (and dropped) rather than ending the connection.
const MAX_HEADER_BYTES: u64 = 64 * 1024;
const MAX_DATA_BYTES: usize = 1 << 20;
const MAX_PAYLOAD_BYTES: usize = 16 << 20;

#[derive(Debug, Default, PartialEq)]
pub struct Event {
    pub kind: String,
    pub data: Map<String, Value>,
    pub payload: Vec<u8>,
}

impl Event {
    /// `data` is a JSON object (anything else counts as no data).
    pub fn new(kind: &str, data: Value) -> Self {
        Event {
            kind: kind.to_string(),
            data: match data {
                Value::Object(map) => map,
                _ => Map::new(),
            },
            payload: Vec::new(),
        }
    }

    pub fn with_payload(mut self, payload: Vec<u8>) -> Self {
        self.payload = payload;
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("invalid Wyoming event: {0}")]
    Invalid(String),
}

fn invalid(message: impl Into<String>) -> ReadError {
    ReadError::Invalid(message.into())
}

/// The next event, or `None` at the end of the stream.
pub async fn read_event<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> Result<Option<Event>, ReadError> {
    let mut line = Vec::new();
    let read = (&mut *reader)
        .take(MAX_HEADER_BYTES)
        .read_until(b'\n', &mut line)
        .await?;
    if read == 0 {
        return Ok(None);
    }
    if line.last() != Some(&b'\n') && read as u64 == MAX_HEADER_BYTES {
        return Err(invalid(format!(
            "header line longer than {MAX_HEADER_BYTES} bytes"
        )));
    }
    let Value::Object(mut header) =
        serde_json::from_slice(&line).map_err(|e| invalid(format!("header: {e}")))?
    else {
        return Err(invalid("the header is not a JSON object"));
    };
    let kind = match header.remove("type") {
        Some(Value::String(kind)) => kind,
        _ => return Err(invalid("the header has no string `type`")),
    };
    let mut data = match header.remove("data") {
        Some(Value::Object(data)) => data,
        None | Some(Value::Null) => Map::new(),
        Some(_) => return Err(invalid("`data` is not an object")),
    };
    let data_length = length(&header, "data_length", MAX_DATA_BYTES)?;
    if data_length > 0 {
        let mut bytes = vec![0; data_length];
        reader.read_exact(&mut bytes).await?;
        match serde_json::from_slice(&bytes) {
            Ok(Value::Object(more)) => data.extend(more),
            _ => return Err(invalid("the data block is not a JSON object")),
        }
    }
    let mut payload = vec![0; length(&header, "payload_length", MAX_PAYLOAD_BYTES)?];
    reader.read_exact(&mut payload).await?;
    Ok(Some(Event {
        kind,
        data,
        payload,
    }))
}

fn length(header: &Map<String, Value>, key: &str, max: usize) -> Result<usize, ReadError> {
    match header.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(value) => match value.as_u64() {
            Some(n) if n as usize <= max => Ok(n as usize),
            Some(n) => Err(invalid(format!("`{key}` {n} is over the limit of {max}"))),
            None => Err(invalid(format!("`{key}` is not a length"))),
        },
    }
}

/// Writes one event as `event.py`'s `write_event` does: data as a separate block.
pub async fn write_event<W: AsyncWrite + Unpin>(
    writer: &mut W,
    event: &Event,
) -> std::io::Result<()> {
    let mut header = Map::new();
    header.insert("type".into(), event.kind.clone().into());
    header.insert("version".into(), VERSION.into());
    let data = if event.data.is_empty() {
        Vec::new()
    } else {
        serde_json::to_vec(&event.data).expect("JSON values serialize")
    };
    if !data.is_empty() {
        header.insert("data_length".into(), data.len().into());
    }
    if !event.payload.is_empty() {
        header.insert("payload_length".into(), event.payload.len().into());
    }
    let mut bytes = serde_json::to_vec(&header).expect("JSON values serialize");
    bytes.push(b'\n');
    bytes.extend_from_slice(&data);
    bytes.extend_from_slice(&event.payload);
    writer.write_all(&bytes).await?;
    writer.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn read(bytes: &[u8]) -> Result<Option<Event>, ReadError> {
        read_event(&mut &bytes[..]).await
    }

    #[tokio::test]
    async fn round_trip_with_data_and_payload() {
        let event = Event::new("audio-chunk", json!({"rate": 24000, "width": 2}))
            .with_payload(vec![1, 2, 3, 4]);
        let mut bytes = Vec::new();
        write_event(&mut bytes, &event).await.unwrap();
        let header_end = bytes.iter().position(|&b| b == b'\n').unwrap();
        let header: Value = serde_json::from_slice(&bytes[..header_end]).unwrap();
        assert_eq!(header["data_length"], json!(24));
        assert_eq!(header["payload_length"], json!(4));
        assert_eq!(read(&bytes).await.unwrap(), Some(event));
        let mut empty = Vec::new();
        write_event(&mut empty, &Event::new("describe", Value::Null))
            .await
            .unwrap();
        assert_eq!(empty, b"{\"type\":\"describe\",\"version\":\"1.10.2\"}\n");
    }

    #[tokio::test]
    async fn header_data_and_data_block_merge() {
        let bytes = b"{\"type\":\"synthesize\",\"data\":{\"text\":\"hi\"},\"data_length\":15}\n{\"voice\":\"x\"}  ";
        let event = read(bytes).await.unwrap().unwrap();
        assert_eq!(event.kind, "synthesize");
        assert_eq!(
            Value::Object(event.data),
            json!({"text": "hi", "voice": "x"})
        );
        assert!(read(b"").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn malformed_headers_are_errors() {
        for bad in [
            &b"not json\n"[..],
            b"[1]\n",
            b"{\"data\":{}}\n",
            b"{\"type\":\"x\",\"data\":3}\n",
            b"{\"type\":\"x\",\"data_length\":-1}\n",
            b"{\"type\":\"x\",\"payload_length\":99999999999}\n",
            b"{\"type\":\"x\",\"data_length\":2}\n[]",
        ] {
            let err = read(bad).await.unwrap_err();
            assert!(matches!(err, ReadError::Invalid(_)), "{bad:?}: {err}");
        }
        let truncated = read(b"{\"type\":\"x\",\"payload_length\":4}\nab").await;
        assert!(matches!(truncated, Err(ReadError::Io(_))));
        let long = vec![b' '; MAX_HEADER_BYTES as usize + 1];
        assert!(matches!(read(&long).await, Err(ReadError::Invalid(_))));
    }
}
