//! A scripted HTTP/1.1 server on 127.0.0.1 for writer tests: answers each request with the next
//! scripted (status, body) and records what it received (gzip bodies inflated).

use std::io::Read as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[derive(Debug, Clone)]
pub struct Received {
    pub request_line: String,
    pub body: String,
}

pub struct FakeInflux {
    pub url: String,
    pub received: Arc<Mutex<Vec<Received>>>,
    /// The most requests it was answering at once.
    pub most_in_flight: Arc<AtomicUsize>,
}

pub async fn start(script: Vec<(u16, &'static str)>) -> FakeInflux {
    start_slow(script, Duration::ZERO).await
}

/// Like [`start`], taking `delay` to answer each request (a busy InfluxDB).
pub async fn start_slow(script: Vec<(u16, &'static str)>, delay: Duration) -> FakeInflux {
    let in_flight = Arc::new(AtomicUsize::new(0));
    let most_in_flight = Arc::new(AtomicUsize::new(0));
    let (now, most) = (in_flight.clone(), most_in_flight.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Vec::new()));
    let script = Arc::new(Mutex::new(std::collections::VecDeque::from(script)));
    let rec = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            let rec = rec.clone();
            let script = script.clone();
            let (now, most) = (now.clone(), most.clone());
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut r = BufReader::new(r);
                loop {
                    let mut request_line = String::new();
                    if r.read_line(&mut request_line).await.unwrap_or(0) == 0 {
                        return;
                    }
                    let mut len = 0usize;
                    let mut gzip = false;
                    loop {
                        let mut h = String::new();
                        r.read_line(&mut h).await.unwrap();
                        let h = h.trim_end().to_ascii_lowercase();
                        if h.is_empty() {
                            break;
                        }
                        if let Some(v) = h.strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap();
                        }
                        if h == "content-encoding: gzip" {
                            gzip = true;
                        }
                    }
                    let mut body = vec![0u8; len];
                    r.read_exact(&mut body).await.unwrap();
                    let body = if gzip {
                        let mut s = String::new();
                        flate2::read::GzDecoder::new(&body[..]).read_to_string(&mut s).unwrap();
                        s
                    } else {
                        String::from_utf8(body).unwrap()
                    };
                    let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    tokio::time::sleep(delay).await;
                    now.fetch_sub(1, Ordering::SeqCst);
                    rec.lock().unwrap().push(Received { request_line: request_line.trim_end().into(), body });
                    let (status, text) = script.lock().unwrap().pop_front().unwrap_or((204, ""));
                    let resp = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\nContent-Type: application/json\r\n\r\n{text}", text.len());
                    if w.write_all(resp.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    FakeInflux { url, received, most_in_flight }
}
