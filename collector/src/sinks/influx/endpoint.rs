//! The InfluxDB write endpoint the writer posts to: the request (URL, auth, gzip), what each
//! answer means for the writer ([`PostError`]), creating a missing database, and the one question a
//! partial write needs answered (`SHOW TAG VALUES`, `partial.rs`). To support another store that
//! speaks line protocol, add an `InfluxApi` variant and its URL and auth here.

use crate::sinks::influx::config::{InfluxApi, InfluxConfig};
use crate::sinks::influx::partial::{show_values_query, values_in};
use std::collections::HashSet;
use std::io::Write as _;
use std::time::Duration;

pub(crate) struct Endpoint {
    pub(crate) cfg: InfluxConfig,
    pub(crate) client: reqwest::Client,
}

pub(crate) enum PostError {
    /// Worth retrying after a pause (network, 5xx, 429, 401/403, 404 after creation failed).
    Retry { reason: String, after: Option<Duration> },
    /// The database is missing: create it, then retry at once.
    NoDatabase,
    /// The body is larger than the server accepts: split it.
    TooLarge,
    /// Bad data (400): InfluxDB's answer, which names some of the lines it refused.
    Rejected { body: String },
}

impl Endpoint {
    fn write_request(&self, body: Vec<u8>) -> reqwest::RequestBuilder {
        let c = &self.cfg;
        let mut req = match c.api {
            // 1.x spells nanosecond precision `n`; `ns` is also accepted, `us` is silently wrong.
            // With retention the policy is named: a missing one fails the write (and is created).
            InfluxApi::V1 => self.client.post(format!("{}/write", c.url)).query(&[("db", c.database.as_str()), ("precision", "n")]).query(&c.raw_rp()),
            InfluxApi::V2 => {
                self.client.post(format!("{}/api/v2/write", c.url)).query(&[("org", c.org.as_str()), ("bucket", c.bucket.as_str()), ("precision", "ns")])
            }
        };
        req = self.auth(req);
        if c.gzip {
            req = req.header("Content-Encoding", "gzip");
        }
        req.header("Content-Type", "text/plain; charset=utf-8").body(body)
    }

    fn auth(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let c = &self.cfg;
        match (&c.api, &c.secret) {
            (InfluxApi::V2, Some(t)) => req.header("Authorization", format!("Token {}", t.0)),
            (InfluxApi::V1, Some(p)) if !c.username.is_empty() => req.basic_auth(&c.username, Some(&p.0)),
            _ => req,
        }
    }

    fn encode(&self, lines: &[&str]) -> Vec<u8> {
        let plain: String = lines.concat();
        if !self.cfg.gzip {
            return plain.into_bytes();
        }
        let mut enc = flate2::write::GzEncoder::new(Vec::with_capacity(plain.len() / 4), flate2::Compression::fast());
        // Writing to a Vec cannot fail.
        let _ = enc.write_all(plain.as_bytes());
        enc.finish().unwrap_or_default()
    }

    pub(crate) async fn post(&self, lines: &[&str]) -> Result<(), PostError> {
        let resp = self
            .write_request(self.encode(lines))
            .send()
            .await
            .map_err(|e| PostError::Retry { reason: format!("cannot reach InfluxDB at {}: {}", self.cfg.url, without_url(e)), after: None })?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok()).map(Duration::from_secs);
        let body = resp.text().await.unwrap_or_default();
        let body = body.trim();
        match status.as_u16() {
            400 | 422 => Err(PostError::Rejected { body: body.to_string() }),
            404 if body.contains("database not found") => Err(PostError::NoDatabase),
            404 | 500 if body.contains("retention policy not found") => Err(PostError::NoDatabase),
            413 => Err(PostError::TooLarge),
            s => Err(PostError::Retry { reason: format!("InfluxDB answered {s}: {body}"), after: retry_after }),
        }
    }

    /// Creates the database, and with `retention` set its retention policies.
    pub(crate) async fn create_database(&self) -> Result<(), String> {
        let c = &self.cfg;
        for (q, may_fail) in c.setup_statements() {
            let req = self.auth(self.client.post(format!("{}/query", c.url)).query(&[("q", q.as_str())]));
            let resp = req.send().await.map_err(without_url)?;
            let status = resp.status();
            let body = resp.text().await.unwrap_or_default();
            let failed = !status.is_success() || body.contains("\"error\"");
            if failed && !may_fail {
                return Err(format!("InfluxDB answered {status} to {q}: {}", body.trim()));
            }
        }
        Ok(())
    }

    /// Which of `values` of tag `key` on `measurement` InfluxDB holds (1,000 values a query).
    pub(crate) async fn held_values(&self, measurement: &str, key: &str, values: &HashSet<String>) -> Result<HashSet<String>, String> {
        let c = &self.cfg;
        let mut held = HashSet::new();
        let all: Vec<&String> = values.iter().collect();
        for part in all.chunks(1000) {
            let part: HashSet<String> = part.iter().map(|v| v.to_string()).collect();
            let q = show_values_query(measurement, key, &part);
            let req = self.auth(self.client.post(format!("{}/query", c.url)).query(&[("db", c.database.as_str()), ("q", q.as_str())]));
            let resp = req.send().await.map_err(without_url)?;
            let status = resp.status();
            let body = resp.text().await.map_err(without_url)?;
            let answer: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("InfluxDB's answer to {q} is not JSON: {e}"))?;
            if !status.is_success() || answer.pointer("/results/0/error").is_some() {
                return Err(format!("InfluxDB answered {status} to {q}: {answer}"));
            }
            held.extend(values_in(&answer));
        }
        Ok(held)
    }
}

/// reqwest errors print the URL; ours carry no credentials, but keep messages short and stable.
pub(crate) fn without_url(e: reqwest::Error) -> String {
    wattflip_infra::cli::error_chain(&e.without_url())
}
