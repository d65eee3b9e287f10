//! smartctl (smartmontools 7.x) with `--json`: device scan and health/temperature reports for NVMe
//! and ATA drives (docs/sources-and-drives.md §7).
//!
//! smartctl's exit status is a bit mask: bits 0–1 mean the call itself failed; bit 2 means partial
//! data; bits 3–7 describe the drive's health and the data is valid (§7.2). [`SmartctlExit`]
//! decodes it; only call failures become [`SmartctlError`]. To read another attribute, extend
//! [`SmartctlReport`] and its parser, with a fixture per smartctl version.

use crate::command::{command_line, CommandError, CommandRunner, Tool};
use crate::jsonutil::{field_i64, field_num, field_str, num_of, raw_num, raw_value, FieldProblem, Problems, RawObject};
use crate::nvme_cli::CriticalWarning;
use crate::units::Celsius;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

use crate::smartctl_exit::advice;
pub use crate::smartctl_exit::{parse_version, SmartctlExit, MIN_JSON_VERSION};

/// A smartctl call gave no usable data.
#[derive(Debug, thiserror::Error)]
pub enum SmartctlError {
    /// Running it failed (not found, timeout, killed by a signal).
    #[error(transparent)]
    Command(#[from] CommandError),
    /// Exit bits 0/1 or an `error` message: no data this cycle.
    #[error("`{command}`: {exit}: {messages}; {advice}")]
    CallFailed {
        /// Full command line.
        command: String,
        /// Decoded exit status.
        exit: SmartctlExit,
        /// smartctl's `messages[].string` (error severity first), or stderr.
        messages: String,
        /// What to do.
        advice: &'static str,
    },
    /// The JSON did not parse.
    #[error(
        "`{command}`: cannot read smartctl JSON: {detail}; save the output under \
         tests/fixtures/smartctl/ and extend the parser"
    )]
    Parse {
        /// Full command line.
        command: String,
        /// What went wrong.
        detail: String,
    },
}

/// A `smartctl --scan-open` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScannedDevice {
    /// Device node (`/dev/nvme0`, `/dev/sda`).
    pub name: String,
    /// `info_name` (e.g. `/dev/sda [SAT]`).
    pub info_name: String,
    /// `-d` type (`nvme`, `sat`, `scsi`, …).
    pub device_type: String,
    /// `NVMe`, `ATA`, `SCSI`.
    pub protocol: String,
    /// Set when smartctl could not open the device.
    pub open_error: Option<String>,
}

/// A smartctl message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SmartctlMessage {
    /// Text.
    pub string: String,
    /// `information`, `warning` or `error`.
    pub severity: String,
}

/// One ATA SMART attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtaAttribute {
    /// Attribute ID (194 Temperature_Celsius, 190 Airflow_Temperature_Cel, …).
    pub id: u8,
    /// Name.
    pub name: String,
    /// Normalised value.
    pub value: u16,
    /// Worst normalised value.
    pub worst: u16,
    /// Threshold.
    pub thresh: u16,
    /// Raw value (48-bit).
    pub raw_value: u64,
    /// Raw value as smartctl prints it (`31 (Min/Max 20/45)`).
    pub raw_string: String,
}

/// NVMe health log as smartctl prints it (temperatures already in whole °C = K − 273).
#[derive(Debug, Clone, PartialEq)]
pub struct SmartctlNvmeLog {
    /// Critical warning bits.
    pub critical_warning: CriticalWarning,
    /// Composite temperature (omitted by smartctl when the drive reports 0 K).
    pub temperature: Option<Celsius>,
    /// Available spare, %.
    pub available_spare_pct: Option<u8>,
    /// Percentage used.
    pub percentage_used: Option<u8>,
    /// Data units read (× 512 000 bytes).
    pub data_units_read: Option<u128>,
    /// Data units written (× 512 000 bytes).
    pub data_units_written: Option<u128>,
    /// Power-on hours.
    pub power_on_hours: Option<u128>,
    /// Power cycles.
    pub power_cycles: Option<u128>,
    /// Unsafe shutdowns.
    pub unsafe_shutdowns: Option<u128>,
    /// Media and data integrity errors.
    pub media_errors: Option<u128>,
    /// Error information log entries.
    pub error_log_entries: Option<u128>,
    /// Minutes above WCTEMP (only printed when thresholds are non-zero).
    pub warning_temp_time_min: Option<u32>,
    /// Minutes above CCTEMP.
    pub critical_temp_time_min: Option<u32>,
    /// Sensors 1–8 (sparse: `null` before a present sensor).
    pub sensors: Vec<Option<Celsius>>,
}

/// Where [`SmartctlReport::temperature`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemperatureOrigin {
    /// `temperature.current`.
    Current,
    /// The NVMe health log's `temperature`.
    NvmeLog,
    /// ATA attribute 194 raw value (lowest byte).
    Attribute194,
    /// ATA attribute 190 raw value (lowest byte).
    Attribute190,
}

/// `smartctl --json -a DEV`, normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct SmartctlReport {
    /// Decoded exit status; bits ≥ 3 are health information, not failures.
    pub exit: SmartctlExit,
    /// smartctl version (`[7, 3]`).
    pub version: Option<(u32, u32)>,
    /// Messages (warnings and information; errors make the call fail).
    pub messages: Vec<SmartctlMessage>,
    /// The device as smartctl names it.
    pub device: ScannedDevice,
    /// Model: `model_name`; for SCSI/SAS `scsi_model_name`, else `scsi_vendor` + `scsi_product`.
    pub model: Option<String>,
    /// Serial number.
    pub serial: Option<String>,
    /// Firmware: `firmware_version`; for SCSI/SAS `scsi_revision` (`revision` before 7.0).
    pub firmware: Option<String>,
    /// `user_capacity.bytes`, else (NVMe, when smartctl omits it) `nvme_total_capacity`.
    pub capacity_bytes: Option<u64>,
    /// `logical_block_size`; `None` when not printed or 0 (unknown).
    pub logical_block_size: Option<u32>,
    /// `rotation_rate` in rpm as printed (0 = solid state); `None` when not printed.
    pub rotation_rate_rpm: Option<u32>,
    /// `smart_status.passed`.
    pub smart_passed: Option<bool>,
    /// Best temperature reading, °C (whole degrees).
    pub temperature: Option<Celsius>,
    /// Which field [`Self::temperature`] came from.
    pub temperature_origin: Option<TemperatureOrigin>,
    /// `power_on_time.hours`.
    pub power_on_hours: Option<u64>,
    /// `power_cycle_count`.
    pub power_cycle_count: Option<u64>,
    /// NVMe health log, for NVMe devices.
    pub nvme: Option<SmartctlNvmeLog>,
    /// ATA SMART attributes, for ATA devices.
    pub ata_attributes: Vec<AtaAttribute>,
    /// NVMe power states and composite thresholds smartctl printed (`smartctl_nvme`).
    pub nvme_capabilities: crate::smartctl_nvme::NvmeCapabilities,
    /// `power_mode.name` (ATA, printed when `-n` was given): the drive's power mode.
    pub power_mode: Option<crate::smartctl_mode::PowerMode>,
    /// Fields that were printed but could not be read (left out above).
    pub problems: Vec<FieldProblem>,
}

impl SmartctlReport {
    /// Spinning media: `Some(true)` for a non-zero `rotation_rate`, `Some(false)` for 0 (SSD) or an
    /// NVMe device, `None` when smartctl did not say.
    pub fn rotational(&self) -> Option<bool> {
        match self.rotation_rate_rpm {
            Some(rpm) => Some(rpm != 0),
            None if self.nvme.is_some() || self.device.protocol.eq_ignore_ascii_case("nvme") => Some(false),
            None => None,
        }
    }

    /// The ATA attribute with this ID.
    pub fn attribute(&self, id: u8) -> Option<&AtaAttribute> {
        self.ata_attributes.iter().find(|a| a.id == id)
    }
}

/// smartctl behind a runner ([`Tool`]: program path, deadline, runner). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Smartctl {
    tool: Tool,
    /// `-n` for ATA/SCSI reads at discovery (the monitor passes its own): `standby` by default,
    /// so an agent start never spins up a sleeping disk; `None` for `never`.
    nocheck: Option<crate::smartctl_mode::PowerCheck>,
}

impl Smartctl {
    /// `smartctl` from PATH with [`crate::DEFAULT_TIMEOUT`], `-n standby` for ATA/SCSI drives.
    pub fn new(runner: Arc<dyn CommandRunner>) -> Self {
        Smartctl { tool: Tool::new(runner, "smartctl"), nocheck: Some(crate::smartctl_mode::PowerCheck::Standby) }
    }
    /// Another executable.
    pub fn with_program(self, program: impl Into<String>) -> Self {
        Smartctl { tool: self.tool.with_program(program), ..self }
    }
    /// Another deadline.
    pub fn with_timeout(self, timeout: Duration) -> Self {
        Smartctl { tool: self.tool.with_timeout(timeout), ..self }
    }
    /// Another power check for ATA/SCSI reads (`drives.smart_nocheck`; `never` reads any drive).
    pub fn with_nocheck(self, check: crate::smartctl_mode::PowerCheck) -> Self {
        Smartctl { nocheck: (check != crate::smartctl_mode::PowerCheck::Never).then_some(check), ..self }
    }
    /// The power check ATA/SCSI reads get ([`Smartctl::with_nocheck`]).
    pub fn nocheck(&self) -> Option<crate::smartctl_mode::PowerCheck> {
        self.nocheck
    }

    /// Runs smartctl; any exit code is `Ok` (its bits are drive health, §7.2), a signal is not.
    /// The exit status and stderr are read before stdout: a call that failed (bit 0 or 1) and
    /// printed no JSON is that failure, named with its bits and stderr, never "not JSON".
    fn run(&self, args: &[&str]) -> Result<(String, String, Vec<String>), SmartctlError> {
        let out = self.tool.run(args)?;
        let code = match out.exit {
            crate::command::Exit::Code(c) => c,
            crate::command::Exit::Signal(_) => {
                let argv = out.argv.clone();
                return Err(out
                    .into_success()
                    .err()
                    .map(SmartctlError::from)
                    .unwrap_or_else(|| SmartctlError::Parse { command: command_line(&argv), detail: "killed".into() }));
            }
        };
        let exit = SmartctlExit(u8::try_from(code & 0xff).unwrap_or(0));
        if exit.is_call_failure() && !out.stdout.trim_start().starts_with('{') {
            let text = [out.stderr.trim(), out.stdout.trim()].into_iter().find(|t| !t.is_empty()).unwrap_or("(no output)").to_string();
            let advice = advice(exit, &text);
            return Err(SmartctlError::CallFailed { command: command_line(&out.argv), exit, messages: text, advice });
        }
        Ok((out.stdout, out.stderr, out.argv))
    }

    /// `smartctl --scan-open --json`. No disks: empty list (the `devices` key is absent).
    pub fn scan_open(&self) -> Result<Vec<ScannedDevice>, SmartctlError> {
        let (stdout, stderr, argv) = self.run(&["--scan-open", "--json"])?;
        parse_scan(&stdout, &stderr, &command_line(&argv))
    }

    /// `smartctl --json -a [-d TYPE] DEV`.
    pub fn report(&self, device: &str, device_type: Option<&str>) -> Result<SmartctlReport, SmartctlError> {
        let (stdout, stderr, argv) = self.run_report(device, device_type, &[])?;
        parse_report(&stdout, &stderr, &command_line(&argv))
    }

    /// Runs `smartctl --json -a EXTRA… [-d TYPE] DEV` (a `/dev` path only); stdout, stderr, argv.
    pub(crate) fn run_report(&self, device: &str, device_type: Option<&str>, extra: &[&str]) -> Result<(String, String, Vec<String>), SmartctlError> {
        if !device.starts_with("/dev/") {
            return Err(SmartctlError::CallFailed {
                command: format!("{} --json -a {device}", self.tool.program()),
                exit: SmartctlExit(0),
                messages: format!("device {device:?} is not a /dev path"),
                advice: "pass a device node from the scan",
            });
        }
        let mut args = vec!["--json", "-a"];
        args.extend(extra);
        if let Some(t) = device_type {
            args.extend(["-d", t]);
        }
        args.push(device);
        self.run(&args)
    }
}

#[derive(Deserialize)]
struct Envelope {
    #[serde(default)]
    smartctl: Option<Value>,
}

/// Exit status, messages and version from the `smartctl` envelope of every JSON output.
type Envelope3 = (SmartctlExit, Vec<SmartctlMessage>, Option<(u32, u32)>);

fn envelope_check(root: &Value, stderr: &str, command: &str) -> Result<Envelope3, SmartctlError> {
    let env: Envelope = serde_json::from_value(root.clone()).map_err(|e| SmartctlError::Parse { command: command.into(), detail: e.to_string() })?;
    let sc = env.smartctl.unwrap_or(Value::Null);
    let exit = field_num::<u8>(&sc, "smartctl", "exit_status")
        .map_err(|p| SmartctlError::Parse { command: command.into(), detail: p.to_string() })?
        .map(SmartctlExit)
        .unwrap_or_default();
    let messages: Vec<SmartctlMessage> = sc
        .get("messages")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|m| SmartctlMessage { string: field_str(m, "string").unwrap_or_default(), severity: field_str(m, "severity").unwrap_or_default() })
                .collect()
        })
        .unwrap_or_default();
    let version = sc
        .get("version")
        .and_then(Value::as_array)
        .and_then(|v| Some((num_of::<u32>("smartctl.version[0]", v.first()?).ok()??, num_of::<u32>("smartctl.version[1]", v.get(1)?).ok()??)));
    let has_error = messages.iter().any(|m| m.severity == "error");
    if exit.is_call_failure() || has_error {
        let mut text: Vec<String> =
            messages.iter().filter(|m| m.severity == "error").chain(messages.iter().filter(|m| m.severity != "error")).map(|m| m.string.clone()).collect();
        if text.is_empty() && !stderr.trim().is_empty() {
            text.push(stderr.trim().to_string());
        }
        let joined = text.join("; ");
        let advice = advice(exit, &joined);
        return Err(SmartctlError::CallFailed { command: command.into(), exit, messages: joined, advice });
    }
    Ok((exit, messages, version))
}

/// Parses `smartctl --scan-open --json`.
pub fn parse_scan(stdout: &str, stderr: &str, command: &str) -> Result<Vec<ScannedDevice>, SmartctlError> {
    let root: Value = serde_json::from_str(stdout).map_err(|e| SmartctlError::Parse { command: command.into(), detail: format!("not JSON: {e}") })?;
    envelope_check(&root, stderr, command)?;
    Ok(root.get("devices").and_then(Value::as_array).map(|a| a.iter().map(scanned).collect()).unwrap_or_default())
}

fn scanned(d: &Value) -> ScannedDevice {
    ScannedDevice {
        name: field_str(d, "name").unwrap_or_default(),
        info_name: field_str(d, "info_name").unwrap_or_default(),
        device_type: field_str(d, "type").unwrap_or_default(),
        protocol: field_str(d, "protocol").unwrap_or_default(),
        open_error: field_str(d, "open_error"),
    }
}

/// `temperature.current`, except a RAID controller's logical volume's (protocol SCSI: a PERC or
/// MegaRAID virtual disk, which has no sensor of its own) 0: not available, never 0 °C.
fn current_temperature(root: &Value, pr: &mut Problems) -> Option<i64> {
    let current = match root.get("temperature") {
        Some(t) => pr.take(field_i64(t, "temperature", "current")),
        None => None,
    };
    let scsi = root.get("device").and_then(|d| field_str(d, "protocol")).is_some_and(|p| p.eq_ignore_ascii_case("scsi"));
    current.filter(|c| !(scsi && *c == 0))
}

/// Parses `smartctl --json -a` (or `-H -A`, `-x`) for NVMe and ATA.
pub fn parse_report(stdout: &str, stderr: &str, command: &str) -> Result<SmartctlReport, SmartctlError> {
    let root: Value = serde_json::from_str(stdout).map_err(|e| SmartctlError::Parse { command: command.into(), detail: format!("not JSON: {e}") })?;
    let (exit, messages, version) = envelope_check(&root, stderr, command)?;
    let mut pr = Problems::default();
    let nvme = nvme_log(stdout, command, &mut pr)?;
    let ata_attributes = ata_attributes(&root, &mut pr);

    let mut temperature = None;
    let mut temperature_origin = None;
    let current = current_temperature(&root, &mut pr);
    if let Some(c) = current {
        temperature = Some(Celsius::from_whole_celsius(c));
        temperature_origin = Some(TemperatureOrigin::Current);
    } else if let Some(t) = nvme.as_ref().and_then(|n| n.temperature) {
        temperature = Some(t);
        temperature_origin = Some(TemperatureOrigin::NvmeLog);
    } else {
        // smartctl's own fallback order for ATA: 194, then 190; the lowest raw byte, accepted if
        // 0 < t < 128 (§7.1). Older smartctl builds may omit `temperature` entirely.
        for (id, origin) in [(194u8, TemperatureOrigin::Attribute194), (190, TemperatureOrigin::Attribute190)] {
            if let Some(a) = ata_attributes.iter().find(|a| a.id == id) {
                let t = a.raw_value & 0xff;
                if t > 0 && t < 128 {
                    temperature = Some(Celsius::from_whole_celsius(t as i64));
                    temperature_origin = Some(origin);
                    break;
                }
            }
        }
    }
    let (model, firmware) = model_and_firmware(&root);
    let user_capacity = match root.get("user_capacity") {
        Some(u) => pr.take(field_num::<u64>(u, "user_capacity", "bytes")),
        None => None,
    };
    // smartctl prints no user_capacity for an NVMe device whose namespace it did not read
    // (DC drives with several namespaces, `-d nvme` on the controller node); the controller's
    // TNVMCAP is the drive's capacity then.
    let capacity_bytes = user_capacity.or_else(|| pr.take(field_num::<u64>(&root, "", "nvme_total_capacity")).filter(|c| *c != 0));
    let logical_block_size = pr.take(field_num::<u32>(&root, "", "logical_block_size")).filter(|b| *b != 0);
    let rotation_rate_rpm = pr.take(field_num::<u32>(&root, "", "rotation_rate"));
    let power_on_hours = match root.get("power_on_time") {
        Some(p) => pr.take(field_num::<u64>(p, "power_on_time", "hours")),
        None => None,
    };
    let power_cycle_count = pr.take(field_num::<u64>(&root, "", "power_cycle_count"));
    Ok(SmartctlReport {
        exit,
        version,
        messages,
        device: root.get("device").map(scanned).unwrap_or(ScannedDevice {
            name: String::new(),
            info_name: String::new(),
            device_type: String::new(),
            protocol: String::new(),
            open_error: None,
        }),
        model,
        serial: field_str(&root, "serial_number"),
        firmware,
        capacity_bytes,
        logical_block_size,
        rotation_rate_rpm,
        smart_passed: root.get("smart_status").and_then(|s| s.get("passed")).and_then(Value::as_bool),
        temperature,
        temperature_origin,
        power_on_hours,
        power_cycle_count,
        nvme,
        ata_attributes,
        nvme_capabilities: crate::smartctl_nvme::capabilities(&root, &mut pr),
        power_mode: crate::smartctl_mode::report_mode(stdout),
        problems: pr.0,
    })
}

/// Model and firmware. SCSI/SAS: identity in scsi_* (smartctl ≥ 7.0); 6.x dev builds printed
/// model_name/revision.
fn model_and_firmware(root: &Value) -> (Option<String>, Option<String>) {
    let model = field_str(root, "model_name")
        .or_else(|| field_str(root, "scsi_model_name"))
        .or_else(|| match (field_str(root, "scsi_vendor"), field_str(root, "scsi_product")) {
            (Some(v), Some(p)) => Some(format!("{v} {p}")),
            (v, p) => v.or(p),
        })
        .filter(|m| !m.is_empty());
    let firmware =
        field_str(root, "firmware_version").or_else(|| field_str(root, "scsi_revision")).or_else(|| field_str(root, "revision")).filter(|f| !f.is_empty());
    (model, firmware)
}

/// The NVMe log read as raw text so 128-bit counters keep every digit. smartctl writes a number
/// when < 2^53, else a number plus a `KEY_s` string (`json.cpp set_unsafe_le128`): prefer `KEY_s`.
fn nvme_log(stdout: &str, command: &str, pr: &mut Problems) -> Result<Option<SmartctlNvmeLog>, SmartctlError> {
    #[derive(Deserialize)]
    struct Outer {
        #[serde(default)]
        nvme_smart_health_information_log: Option<RawObject>,
    }
    let outer: Outer = serde_json::from_str(stdout).map_err(|e| SmartctlError::Parse { command: command.into(), detail: e.to_string() })?;
    let Some(log) = outer.nvme_smart_health_information_log else {
        return Ok(None);
    };
    let mut big = |k: &str| {
        let s = format!("{k}_s");
        let key = if log.contains_key(&s) { s.as_str() } else { k };
        pr.take(raw_num::<u128>(&log, key))
    };
    let data_units_read = big("data_units_read");
    let data_units_written = big("data_units_written");
    let power_on_hours = big("power_on_hours");
    let power_cycles = big("power_cycles");
    let unsafe_shutdowns = big("unsafe_shutdowns");
    let media_errors = big("media_errors");
    let error_log_entries = big("num_err_log_entries");
    let temperature = match raw_value(&log, "temperature") {
        Some(v) => {
            pr.take(field_i64(&serde_json::json!({ "temperature": v }), "nvme_smart_health_information_log", "temperature")).map(Celsius::from_whole_celsius)
        }
        None => None,
    };
    let sensors = match raw_value(&log, "temperature_sensors") {
        Some(Value::Array(a)) => a.iter().map(|v| v.as_i64().map(Celsius::from_whole_celsius)).collect(),
        _ => Vec::new(),
    };
    let critical_warning = pr.take(raw_num::<u8>(&log, "critical_warning")).map(CriticalWarning).unwrap_or_default();
    Ok(Some(SmartctlNvmeLog {
        critical_warning,
        temperature,
        available_spare_pct: pr.take(raw_num(&log, "available_spare")),
        percentage_used: pr.take(raw_num(&log, "percentage_used")),
        data_units_read,
        data_units_written,
        power_on_hours,
        power_cycles,
        unsafe_shutdowns,
        media_errors,
        error_log_entries,
        warning_temp_time_min: pr.take(raw_num(&log, "warning_temp_time")),
        critical_temp_time_min: pr.take(raw_num(&log, "critical_comp_time")),
        sensors,
    }))
}

fn ata_attributes(root: &Value, pr: &mut Problems) -> Vec<AtaAttribute> {
    let Some(table) = root.get("ata_smart_attributes").and_then(|a| a.get("table")).and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (i, a) in table.iter().enumerate() {
        let path = format!("ata_smart_attributes.table[{i}]");
        let Some(id) = pr.take(field_num::<u8>(a, &path, "id")) else {
            continue;
        };
        let raw = a.get("raw");
        let raw_value = match raw {
            Some(r) => pr.take(field_num::<u64>(r, &format!("{path}.raw"), "value")),
            None => None,
        };
        out.push(AtaAttribute {
            id,
            name: field_str(a, "name").unwrap_or_default(),
            value: pr.take(field_num(a, &path, "value")).unwrap_or(0),
            worst: pr.take(field_num(a, &path, "worst")).unwrap_or(0),
            thresh: pr.take(field_num(a, &path, "thresh")).unwrap_or(0),
            raw_value: raw_value.unwrap_or(0),
            raw_string: raw.and_then(|r| field_str(r, "string")).unwrap_or_default(),
        });
    }
    out
}
