//! `wattflip-agent report`: renders the HTML report of a probe result folder (the same page the
//! probe wrote) or of one host's probes read from InfluxDB. A new report source is an arm here
//! that fills `report::model::Report`.

use crate::report::{folder, html, influx};
use anyhow::Context as _;
use std::path::PathBuf;

/// `report --in DIR` or `report --influx-url URL --host AGENT_ID`.
pub fn command(
    input: Option<PathBuf>,
    influx_url: Option<String>,
    influx_db: String,
    host: Option<String>,
    since: String,
    output: PathBuf,
) -> anyhow::Result<()> {
    let page = match (input, influx_url, host) {
        (Some(input), _, _) => {
            // The same reading and rendering as the probe's own report.html, energy and
            // recorded power included.
            let f = folder::read_folder(&input)?;
            folder::render_html(&f.report, f.energy.as_ref(), f.power.as_ref())
        }
        (None, Some(url), Some(host)) => html::render_report(&influx::load(&influx::Source { url, database: influx_db, host, since })?),
        // clap enforces --in or --influx-url with --host.
        _ => anyhow::bail!("give --in DIR, or --influx-url URL with --host AGENT_ID"),
    };
    std::fs::write(&output, page).with_context(|| format!("cannot write {}", output.display()))?;
    println!("wrote {}", output.display());
    Ok(())
}
