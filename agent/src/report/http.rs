//! A blocking HTTP/1.1 GET for `report --influx-url` (InfluxDB's `/query`), on the hyper client
//! that tonic already builds: reqwest brought 28 crates of its own (url, idna and the ICU tables,
//! tower-http) to the newcomer's first build for this one request (docs/benchmarks.md). Plain
//! HTTP only, like the request it replaces: InfluxDB is read inside the fleet. Another request
//! kind is a method here.

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::time::Duration;
use wattflip_infra::cli::error_chain;

/// Why a request got no answer: the URL, the connection, the time limit.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("`{url}` is not an http:// URL this client can request: {detail}")]
    Url { url: String, detail: String },
    #[error("no runtime for the request: {0}")]
    Runtime(std::io::Error),
    #[error("{0}")]
    Request(String),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

/// A client that waits at most `timeout` for each whole answer.
pub struct Http {
    rt: tokio::runtime::Runtime,
    client: Client<HttpConnector, Empty<Bytes>>,
    timeout: Duration,
}

impl Http {
    pub fn new(timeout: Duration) -> Result<Http, HttpError> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(HttpError::Runtime)?;
        let client = Client::builder(TokioExecutor::new()).build_http();
        Ok(Http { rt, client, timeout })
    }

    /// GET `url` with the query parameters `params` (percent-encoded): the status and the body.
    pub fn get(&self, url: &str, params: &[(&str, &str)]) -> Result<(u16, String), HttpError> {
        let enc = |s: &str| percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string();
        let query: Vec<String> = params.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect();
        let full = format!("{url}?{}", query.join("&"));
        let uri: hyper::Uri = full.parse().map_err(|e: hyper::http::uri::InvalidUri| HttpError::Url { url: url.into(), detail: e.to_string() })?;
        if uri.scheme_str() != Some("http") {
            return Err(HttpError::Url { url: url.into(), detail: "only http:// is supported (InfluxDB inside the fleet, no TLS)".into() });
        }
        self.rt.block_on(async {
            let answer = async {
                let resp = self.client.get(uri).await.map_err(|e| HttpError::Request(error_chain(&e)))?;
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await.map_err(|e| HttpError::Request(error_chain(&e)))?.to_bytes();
                Ok((status, String::from_utf8_lossy(&body).into_owned()))
            };
            tokio::time::timeout(self.timeout, answer).await.map_err(|_| HttpError::Timeout(self.timeout))?
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A one-request server on a real socket: answers `answer` and returns the request line.
    fn serve_once(answer: &'static str) -> (String, std::thread::JoinHandle<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap();
            s.write_all(answer.as_bytes()).unwrap();
            String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_string()
        });
        (url, handle)
    }

    #[test]
    fn a_query_goes_out_percent_encoded_and_its_status_and_body_come_back() {
        let (url, server) = serve_once("HTTP/1.1 400 Bad Request\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{\"error\":\"nope\"}\n");
        let http = Http::new(Duration::from_secs(10)).unwrap();
        let (status, body) = http.get(&format!("{url}/query"), &[("db", "wf"), ("q", "SELECT * FROM \"p\" WHERE h = 'a b'")]).unwrap();
        assert_eq!((status, body.as_str()), (400, "{\"error\":\"nope\"}\n"));
        assert_eq!(server.join().unwrap(), "GET /query?db=wf&q=SELECT%20%2A%20FROM%20%22p%22%20WHERE%20h%20%3D%20%27a%20b%27 HTTP/1.1");
    }

    #[test]
    fn https_and_garbage_are_refused_by_name_and_a_silent_server_times_out() {
        let http = Http::new(Duration::from_millis(300)).unwrap();
        let e = http.get("https://influx:8086/query", &[]).unwrap_err().to_string();
        assert_eq!(
            e,
            "`https://influx:8086/query` is not an http:// URL this client can request: only http:// is supported (InfluxDB inside the fleet, no TLS)"
        );
        assert!(matches!(http.get("not a url", &[]), Err(HttpError::Url { .. })));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/query", listener.local_addr().unwrap());
        assert!(matches!(http.get(&url, &[]), Err(HttpError::Timeout(_))));
        drop(listener);
    }
}
