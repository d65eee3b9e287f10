//! Both config parsers on arbitrary text: the agent's `agent.toml` and the collector's
//! `collector.toml`. They must return a config or a `ConfigError` naming keys, never panic; an
//! error's text must name the file it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let file = Path::new("fuzz.toml");
    if let Err(e) = wattflip_agent::config::Config::from_str(file, text) {
        assert!(e.to_string().contains("fuzz.toml"), "agent config error does not name the file: {e}");
    }
    let ov = wattflip_collector::config::Overrides::default();
    if let Err(e) = wattflip_collector::config::Config::from_str(file, text, &ov) {
        assert!(e.to_string().contains("fuzz.toml"), "collector config error does not name the file: {e}");
    }
});
