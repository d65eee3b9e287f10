//! The text of `ipmitool dcmi power reading` (and FreeIPMI `ipmi-dcmi`) and of its failures:
//! parsing, the deactivated-reading policy ([`accept`]) and the classification of failures into
//! permanent and transient ([`classify_failure`]), tested on the corpus of real outputs in
//! `tests/fixtures/ipmi/`. A new output layout is a key in [`parse`] and a file in that corpus.

use wattflip_proto::units::Watts;

/// Largest current reading believed from a deactivated BMC: DCMI carries u16 watts and 65535 is a
/// known garbage value; no single host this agent runs on draws more.
pub const MAX_PLAUSIBLE_WATTS: f64 = 30_000.0;

/// One DCMI power reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DcmiReading {
    pub current: Watts,
    pub minimum: Option<Watts>,
    pub maximum: Option<Watts>,
    pub average: Option<Watts>,
    /// False when the BMC says the reading state is deactivated (see the module's policy).
    pub active: bool,
}

/// Why DCMI power cannot be used (now, or on this host).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DcmiError {
    #[error("the BMC does not support DCMI power readings ({0})")]
    NotSupported(String),
    #[error("no IPMI device: load the ipmi_si and ipmi_devintf modules, or this host has no BMC ({0})")]
    NoDevice(String),
    #[error("power reading state is deactivated and the BMC reports {0} W; enable it with `ipmitool dcmi power activate`")]
    Deactivated(f64),
    #[error("cannot parse the DCMI output: no `Instantaneous power reading` or `Current Power` line in {0:?}")]
    Unparsable(String),
    #[error("the BMC did not answer: {0}")]
    Transient(String),
}

impl DcmiError {
    /// Permanent failures are reported at discovery and not retried.
    pub fn is_permanent(&self) -> bool {
        matches!(self, DcmiError::NotSupported(_) | DcmiError::NoDevice(_))
    }
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

/// Parses ipmitool's or FreeIPMI's text. The state is reported, not judged: see [`accept`].
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
            _ => {}
        }
        // ipmitool ≥ 1.8.19 prints the timestamp without a newline, so "Sampling period" may share
        // a line with it; the state line is always its own, but find it by its text anyway.
        let lower = line.to_ascii_lowercase();
        for marker in ["power reading state is:", "power measurement"] {
            if let Some(pos) = lower.find(marker) {
                let rest = &lower[pos + marker.len()..];
                let v = rest.trim_start_matches([' ', ':', '\t']).trim();
                active = v == "activated" || v == "active";
            }
        }
    }
    let Some(current) = current else {
        return Err(DcmiError::Unparsable(stdout.chars().take(200).collect()));
    };
    Ok(DcmiReading { current: Watts(current), minimum: minimum.map(Watts), maximum: maximum.map(Watts), average: average.map(Watts), active })
}

/// The deactivated-reading policy: the watts to record and whether they are flagged.
pub fn accept(r: &DcmiReading) -> Result<(Watts, bool), DcmiError> {
    if r.active {
        return Ok((r.current, false));
    }
    let w = r.current.0;
    if w > 0.0 && w <= MAX_PLAUSIBLE_WATTS {
        Ok((r.current, true))
    } else {
        Err(DcmiError::Deactivated(w))
    }
}

/// The first line that says something: ipmitool's DCMI errors start with a blank line
/// (`"\n    DCMI request failed because: …"`), so the first line is often empty.
fn first_line(s: &str) -> Option<&str> {
    s.lines().map(str::trim).find(|l| !l.is_empty())
}

/// Classifies a failed call from its stderr (and stdout: some DCMI errors go there). Unsupported
/// and missing-device are permanent; anything else is transient and retried.
pub fn classify_failure(stderr: &str, stdout: &str, exit: &str) -> DcmiError {
    let line = first_line(stderr).or_else(|| first_line(stdout)).map(str::to_string);
    let l = format!("{stderr}\n{stdout}").to_ascii_lowercase();
    let what = line.clone().unwrap_or_else(|| format!("{exit} with no output"));
    if l.contains("invalid command") {
        DcmiError::NotSupported(what)
    } else if l.contains("could not open device") {
        DcmiError::NoDevice(what)
    } else {
        DcmiError::Transient(match line {
            Some(t) => format!("{t} ({exit})"),
            None => what,
        })
    }
}

/// A file of the corpus in `tests/fixtures/ipmi/`.
#[cfg(test)]
pub(super) fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/ipmi").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(current: f64, min: f64, max: f64, avg: f64, active: bool) -> DcmiReading {
        DcmiReading { current: Watts(current), minimum: Some(Watts(min)), maximum: Some(Watts(max)), average: Some(Watts(avg)), active }
    }

    /// The corpus of real outputs (tests/fixtures/ipmi/README.md), expected values read by hand.
    #[test]
    fn real_outputs_parse_to_their_printed_watts() {
        type Case = (&'static str, DcmiReading, Result<(Watts, bool), DcmiError>);
        let cases: &[Case] = &[
            ("lovoo-ipmi-exporter-activated-215w.txt", reading(215.0, 162.0, 276.0, 176.0, true), Ok((Watts(215.0), false))),
            ("rabe-zabbix-activated-197w.txt", reading(197.0, 175.0, 242.0, 190.0, true), Ok((Watts(197.0), false))),
            ("supermicro-same-line-timestamp-186w.txt", reading(186.0, 129.0, 386.0, 198.0, true), Ok((Watts(186.0), false))),
            ("openbmc-witherspoon-deactivated-319w.txt", reading(319.0, 319.0, 319.0, 319.0, false), Ok((Watts(319.0), true))),
            ("openbmc-ampere-deactivated-360w.txt", reading(360.0, 360.0, 360.0, 360.0, false), Ok((Watts(360.0), true))),
            ("ipmitool-dcmi-deactivated.txt", reading(0.0, 0.0, 0.0, 0.0, false), Err(DcmiError::Deactivated(0.0))),
            ("freeipmi-not-available-105w.txt", reading(105.0, 0.0, 0.0, 0.0, false), Ok((Watts(105.0), true))),
            ("ipmitool-dcmi-activated.txt", reading(173.0, 70.0, 500.0, 178.0, true), Ok((Watts(173.0), false))),
            ("freeipmi-dcmi-active.txt", reading(164.0, 110.0, 310.0, 169.0, true), Ok((Watts(164.0), false))),
        ];
        for (file, want, verdict) in cases {
            let got = parse(&fixture(file)).unwrap();
            assert_eq!(&got, want, "{file}");
            assert_eq!(&accept(&got), verdict, "{file}");
        }
        assert!(matches!(parse("garbage"), Err(DcmiError::Unparsable(_))));
        // 65535 W from a deactivated BMC is the known garbage value, not a reading.
        assert_eq!(accept(&reading(65535.0, 0.0, 0.0, 0.0, false)), Err(DcmiError::Deactivated(65535.0)));
    }

    #[test]
    fn real_failures_are_classified_with_a_reason() {
        let f = |file: &str| classify_failure(&fixture(file), "", "exit status: 1");
        assert_eq!(f("ipmitool-dcmi-invalid-command.stderr"), DcmiError::NotSupported("DCMI request failed because: Invalid command (c1)".into()));
        assert_eq!(
            f("ipmitool-no-device.stderr"),
            DcmiError::NoDevice("Could not open device at /dev/ipmi0 or /dev/ipmi/0 or /dev/ipmidev/0: No such file or directory".into())
        );
        assert_eq!(f("lan-session-failure.stderr"), DcmiError::Transient("Get Session Challenge command failed (exit status: 1)".into()));
        assert_eq!(
            f("dell-r750-unspecified-error.stderr"),
            DcmiError::Transient("DCMI request failed because: Unspecified error (ff) (exit status: 1)".into())
        );
        // The blank first line is skipped: never an empty reason "()".
        assert_eq!(
            f("rainier-get-conf-param-blank-first.stderr"),
            DcmiError::Transient("DCMI request failed because: Unspecified error (ff) (exit status: 1)".into())
        );
        assert_eq!(
            classify_failure("", &fixture("get-limit-blank-first.txt"), "exit status: 1"),
            DcmiError::Transient("A valid DCMI command was not returned! (80) (exit status: 1)".into())
        );
        assert_eq!(classify_failure("\n\n", "", "exit status: 1"), DcmiError::Transient("exit status: 1 with no output".into()));
        assert_eq!(
            DcmiError::NotSupported("DCMI request failed because: Invalid command (c1)".into()).to_string(),
            "the BMC does not support DCMI power readings (DCMI request failed because: Invalid command (c1))"
        );
    }
}
