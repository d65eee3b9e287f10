//! A small InfluxDB 1.x client for the collector's own statements (the rollup recomputes, the
//! retention DDL, the resolution markers): `/query` and `/write` with the sink's credentials. The
//! hot path's writes go through `crate::sinks::influx` instead; a new call is a method here.

use crate::sinks::influx::config::{InfluxApi, InfluxConfig};
use std::time::Duration;

pub(crate) struct Client {
    pub cfg: InfluxConfig,
    http: reqwest::Client,
}

impl Client {
    pub fn new(cfg: InfluxConfig) -> Client {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(120)).build().unwrap_or_else(|_| reqwest::Client::new());
        Client { cfg, http }
    }

    /// Runs one InfluxQL statement (POST, as `SELECT … INTO` and DDL need); the points it wrote.
    pub async fn exec(&self, q: &str) -> Result<u64, String> {
        let v = self.query(self.http.post(format!("{}/query", self.cfg.url)), q).await?;
        Ok(v.pointer("/results/0/series/0/values/0/1").and_then(serde_json::Value::as_u64).unwrap_or(0))
    }

    /// Runs DDL statements in order, each with whether its failure is harmless (a CREATE of
    /// what exists); the first other failure is returned.
    pub async fn setup(&self, statements: Vec<(String, bool)>) -> Result<(), String> {
        for (q, may_fail) in statements {
            if let Err(e) = self.exec(&q).await {
                if !may_fail {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// The rows of the first series of a read-only statement (GET).
    pub async fn rows(&self, q: &str) -> Result<Vec<Vec<serde_json::Value>>, String> {
        let v = self.query(self.http.get(format!("{}/query", self.cfg.url)), q).await?;
        let rows = v.pointer("/results/0/series/0/values").and_then(|r| r.as_array()).cloned().unwrap_or_default();
        Ok(rows.into_iter().filter_map(|r| r.as_array().cloned()).collect())
    }

    /// Every series of a read-only statement: its tags and rows.
    pub async fn query_series(&self, q: &str) -> Result<Vec<(std::collections::BTreeMap<String, String>, Vec<Vec<serde_json::Value>>)>, String> {
        let v = self.query(self.http.get(format!("{}/query", self.cfg.url)), q).await?;
        let series = v.pointer("/results/0/series").and_then(|r| r.as_array()).cloned().unwrap_or_default();
        Ok(series
            .iter()
            .map(|s| {
                let tags =
                    s.get("tags").and_then(|t| t.as_object()).map(|t| t.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect());
                let rows = s.get("values").and_then(|r| r.as_array()).map(|r| r.iter().filter_map(|r| r.as_array().cloned()).collect());
                (tags.unwrap_or_default(), rows.unwrap_or_default())
            })
            .collect())
    }

    async fn query(&self, req: reqwest::RequestBuilder, q: &str) -> Result<serde_json::Value, String> {
        let c = &self.cfg;
        let req = self.authed(req.query(&[("db", c.database.as_str()), ("q", q), ("epoch", "ns")]));
        let resp = req.send().await.map_err(|e| format!("cannot reach InfluxDB at {}: {}", c.url, e.without_url()))?;
        let status = resp.status();
        let body = resp.text().await.map_err(|e| format!("InfluxDB answered {status}, unreadable: {e}"))?;
        let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| format!("InfluxDB answered {status} without JSON ({e}): {body}"))?;
        if let Some(e) = v.pointer("/results/0/error").or_else(|| v.get("error")) {
            return Err(format!("InfluxDB refused {q}: {}", e.as_str().unwrap_or_default()));
        }
        Ok(v)
    }

    /// Writes line-protocol lines (nanosecond timestamps) into `rp`, or the default policy.
    pub async fn write(&self, lines: String, rp: Option<&str>) -> Result<(), String> {
        let c = &self.cfg;
        let mut req = self.http.post(format!("{}/write", c.url)).query(&[("db", c.database.as_str()), ("precision", "n")]);
        if let Some(rp) = rp {
            req = req.query(&[("rp", rp)]);
        }
        let resp = self.authed(req).body(lines).send().await.map_err(|e| format!("cannot reach InfluxDB at {}: {}", c.url, e.without_url()))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        Err(format!("InfluxDB answered {status} to a write: {}", resp.text().await.unwrap_or_default()))
    }

    /// The 1.x API's basic auth when a user is configured (retention needs `api = "v1"`).
    fn authed(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match (&self.cfg.api, &self.cfg.secret) {
            (InfluxApi::V1, Some(p)) if !self.cfg.username.is_empty() => req.basic_auth(&self.cfg.username, Some(&p.0)),
            _ => req,
        }
    }
}
