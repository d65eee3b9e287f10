//! Process plumbing both binaries share: logging to stderr (level from `RUST_LOG`, default
//! `info`), the one rustls crypto provider, and an exit code with the whole error chain printed
//! as `name: error: cause: cause`.

/// Runs a binary's `body` and turns its result into the process exit code.
pub fn main_with<E: std::fmt::Display>(name: &str, body: impl FnOnce() -> Result<(), E>) -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .with_writer(std::io::stderr)
        .init();
    // One rustls provider for the process, installed before anything can touch TLS.
    crate::tls::install_crypto_provider();
    match body() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Completes on SIGINT or SIGTERM (SIGINT only where SIGTERM cannot be watched).
pub async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term.recv() => {},
    }
}

/// An error and its causes as one line, `error: cause: cause` (a library error's `Display` is
/// only its outermost message; hyper's "client error (Connect)" hides the refused connection).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("cannot reach influx:8086")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn the_chain_names_every_cause_in_order() {
        let e = Outer(std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused"));
        assert_eq!(super::error_chain(&e), "cannot reach influx:8086: connection refused");
        assert_eq!(super::error_chain(&std::io::Error::other("alone")), "alone");
    }
}
