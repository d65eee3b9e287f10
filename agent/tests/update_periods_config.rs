//! Issue 37: `[sources.update_periods]` declares how often a zone's value changes where sysfs does
//! not say; the probe uses it before measuring one. Each entry is checked (a duration in
//! 100µs..=60s) and a bad one is reported at its dotted key with the other problems of the file.

// Integration tests and their helpers: a panic with a message is the test's failure report
// (clippy.toml's allow-*-in-tests covers #[test] functions only, not the helpers they call).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;
use wattflip_agent::config::Config;

const TLS: &str = "[tls]\ninsecure_plaintext_loopback_only = true\n";

#[test]
fn declared_update_periods_are_read_by_zone_and_checked() {
    let text = format!("[sources]\nsysfs_root = \"/tmp/sys\"\n[sources.update_periods]\n\"pmbus-i2c-3-58/pin\" = \"100ms\"\n\"ipmi:dcmi\" = \"1s\"\n{TLS}");
    let c = Config::from_str(Path::new("agent.toml"), &text).unwrap();
    assert_eq!(c.kinds.update_period_of("hwmon", "pmbus-i2c-3-58/pin"), Some(Duration::from_millis(100)));
    assert_eq!(c.kinds.update_period_of("ipmi", "dcmi"), Some(Duration::from_secs(1)));
    assert_eq!(c.kinds.update_period_of("hwmon", "ina226/power1"), None);
    let bad = format!("[sources]\n[sources.update_periods]\n\"a\" = \"10ns\"\n\"b\" = \"soon\"\n{TLS}");
    let e = Config::from_str(Path::new("agent.toml"), &bad).unwrap_err().to_string();
    assert!(e.contains("sources.update_periods.a") && e.contains("`10ns` is outside 100us..=1m"), "{e}");
    assert!(e.contains("sources.update_periods.b"), "{e}");
}
