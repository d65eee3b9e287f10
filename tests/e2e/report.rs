//! The HTML reports in a real browser: the local report of a real `probe --quick` and the report
//! of the same host read back from InfluxDB (`report --influx-url`) after a real fleet run, both
//! loaded by headless Chromium (Debian's `chromium`), which must render them without errors and
//! with every chart drawn. Screenshots are kept in the target dir for a human to look at.

use std::path::{Path, PathBuf};
use std::process::Command;
use wattflip_e2e::fleet::{Fleet, HOSTS, SEED_MODEL, SEED_NAMESPACE, SEED_PATTERNS, SEED_SIZES_KIB};
use wattflip_e2e::*;

fn chromium() -> PathBuf {
    for p in ["/usr/bin/chromium", "/usr/local/bin/chromium"] {
        if Path::new(p).exists() {
            return PathBuf::from(p);
        }
    }
    panic!("chromium not found: install Debian's `chromium` package (the README's test command, tests/run.sh, does this)");
}

/// Headless Chromium on a local file with `mode` (`--dump-dom` or `--screenshot=…`); returns
/// stdout and stderr. Chromium exits 0 even on page errors, so callers check the output.
fn chromium_run(page: &Path, mode: &str) -> (String, String) {
    let profile = tempfile::tempdir().expect("tempdir");
    let out = Command::new(chromium())
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"])
        .args(["--disable-background-networking", "--disable-component-update", "--disable-sync"])
        .args(["--enable-logging=stderr", "--v=0", "--window-size=1200,3600", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(mode)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium {mode} {} failed: {}", page.display(), String::from_utf8_lossy(&out.stderr));
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Loads `page` in Chromium: asserts it rendered to the end without script errors, that it has
/// exactly `charts` SVG charts each with a drawn line of at least two points, and saves a
/// screenshot under the target dir. Returns the DOM.
fn check_in_browser(page: &Path, charts: usize, shot: &str) -> String {
    let (dom, log) = chromium_run(page, "--dump-dom");
    assert!(dom.contains("data-rendered=\"wattflip\""), "{}: the page did not render to its end marker:\n{dom}", page.display());
    assert!(!log.contains("\"Uncaught"), "{}: script errors in the console:\n{log}", page.display());
    let svgs: Vec<&str> = dom.split("<svg").skip(1).map(|s| s.split("</svg>").next().unwrap_or_default()).collect();
    assert_eq!(svgs.len(), charts, "{}: SVG charts in the DOM", page.display());
    for (i, svg) in svgs.iter().enumerate() {
        let drawn = svg.split("<polyline").skip(1).any(|p| {
            let points = p.split("points=\"").nth(1).and_then(|x| x.split('"').next()).unwrap_or_default();
            points.split_whitespace().count() >= 2
        });
        assert!(drawn, "{}: chart {i} has no line with two points:\n{svg}", page.display());
    }
    let png = Path::new(env!("CARGO_TARGET_TMPDIR")).join(shot);
    let _ = std::fs::remove_file(&png);
    chromium_run(page, &format!("--screenshot={}", png.display()));
    let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("no screenshot {}: {e}", png.display()));
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.len() > 20_000, "{}: not a screenshot of a page", png.display());
    eprintln!("screenshot: {}", png.display());
    dom
}

#[test]
fn probe_reports_local_and_from_influx_render_in_chromium() {
    let fleet = Fleet::start("wf_report");
    let host = HOSTS[0].0;

    // The local report of the real probe: Granularity only (quick). The probe ran with the first
    // host's config, whose fixture RAPL and hwmon sources it recorded: response time and
    // throughput, energy per IO, J/MB and background tails per run, and the power timeline.
    let local = fleet.probe_out.join("report.html");
    let dom = check_in_browser(&local, 6, "report-local.png");
    assert!(!dom.contains("No power samples were aligned with this probe"), "local report: power recorded");
    assert!(dom.contains("Power during the probe"), "local report: power timeline");

    // The same host's report from InfluxDB.
    let out = tempfile::tempdir().expect("tempdir");
    let page = out.path().join("report.html");
    let run = Command::new(bin("wattflip-agent", "wattflip-agent"))
        .args(["report", "--influx-url", &fleet.influx.url, "--influx-db", &fleet.db, "--host", host, "--since", "1h", "-o"])
        .arg(&page)
        .output()
        .expect("run wattflip-agent report");
    assert!(run.status.success(), "report --influx-url failed: {}", String::from_utf8_lossy(&run.stderr));
    let html = std::fs::read_to_string(&page).expect("report written");

    // Runs: every probe_run of the host (real ones and the seeded energy runs), per device.
    let window = format!("time >= {} AND time <= {}", fleet.started_ns - 60_000_000_000, fleet.ended_ns);
    let count = |field: &str, filter: &str| {
        let rows = fleet.influx.rows(&fleet.db, &format!("SELECT count(\"{field}\") FROM \"probe_run\" WHERE \"host\" = '{host}' AND {filter} AND {window}"));
        rows.first().and_then(|r| r[1].as_u64()).unwrap_or(0)
    };
    let real = count("mean_us", "\"device\" = 'file:scratch.dat'");
    let seeded_granularity = (SEED_PATTERNS.len() * SEED_SIZES_KIB.len()) as u64;
    assert_eq!(count("mean_us", &format!("\"device\" = '{SEED_NAMESPACE}' AND \"bench\" = 'granularity'")), seeded_granularity);
    // 3 states × 2 patterns of governor sweep, 3 ladders × 10 levels.
    assert_eq!(count("mean_us", &format!("\"device\" = '{SEED_NAMESPACE}'")), seeded_granularity + 6 + 30);
    assert_eq!(real, 12, "the quick plan measures SR, RR, SW, RW at three sizes");
    let all = count("mean_us", "\"host\" =~ /.*/");
    let with_energy = count("energy_j", "\"host\" =~ /.*/");
    assert_eq!(all, real + seeded_granularity + 36);
    assert!(with_energy >= seeded_granularity + 36, "the seeded runs and the recorded probe carry energy");
    assert!(html.contains(&format!("<tr><th class=l>runs</th><td class=l>{all} measured ({with_energy} with energy), 0 unsupported</td></tr>")), "{html}");
    assert!(html.contains("<h2>Device file:scratch.dat (file)</h2>"));
    assert!(html.contains(&format!("<h2>Device {SEED_NAMESPACE} ({SEED_MODEL})</h2>")));
    // Background work from the seeded fields: SW's tail grows with the IO size (GWP), RW's is small.
    assert!(html.contains("<tr><td class=l>granularity/SW</td><td class=l>GWP</td><td>3</td><td>1.600</td>"), "{html}");
    assert!(html.contains("<tr><td class=l>granularity/RW</td><td class=l>S</td><td>3</td><td>0.600</td>"), "{html}");
    // Power of the probe window: one line per channel of the host (7 RAPL zones, 1 hwmon meter).
    let channels = fleet
        .influx
        .series(&fleet.db, &format!("SELECT count(\"watts\") FROM \"power\" WHERE \"host\" = '{host}' AND {window} GROUP BY \"source\", \"zone\", \"scope\""));
    assert_eq!(channels.len(), 8);
    assert!(html.contains("<tr><th class=l>power channels</th><td class=l>8</td></tr>"), "{html}");
    assert!(html.contains("<tr><td class=l>rapl psys (psys)</td>"));
    // Charts, per device and benchmark: response time and throughput, plus energy per IO and
    // J/MB where runs have energy, plus the background tail where they have one. The probed file
    // (recorded power, so energy and tails): 5; the seeded drive's Granularity runs: 5, its
    // governor sweep and load ladder (energy, no tails): 4 each; then the power timeline.
    let _ = std::fs::copy(&page, Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-influx.html"));
    check_in_browser(&page, 5 + 5 + 4 + 4 + 1, "report-influx.png");
}

#[test]
fn report_from_influx_names_what_is_missing() {
    let influx = Influx::start();
    let agent = bin("wattflip-agent", "wattflip-agent");
    let run = |args: &[&str]| {
        let out = Command::new(&agent).arg("report").args(args).args(["-o", "/dev/null"]).output().expect("run report");
        assert_eq!(out.status.code(), Some(1), "{args:?} must fail");
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    };
    influx.query("", "CREATE DATABASE wf_empty");
    assert_eq!(
        run(&["--influx-url", &influx.url, "--influx-db", "wf_empty", "--host", "nobody", "--since", "2h"]),
        format!(
            "wattflip-agent: no probe_run for host `nobody` in database `wf_empty` at {} in the last 2h: run `wattflip-agent probe --collector URL` \
             on that host, widen --since, or check --host (the agent id)",
            influx.url
        )
    );
    let e = run(&["--influx-url", &influx.url, "--influx-db", "nope", "--host", "h"]);
    assert!(e.starts_with(&format!("wattflip-agent: InfluxDB at {} refused query `SELECT * FROM \"probe_run\" WHERE \"host\" = 'h' AND time > now() - 24h`: database not found: nope; check --influx-db", influx.url)), "{e}");
}

/// Issue 8: `report --in DIR` on the folder of a probe that recorded power must give the page the
/// probe wrote, energy, background work and power timeline included, not the bare statistics.
#[test]
fn report_in_regenerates_the_probe_page_with_energy_and_power() {
    let dir = tempfile::Builder::new().prefix("wf-report-in-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let (_sys_tmp, sys) = sysfs_tree(&["ina3221"]);
    let cfg = agent_config(dir.path(), &format!("agent_id = \"report-in\"\n[sources]\nsysfs_root = \"{}\"\n{}", sys.display(), pki().agent_tls("report-in")));
    let out = dir.path().join("out");
    let agent = bin("wattflip-agent", "wattflip-agent");
    let probe = Command::new(&agent)
        .args(["probe", "--quick", "--size", "128MiB", "--target"])
        .arg(dir.path().join("s.dat"))
        .arg("--out")
        .arg(&out)
        .arg("--config")
        .arg(&cfg)
        .args(["--power-zone", "ina3221-0-0041/SSD 12V", "--power-interval", "1ms", "--idle", "300ms", "--tail", "300ms"])
        .output()
        .expect("run wattflip-agent probe");
    assert!(probe.status.success(), "probe failed: {}{}", String::from_utf8_lossy(&probe.stdout), String::from_utf8_lossy(&probe.stderr));
    assert!(out.join("energy.jsonl").is_file() && out.join("power.csv").is_file(), "the probe recorded energy and power");

    let page = dir.path().join("again.html");
    let run = Command::new(&agent).args(["report", "--in"]).arg(&out).arg("-o").arg(&page).output().expect("run wattflip-agent report");
    assert!(run.status.success(), "report --in failed: {}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(String::from_utf8_lossy(&run.stdout), format!("wrote {}\n", page.display()));
    let html = std::fs::read_to_string(&page).expect("report written");
    // One reading and rendering for both: the regenerated page is the probe's, byte for byte.
    assert_eq!(html, std::fs::read_to_string(out.join("report.html")).expect("probe's report.html"), "report --in differs from the probe's page");

    // Self-contained: nothing to fetch, no scripts (the SVG namespace is an identifier, not a fetch).
    for external in [" src=", " href=", "xlink:href", "url(", "@import", "<script", "<link", "<img", "<iframe"] {
        assert!(!html.contains(external), "report --in page references something external: `{external}`");
    }
    assert_eq!(html.matches("http").count(), html.matches("http://www.w3.org/2000/svg").count(), "only SVG namespaces name a URL");

    // The sections the bare statistics lacked: energy per run, background work, the timeline.
    let _ = std::fs::copy(&page, Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-in.html"));
    assert_eq!(html.matches("<h2>").count(), 5, "device, power, energy, background work, runs (every quick run is supported on a file)");
    for section in ["<h2>Energy</h2>\n<h3>file:s.dat</h3>", "<h2>Background work</h2>\n<h3>file:s.dat</h3>", "<h2>Power during the probe"] {
        assert!(html.contains(section), "missing `{section}` in {}", page.display());
    }
    assert!(!html.contains("no power source was aligned with these runs"), "energy was read from energy.jsonl");
    assert!(!html.contains("No power samples were aligned with this probe"), "power was read from power.csv");
    assert!(html.contains("<tr><td class=l>hwmon:ina3221-0-0041/SSD 12V (rail)</td>"), "the power channel of power.csv");
    // Granularity: response time, throughput, energy per IO, J/MB, background tail; then power.
    check_in_browser(&page, 6, "report-in.png");
}
