//! What every WebSocket route shares: its close codes, the size limit of a client message,
//! and a bounded way out, so a client that stops reading ends its own session (with an
//! error event and a close code) instead of holding memory or a handler.

use axum::extract::ws::{CloseFrame, Message, WebSocket};
use futures_util::stream::SplitSink;
use futures_util::SinkExt;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Close code 1008: the client broke the protocol's rules (it stopped reading).
pub const POLICY_VIOLATION: u16 = 1008;
/// Close code 1009: a message over the size limit.
pub const MESSAGE_TOO_BIG: u16 = 1009;
/// Close code 1011: the server cannot go on (its worker stopped).
pub const INTERNAL_ERROR: u16 = 1011;
/// Close code 1012: the server is restarting (shutting down).
pub const SERVICE_RESTART: u16 = 1012;
/// Close code 1013: try again later (every session place is taken).
pub const TRY_AGAIN_LATER: u16 = 1013;

/// Messages waiting to be written; past this the session waits for the client.
const SEND_QUEUE: usize = 64;
/// A client that takes no message for this long is not reading: its session ends.
pub const STALL_LIMIT: Duration = Duration::from_secs(10);
/// How long the last messages (an error, the close) may take to go out.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// How long a socket stays open after the server's close went out (see [`linger`]).
const LINGER: Duration = Duration::from_secs(1);

/// Keeps the socket open a moment after the server's close went out: dropping it with the
/// client's messages unread resets the connection, and the client could lose the error and
/// the close before reading them. What it still reads is dropped, until the client answers
/// the close (the stream ends) or [`LINGER`] has passed. After a message over the limit
/// (`whole`) the stream reads no further, so the socket stays open the whole time.
async fn linger<S>(incoming: &mut S, whole: bool)
where
    S: futures_util::Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    use futures_util::StreamExt;
    let deadline = tokio::time::Instant::now() + LINGER;
    while let Ok(Some(Ok(_))) = tokio::time::timeout_at(deadline, incoming.next()).await {}
    if whole {
        tokio::time::sleep_until(deadline).await;
    }
}

/// Whether a read failed because the client's message was over the route's
/// `max_message_size` (the socket can still send the error and the close).
pub fn too_large(error: &axum::Error) -> bool {
    let inner: &(dyn std::error::Error + 'static) = error;
    let mut source = Some(inner);
    while let Some(e) = source {
        if matches!(
            e.downcast_ref::<tungstenite::Error>(),
            Some(tungstenite::Error::Capacity(_))
        ) {
            return true;
        }
        source = e.source();
    }
    false
}

pub fn close(code: u16, reason: &str) -> Message {
    // A close frame's reason is at most 123 bytes.
    let mut end = reason.len().min(120);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    Message::Close(Some(CloseFrame {
        code,
        reason: reason[..end].into(),
    }))
}

/// The client is not reading: the session ends.
#[derive(Debug)]
pub struct Stalled;

/// How a session ends.
pub enum End {
    /// The last messages (an error event and a close; none when the client left). After a
    /// close the socket lingers ([`linger`]).
    With(Vec<Message>),
    /// A message over the size limit: `With`, and the socket lingers its whole time.
    Oversized(Vec<Message>),
    /// The client stopped reading.
    Stalled,
}

impl From<Stalled> for End {
    fn from(_: Stalled) -> Self {
        End::Stalled
    }
}

/// Ends the session as `end` says. A client that stopped reading gets the error event that
/// `error` makes from a code and a message (if it reads again within the grace), then close
/// code 1008.
pub async fn end<S>(
    out: Outgoing,
    incoming: &mut S,
    end: End,
    error: impl FnOnce(&'static str, &str) -> Message,
) where
    S: futures_util::Stream<Item = Result<Message, axum::Error>> + Unpin,
{
    match end {
        End::With(last) => {
            let closing = last.iter().any(|m| matches!(m, Message::Close(_)));
            out.finish(last).await;
            if closing {
                linger(incoming, false).await;
            }
        }
        End::Oversized(last) => {
            out.finish(last).await;
            linger(incoming, true).await;
        }
        End::Stalled => {
            tracing::warn!("WebSocket session closed: the client is not reading");
            let message = format!(
                "The client read nothing for {} s: the session is closed.",
                STALL_LIMIT.as_secs()
            );
            let last = vec![
                error("client_not_reading", &message),
                close(POLICY_VIOLATION, &message),
            ];
            out.abandon(last).await;
            linger(incoming, false).await;
        }
    }
}

/// The writing half of a socket, on a task of its own behind a bounded queue.
pub struct Outgoing {
    queue: Option<mpsc::Sender<Message>>,
    abort: Option<oneshot::Sender<Vec<Message>>>,
    writer: JoinHandle<()>,
}

impl Outgoing {
    pub fn new(sink: SplitSink<WebSocket, Message>) -> Self {
        let (queue, queued) = mpsc::channel(SEND_QUEUE);
        let (abort, aborted) = oneshot::channel();
        Outgoing {
            queue: Some(queue),
            abort: Some(abort),
            writer: tokio::spawn(write(sink, queued, aborted)),
        }
    }

    /// Queues `message`, waiting while the queue is full; a client that takes nothing for
    /// [`STALL_LIMIT`] (or has gone) is [`Stalled`].
    pub async fn send(&mut self, message: Message) -> Result<(), Stalled> {
        let queue = self.queue.as_ref().ok_or(Stalled)?;
        queue
            .send_timeout(message, STALL_LIMIT)
            .await
            .map_err(|_| Stalled)
    }

    /// Sends what is queued, then `last`, and ends the socket.
    pub async fn finish(mut self, last: Vec<Message>) {
        if let Some(queue) = self.queue.take() {
            for message in last {
                if queue.send_timeout(message, CLOSE_GRACE).await.is_err() {
                    break;
                }
            }
        }
        let _ = tokio::time::timeout(STALL_LIMIT, &mut self.writer).await;
        self.writer.abort();
    }

    /// Drops what is queued and sends `last` alone (the client stopped reading: the error
    /// and the close go out if it ever reads again within the grace).
    pub async fn abandon(mut self, last: Vec<Message>) {
        self.queue = None;
        if let Some(abort) = self.abort.take() {
            let _ = abort.send(last);
        }
        let _ = tokio::time::timeout(CLOSE_GRACE * 2, &mut self.writer).await;
        self.writer.abort();
    }
}

async fn write(
    mut sink: SplitSink<WebSocket, Message>,
    mut queued: mpsc::Receiver<Message>,
    mut aborted: oneshot::Receiver<Vec<Message>>,
) {
    loop {
        let message = tokio::select! {
            biased;
            last = &mut aborted => return write_last(&mut sink, last.unwrap_or_default()).await,
            message = queued.recv() => match message {
                Some(message) => message,
                None => {
                    let _ = sink.close().await;
                    return;
                }
            },
        };
        tokio::select! {
            biased;
            last = &mut aborted => return write_last(&mut sink, last.unwrap_or_default()).await,
            sent = sink.send(message) => if sent.is_err() {
                return;
            },
        }
    }
}

async fn write_last(sink: &mut SplitSink<WebSocket, Message>, last: Vec<Message>) {
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        for message in last {
            sink.send(message).await?;
        }
        sink.close().await
    })
    .await;
}
