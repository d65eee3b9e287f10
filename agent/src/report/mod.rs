//! Human-facing results: the local result folder of a probe (`folder`: report.json, runs.jsonl,
//! line protocol, summary, report.html, energy and power) and one self-contained HTML file with
//! SVG charts (no scripts, no external assets), so it can be mailed or archived. `model` is what a report shows; it is filled from a
//! local probe result (`Report::from_probe`) or from InfluxDB for one host (`influx`), and `html`
//! renders it. A new chart is a function in `html` returning an SVG string.

pub mod efficiency;
pub mod folder;
pub mod html;
mod http;
pub mod influx;
pub mod model;
mod ticks;
