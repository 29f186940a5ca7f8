//! A site's export as a download (the Privacy tab's links and `GET /api/sites/{id}/export`):
//! `crate::export` writes into a bounded channel and the response body reads from it, so
//! the dashboard holds a few chunks at most however big the export, and a slow client
//! slows the export down rather than filling memory.

use crate::error::AdminError;
use crate::export::{self, Format, Sink};
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use rivulet_common::ch::Db;
use serde::Deserialize;
use tokio::sync::mpsc;

/// Chunks (of about 64 KiB) between the export and the client.
const CHUNKS_IN_FLIGHT: usize = 4;

/// `?format=ndjson|csv&user_id=…&from=…&to=…`: the CLI's options.
#[derive(Deserialize)]
pub struct ExportQuery {
    format: Option<String>,
    user_id: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

impl ExportQuery {
    pub fn request(self, site_id: u32) -> Result<export::Request, AdminError> {
        let format = match self.format.as_deref().map(str::trim) {
            None | Some("") => Format::Ndjson,
            Some(f) => f
                .parse()
                .map_err(|e| AdminError::Usage(format!("format={e}")))?,
        };
        let bound = |t: Option<String>| {
            t.filter(|t| !t.trim().is_empty())
                .as_deref()
                .map(export::parse_bound)
                .transpose()
        };
        Ok(export::Request {
            site_id,
            user_id: self.user_id.filter(|u| !u.is_empty()),
            from: bound(self.from)?,
            to: bound(self.to)?,
            format,
            progress: false,
        })
    }
}

/// The export's end of the channel: each chunk waits for room.
struct ChannelSink(mpsc::Sender<Result<Bytes, AdminError>>);

impl Sink for ChannelSink {
    async fn write(&mut self, chunk: Vec<u8>) -> Result<(), AdminError> {
        self.0
            .send(Ok(Bytes::from(chunk)))
            .await
            .map_err(|_| AdminError::Usage("the client stopped reading the export".into()))
    }
}

/// The export as a response. An error before the first chunk (ClickHouse unreachable, a
/// bad statement) is returned as an error, for the caller to answer as a page or JSON;
/// one after it ends the body early, so the client sees a failed download, never a
/// short file that looks complete.
pub async fn response(db: Db, req: export::Request) -> Result<Response, AdminError> {
    let (tx, mut rx) = mpsc::channel(CHUNKS_IN_FLIGHT);
    let (site_id, format) = (req.site_id, req.format);
    let filename = match req.user_id {
        Some(_) => format!("rivulet-site-{site_id}-user-events.{}", format.extension()),
        None => format!("rivulet-site-{site_id}-events.{}", format.extension()),
    };
    tokio::spawn(async move {
        let mut sink = ChannelSink(tx);
        match export::export(&db, &req, &mut sink).await {
            Ok(events) => tracing::info!(site_id, events, "export downloaded"),
            Err(_) if sink.0.is_closed() => {
                tracing::info!(site_id, "export download stopped by the client")
            }
            Err(e) => {
                tracing::warn!(site_id, error = %e, "export failed");
                let _ = sink.0.send(Err(e)).await;
            }
        }
    });
    let first = match rx.recv().await {
        Some(Err(e)) => return Err(e),
        first => first,
    };
    let rest = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
    let body = Body::from_stream(futures::stream::iter(first).chain(rest));
    Ok((
        [
            (header::CONTENT_TYPE, format.content_type().to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{filename}\""),
            ),
        ],
        body,
    )
        .into_response())
}
