//! The PostgreSQL store's own `LISTEN` connection: the replay cache's
//! invalidations arrive on it as notifications (a pooled connection would be
//! recycled under it), on a channel name PostgreSQL keeps whole.

/// The server and, for TLS, the connector the pool uses too.
#[derive(Clone)]
pub(super) struct Listen {
    pub(super) config: tokio_postgres::Config,
    pub(super) tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

type Notifications = std::pin::Pin<Box<dyn futures_util::Stream<Item = ()> + Send>>;

impl Listen {
    /// A new connection that has run `LISTEN channel`, as a stream of its
    /// notifications; it ends when the connection does.
    pub(super) async fn subscribe(self, channel: String) -> Option<Notifications> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let client = match self.tls {
            Some(tls) => {
                let (client, connection) = self.config.connect(tls).await.ok()?;
                tokio::spawn(forward_notifications(connection, tx));
                client
            }
            None => {
                let (client, connection) = self.config.connect(tokio_postgres::NoTls).await.ok()?;
                tokio::spawn(forward_notifications(connection, tx));
                client
            }
        };
        let quoted = channel.replace('"', "\"\"");
        client
            .batch_execute(&format!("LISTEN \"{quoted}\""))
            .await
            .ok()?;
        // The stream owns the client, so the connection lives as long.
        Some(Box::pin(futures_util::stream::unfold(
            (rx, client),
            |(mut rx, client)| async move { rx.recv().await.map(|()| ((), (rx, client))) },
        )))
    }
}

/// Drive `connection`, passing on each notification, until it ends.
async fn forward_notifications<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    notifications: tokio::sync::mpsc::UnboundedSender<()>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
        if let tokio_postgres::AsyncMessage::Notification(_) = message {
            if notifications.send(()).is_err() {
                return;
            }
        }
    }
}

/// A channel name PostgreSQL keeps whole (identifiers are cut at 63 bytes).
pub(super) fn pg_channel(channel: &str) -> String {
    if channel.len() <= 63 {
        return channel.to_owned();
    }
    use sha2::Digest;
    format!(
        "hookgate_{}",
        &hex::encode(sha2::Sha256::digest(channel))[..32]
    )
}
