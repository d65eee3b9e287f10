//! The connection limit's accounting: an evicted connection counts as closing until its IO drops,
//! and while [`CLOSING_MAX`] are closing no new connection is accepted.

use super::*;
use std::task::Waker;

/// A connection from `port` admitted and its IO polled once, as its task does (only a polled
/// connection, whose waker is registered, can be evicted); `None` when refused.
fn connect(conns: &Arc<Conns>, port: u16) -> Option<Guarded<tokio::io::DuplexStream>> {
    let peer = SocketAddr::from(([127, 0, 0, 1], port));
    let conn = conns.admit(peer)?;
    let (io, _client) = tokio::io::duplex(64);
    let mut guarded = Guarded::new(io, peer, conn, conns.clone());
    let mut buf = [0u8; 1];
    let _ = Pin::new(&mut guarded).poll_read(&mut Context::from_waker(Waker::noop()), &mut ReadBuf::new(&mut buf));
    Some(guarded)
}

#[tokio::test]
async fn evicted_connections_count_until_their_io_drops_and_hold_back_accepting() {
    let conns = Conns::new(1, Duration::from_secs(60), Arc::new(IngestStats::default()));
    let mut last = connect(&conns, 10_000).expect("the first connection");
    let mut evicted = Vec::new();
    for port in 10_001..10_001 + CLOSING_MAX as u16 {
        let next = connect(&conns, port).expect("the idle connection makes room");
        evicted.push(std::mem::replace(&mut last, next));
    }
    assert_eq!((conns.len(), conns.closing()), (1, CLOSING_MAX));
    assert!(tokio::time::timeout(Duration::from_millis(300), conns.room()).await.is_err(), "no room while 16 are closing");
    drop(evicted.pop());
    assert_eq!(conns.closing(), CLOSING_MAX - 1);
    tokio::time::timeout(Duration::from_secs(1), conns.room()).await.expect("room once one has closed");
    drop(evicted);
    drop(last);
    assert_eq!((conns.len(), conns.closing()), (0, 0));
}
