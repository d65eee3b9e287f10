//! smartctl's `--scan-open --json` and `--json -a` parsers (NVMe and ATA) on arbitrary text, with
//! arbitrary stderr. Fail with a message naming the command, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wattflip_drives::smartctl::{parse_report, parse_scan};

const COMMAND: &str = "smartctl --json -a /dev/fuzz";

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // An optional stderr after a NUL byte: the envelope check reads both.
    let (stdout, stderr) = text.split_once('\0').unwrap_or((text, ""));
    if let Err(e) = parse_scan(stdout, stderr, COMMAND) {
        assert!(e.to_string().contains(COMMAND), "error does not name the command: {e}");
    }
    if let Err(e) = parse_report(stdout, stderr, COMMAND) {
        assert!(e.to_string().contains(COMMAND), "error does not name the command: {e}");
    }
});
