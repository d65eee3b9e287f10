//! Counters as rows of a table: a metric's name, its help text and how to read it from a counter
//! struct. The metrics page renders every counter struct from its rows (the sinks' in their
//! `SinkMetrics`, the ingest service's and the rollups' in `service/telemetry.rs`), so a new
//! counter is one row.

use wattflip_infra::telemetry::{Histogram, LabelledCounter, Text};

/// What a row reads.
pub enum Reading<'a> {
    Counter(u64),
    /// A value that goes up and down (shown as a float).
    Gauge(u64),
    /// A counter per label value, and the label's name.
    ByLabel(&'static str, &'a LabelledCounter),
    Histogram(&'a Histogram),
}

/// One metric of the counter struct `S`: its name, its help text and how to read it.
pub type Row<S> = (&'static str, &'static str, for<'a> fn(&'a S) -> Reading<'a>);

/// Appends `rows`, read from `s`, to the page.
pub fn render<S>(t: &mut Text, s: &S, rows: &[Row<S>]) {
    for (name, help, read) in rows {
        match read(s) {
            Reading::Counter(v) => t.counter(name, help, v),
            Reading::Gauge(v) => t.gauge(name, help, v as f64),
            Reading::ByLabel(label, c) => t.labelled_counter(name, help, label, c),
            Reading::Histogram(h) => t.histogram(name, help, h),
        };
    }
}
