//! What the writer tells others about stored lines: [`StoredLines`] is called with the lines of
//! every request InfluxDB acknowledged (the rollups' dirty buckets, `crate::rollup::Dirty`). A
//! trait here so the writer depends on no observer; a new observer implements it and is passed
//! to `writer::spawn_observed`.

pub trait StoredLines: Send + Sync {
    fn stored(&self, lines: &[&str]);
}
