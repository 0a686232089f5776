//! Home Assistant's Wyoming protocol on its own TCP port (`wyoming_port`, off by default):
//! `describe` -> `info`; `synthesize` -> `audio-start`, `audio-chunk`*, `audio-stop` (16-bit
//! mono PCM at the model's rate); the streamed `synthesize-start`, `synthesize-chunk`*,
//! `synthesize-stop` -> audio for each run of complete sentences, then `synthesize-stopped`.

mod event;
mod info;
mod session;

use super::state::AppState;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tracing::Instrument;

/// Accepts connections until dropped; dropping it drops every connection, which cancels their
/// jobs (so the inference worker can stop once the HTTP side has drained).
pub async fn serve(listener: TcpListener, app: AppState) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, peer)) => {
                    let span = tracing::info_span!("wyoming", %peer);
                    connections.spawn(session::run(socket, app.clone()).instrument(span));
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait instead of spinning.
                    tracing::warn!(error = %e, "Wyoming accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}
