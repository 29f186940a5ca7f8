//! Shutdown triggers shared by the services.

/// Resolves on SIGTERM or Ctrl-C, or — when `RIVULET_STDIN_LIFELINE=1` — when stdin
/// closes, so that a test harness that dies never leaves its services behind.
pub async fn signal() {
    let lifeline = async {
        if std::env::var("RIVULET_STDIN_LIFELINE").as_deref() == Ok("1") {
            // A plain thread, not spawn_blocking: the runtime would wait for a blocked
            // read at shutdown, while a thread simply ends with the process.
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            std::thread::spawn(move || {
                let mut sink = [0u8; 64];
                while matches!(std::io::Read::read(&mut std::io::stdin(), &mut sink), Ok(n) if n > 0)
                {
                }
                let _ = tx.send(());
            });
            let _ = rx.await;
        } else {
            std::future::pending::<()>().await
        }
    };
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {}, _ = lifeline => {} }
}
