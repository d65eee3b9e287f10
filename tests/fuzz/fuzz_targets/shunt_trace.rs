//! Shunt-trace import on arbitrary bytes. The first byte picks the path: CSV traces (time, V_shunt)
//! through the streaming parser, or a raw-trace sidecar (JSON or TOML) followed, after a NUL byte,
//! by the raw samples it describes. Beyond "no panic": feeding the same raw bytes in two pieces,
//! split anywhere (even mid-sample), must count exactly the same samples and gaps as in one piece.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use wattflip_energy::trace::FixedRateIntegrator;
use wattflip_energy::{integrate_csv_reader, CsvOptions, ShuntCircuit, Sidecar, SidecarSyntax, TimeUnit};
use wattflip_energy::units::{Nanos, Ohms, Volts};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else { return };
    let path = Path::new("fuzz-trace");
    match mode % 3 {
        0 | 1 => {
            let circuit = ShuntCircuit::new(Ohms(0.1), Volts(5.0)).expect("valid circuit");
            let opts = CsvOptions {
                time_unit: if mode % 3 == 0 { TimeUnit::Seconds } else { TimeUnit::Micros },
                window: Nanos(1 + u64::from(mode) * 1000),
                ..CsvOptions::default()
            };
            if let Ok(s) = integrate_csv_reader(rest, path, circuit, &opts) {
                assert!(s.samples + s.gap_samples > 0, "an accepted trace has samples");
            }
        }
        _ => {
            let Some(nul) = rest.iter().position(|b| *b == 0) else { return };
            let Ok(text) = std::str::from_utf8(&rest[..nul]) else { return };
            let raw = &rest[nul + 1..];
            let syntax = if text.trim_start().starts_with('{') { SidecarSyntax::Json } else { SidecarSyntax::Toml };
            let Ok(sc) = Sidecar::parse(text, syntax, path) else { return };
            let make = || FixedRateIntegrator::new(sc.circuit, sc.format, sc.scale, sc.sample_rate, Nanos(1_000_000));
            let (Ok(mut whole), Ok(mut split)) = (make(), make()) else { return };
            whole.push_bytes(raw);
            let cut = usize::from(mode) * 7 % (raw.len() + 1);
            split.push_bytes(&raw[..cut]);
            split.push_bytes(&raw[cut..]);
            let (a, b) = (whole.finish(sc.start), split.finish(sc.start));
            assert_eq!((a.samples, a.gap_samples), (b.samples, b.gap_samples), "split at {cut} changed the counts");
        }
    }
});
