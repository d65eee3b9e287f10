//! IPMI DCMI whole-system power through `ipmitool dcmi power reading` (hardware.md §3.1), run
//! through the drives crate's `CommandRunner` (deadline, child killed on timeout, `LC_ALL=C`).
//! BMCs update at most about once per second, so this source reads at most once per `min_interval`.
//! "Not supported" (a BMC without DCMI, a host without the IPMI driver) is a distinct result at
//! discovery, never a zero. The FreeIPMI layout is parsed too, for imported outputs.

use super::{Discovered, PowerReading, PowerSensor, SensorError};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use wattflip_drives::{CommandError, CommandRunner};
use wattflip_proto::units::Watts;
use wattflip_proto::v1;

/// One DCMI power reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcmiReading {
    pub current: Watts,
    pub minimum: Option<Watts>,
    pub maximum: Option<Watts>,
    pub average: Option<Watts>,
    /// False when the BMC says the reading state is deactivated: the numbers are then meaningless.
    pub active: bool,
}

/// Why DCMI power cannot be used on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DcmiError {
    #[error("the BMC does not support DCMI power readings ({0})")]
    NotSupported(String),
    #[error("no IPMI device: load the ipmi_si and ipmi_devintf modules, or this host has no BMC ({0})")]
    NoDevice(String),
    #[error("power reading state is deactivated on the BMC; enable it with `ipmitool dcmi power activate`")]
    Deactivated,
    #[error("cannot parse the DCMI output: no `Instantaneous power reading` or `Current Power` line in {0:?}")]
    Unparsable(String),
}

fn watts_after_colon(line: &str) -> Option<f64> {
    let v = line.split_once(':')?.1.trim();
    let num = v.split_whitespace().next()?;
    let unit = v.split_whitespace().nth(1).unwrap_or("");
    // FreeIPMI mixes "Watts" and "watts": compare case-insensitively.
    if unit.eq_ignore_ascii_case("watts") {
        num.parse().ok()
    } else {
        None
    }
}

/// Parses ipmitool's or FreeIPMI's text.
pub fn parse(stdout: &str) -> Result<DcmiReading, DcmiError> {
    let mut current = None;
    let (mut minimum, mut maximum, mut average) = (None, None, None);
    let mut active = true;
    for line in stdout.lines() {
        let key = line.split(':').next().unwrap_or("").trim().to_ascii_lowercase();
        match key.as_str() {
            "instantaneous power reading" | "current power" => current = watts_after_colon(line),
            k if k.starts_with("minimum") => minimum = watts_after_colon(line),
            k if k.starts_with("maximum") => maximum = watts_after_colon(line),
            k if k.starts_with("average") => average = watts_after_colon(line),
            "power reading state is" | "power measurement" => {
                let v = line.split_once(':').map(|x| x.1.trim().to_ascii_lowercase()).unwrap_or_default();
                active = v == "activated" || v == "active";
            }
            _ => {}
        }
    }
    let Some(current) = current else {
        return Err(DcmiError::Unparsable(stdout.chars().take(200).collect()));
    };
    if !active {
        return Err(DcmiError::Deactivated);
    }
    Ok(DcmiReading { current: Watts(current), minimum: minimum.map(Watts), maximum: maximum.map(Watts), average: average.map(Watts), active })
}

/// Classifies a failed call: unsupported and missing-device are distinct from transient failures.
pub fn classify_failure(stderr: &str) -> Option<DcmiError> {
    let l = stderr.to_ascii_lowercase();
    let first = stderr.lines().next().unwrap_or("").trim().to_string();
    if l.contains("invalid command") || l.contains("not supported") || l.contains("dcmi request failed") {
        Some(DcmiError::NotSupported(first))
    } else if l.contains("could not open device") || l.contains("no such file or directory") {
        Some(DcmiError::NoDevice(first))
    } else {
        None
    }
}

pub struct IpmiDcmi {
    runner: Arc<dyn CommandRunner>,
    argv: Vec<String>,
    timeout: Duration,
}

impl IpmiDcmi {
    fn run(&self) -> Result<DcmiReading, SensorError> {
        let path = PathBuf::from(self.argv.join(" "));
        let out = self.runner.run(&self.argv, self.timeout).map_err(|e| SensorError::Command { command: path.display().to_string(), message: e.to_string() })?;
        if !out.exit.success() {
            let msg = match classify_failure(&out.stderr) {
                Some(e) => e.to_string(),
                None => format!("{}: {}", out.exit, out.stderr.trim()),
            };
            return Err(SensorError::Command { command: out.command_line(), message: msg });
        }
        parse(&out.stdout).map_err(|e| SensorError::Command { command: out.command_line(), message: e.to_string() })
    }
}

impl PowerSensor for IpmiDcmi {
    fn describe(&self) -> v1::PowerSource {
        v1::PowerSource {
            source: "ipmi".into(),
            zone: "dcmi/system".into(),
            scope: "wall".into(),
            method: v1::Method::Measured as i32,
            counter: false,
            path: self.argv.join(" "),
            enabled: true,
            note: String::new(),
            shunt_ohms: 0.0,
        }
    }

    fn read(&mut self, _now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
        let r = self.run()?;
        Ok(Some(PowerReading { watts: r.current, joules: None, interval_ns: 0 }))
    }

    fn min_interval(&self) -> Duration {
        Duration::from_secs(1)
    }
}

/// Tries one reading; keeps the source when it works, otherwise says why it is not available.
pub fn discover(runner: Arc<dyn CommandRunner>, program: &str, timeout: Duration, out: &mut Discovered) {
    let argv: Vec<String> = [program, "dcmi", "power", "reading"].iter().map(|s| s.to_string()).collect();
    let sensor = IpmiDcmi { runner: runner.clone(), argv: argv.clone(), timeout };
    match runner.run(&argv, timeout) {
        Err(CommandError::NotFound { .. }) => {
            out.unavailable.push(format!("ipmi: `{program}` is not installed (Debian package ipmitool)"));
        }
        Err(e) => out.unavailable.push(format!("ipmi: {e}")),
        Ok(o) if !o.exit.success() => match classify_failure(&o.stderr) {
            Some(e) => out.unavailable.push(format!("ipmi: {e}")),
            None => out.unavailable.push(format!("ipmi: `{}` failed: {} {}", o.command_line(), o.exit, o.stderr.trim())),
        },
        Ok(o) => match parse(&o.stdout) {
            Ok(_) => out.power.push(Box::new(sensor)),
            Err(e) => out.unavailable.push(format!("ipmi: {e}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ipmi").join(name)).unwrap()
    }

    #[test]
    fn parses_ipmitool_and_freeipmi() {
        let r = parse(&fixture("ipmitool-dcmi-activated.txt")).unwrap();
        assert_eq!(r, DcmiReading { current: Watts(173.0), minimum: Some(Watts(70.0)), maximum: Some(Watts(500.0)), average: Some(Watts(178.0)), active: true });
        let r = parse(&fixture("freeipmi-dcmi-active.txt")).unwrap();
        assert_eq!((r.current, r.minimum, r.maximum), (Watts(164.0), Some(Watts(110.0)), Some(Watts(310.0))));
        assert_eq!(parse(&fixture("ipmitool-dcmi-deactivated.txt")), Err(DcmiError::Deactivated));
        assert!(matches!(parse("garbage"), Err(DcmiError::Unparsable(_))));
    }

    #[test]
    fn failures_are_classified() {
        assert_eq!(
            classify_failure(&fixture("ipmitool-dcmi-invalid-command.stderr")),
            Some(DcmiError::NotSupported("DCMI request failed because: Invalid command (c1)".into()))
        );
        assert!(matches!(classify_failure(&fixture("ipmitool-no-device.stderr")), Some(DcmiError::NoDevice(_))));
        assert_eq!(classify_failure("timeout talking to BMC"), None);
    }

    #[test]
    fn discovery_through_the_runner() {
        use wattflip_drives::fake::ScriptedRunner;
        let argv = ["ipmitool", "dcmi", "power", "reading"];
        let ok = Arc::new(ScriptedRunner::new());
        ok.expect(&argv, 0, &fixture("ipmitool-dcmi-activated.txt"), "");
        ok.expect(&argv, 0, &fixture("ipmitool-dcmi-activated.txt"), "");
        let mut d = Discovered::default();
        discover(ok.clone(), "ipmitool", Duration::from_secs(5), &mut d);
        assert_eq!(d.power.len(), 1);
        assert_eq!(d.power[0].read(0).unwrap().unwrap().watts, Watts(173.0));

        let unsupported = Arc::new(ScriptedRunner::new());
        unsupported.expect(&argv, 1, "", &fixture("ipmitool-dcmi-invalid-command.stderr"));
        let mut d = Discovered::default();
        discover(unsupported, "ipmitool", Duration::from_secs(5), &mut d);
        assert!(d.power.is_empty());
        assert_eq!(d.unavailable, vec!["ipmi: the BMC does not support DCMI power readings (DCMI request failed because: Invalid command (c1))".to_string()]);
    }
}
