//! `nvme id-ctrl DEV -o json`: identity, thermal thresholds and power-state descriptors
//! (docs/sources-and-drives.md §5.1, §5.2, §6.3).
//!
//! PSD keys changed across nvme-cli versions; [`parse_id_ctrl`] accepts all of them:
//! - ≤ 2.5 (incl. 2.3): `flags` (bit 0 MXPS, bit 1 NOPS);
//! - ≥ 2.6: `max_power_scale` and `non-operational_state` instead of `flags`;
//! - ≤ 2.0: `idle_scale`/`active_work_scale` are raw bytes (scale in bits 7:6, APW in 2:0);
//!   2.0 already shifts `active_work_scale`; ≥ 2.1: `idle_scale`/`active_scale` are 0/1/2 and
//!   `active_power_work` is APW.
//!
//! New PSD fields (2.16's emergency power-fail times) are ignored until someone needs them.

use crate::jsonutil::{field_num, field_str, FieldProblem, Problems};
use crate::units::{Celsius, Watts};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One NVMe power state, scaled to watts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerState {
    /// PS number (index into the PSD table).
    pub index: u8,
    /// Maximum power: MP × 0.01 W (MXPS = 0) or × 0.0001 W (MXPS = 1); `None` when MP = 0
    /// ("not reported").
    pub max_power: Option<Watts>,
    /// MXPS: `max_power` counts 0.0001 W (`true`) or 0.01 W units; it sets the printed precision.
    pub max_power_fine: bool,
    /// `false` when NOPS is set: the controller processes no IO in this state. The governor never
    /// selects such a state.
    pub operational: bool,
    /// Entry latency, µs (0 = not reported).
    pub entry_latency_us: u32,
    /// Exit latency, µs (0 = not reported).
    pub exit_latency_us: u32,
    /// Relative read throughput rank (lower is better).
    pub relative_read_throughput: u8,
    /// Relative read latency rank.
    pub relative_read_latency: u8,
    /// Relative write throughput rank.
    pub relative_write_throughput: u8,
    /// Relative write latency rank.
    pub relative_write_latency: u8,
    /// Idle power (IPS 1 → 0.0001 W, 2 → 0.01 W); `None` if not reported or the scale is unknown.
    pub idle_power: Option<Watts>,
    /// Active power (APS, same coding as IPS).
    pub active_power: Option<Watts>,
    /// Active power workload (APW): 0 none, 1 idle+burst, 2 heavy sequential writes.
    pub active_power_workload: u8,
}

impl PowerState {
    /// Max power in W as the descriptor carries it: 2 decimals in 0.01 W units, 4 in 0.0001 W
    /// units (`25.00`, `0.0035`), as nvme-cli prints it; `-` when not reported.
    pub fn max_power_number(&self) -> String {
        match self.max_power {
            Some(w) if self.max_power_fine => format!("{:.4}", w.value()),
            Some(w) => format!("{:.2}", w.value()),
            None => "-".to_string(),
        }
    }

    /// [`Self::max_power_number`] with its unit (`0.0035 W`), or `-`.
    pub fn max_power_text(&self) -> String {
        match self.max_power {
            Some(_) => format!("{} W", self.max_power_number()),
            None => "-".to_string(),
        }
    }
}

/// The parts of Identify Controller wattflip uses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdCtrl {
    /// PCI vendor ID (`0x8086` Intel).
    pub vid: u16,
    /// Subsystem vendor ID.
    pub ssvid: u16,
    /// Serial number (trimmed of space padding).
    pub serial: String,
    /// Model number (trimmed).
    pub model: String,
    /// Firmware revision (trimmed).
    pub firmware: String,
    /// Number of power states, **0's based** (0 → only PS0).
    pub npss: u8,
    /// Bit 0: APST supported.
    pub apsta: u8,
    /// Warning composite temperature threshold, raw Kelvin (0 = not reported).
    pub wctemp_kelvin: u16,
    /// Critical composite temperature threshold, raw Kelvin (0 = not reported).
    pub cctemp_kelvin: u16,
    /// Bit 0: host-controlled thermal management supported.
    pub hctma: u16,
    /// Minimum TMT the host may request, Kelvin.
    pub mntmt_kelvin: u16,
    /// Maximum TMT the host may request, Kelvin.
    pub mxtmt_kelvin: u16,
    /// Optional NVM command support; bit 4: Save/Select in Set/Get Features.
    pub oncs: u16,
    /// Total NVM capacity (TNVMCAP), bytes; `None` when not printed, unreadable, or 0 (the
    /// controller does not report it).
    pub capacity_bytes: Option<u128>,
    /// Power states 0..=npss.
    pub power_states: Vec<PowerState>,
    /// Fields that were printed but could not be read (left out or "not reported").
    pub problems: Vec<FieldProblem>,
}

impl IdCtrl {
    /// APST supported: the controller may change power states on its own while idle, which a
    /// governor sweep must know about.
    pub fn apst_supported(&self) -> bool {
        self.apsta & 1 != 0
    }
    /// Host-controlled thermal management (FID 10h) supported.
    pub fn hctm_supported(&self) -> bool {
        self.hctma & 1 != 0
    }
    /// Get Features SEL (and Set Features Save) supported (ONCS bit 4).
    pub fn select_supported(&self) -> bool {
        self.oncs & 0x10 != 0
    }
    /// WCTEMP in °C, if reported.
    pub fn warning_temperature(&self) -> Option<Celsius> {
        (self.wctemp_kelvin != 0).then(|| Celsius::from_kelvin(self.wctemp_kelvin))
    }
    /// CCTEMP in °C, if reported.
    pub fn critical_temperature(&self) -> Option<Celsius> {
        (self.cctemp_kelvin != 0).then(|| Celsius::from_kelvin(self.cctemp_kelvin))
    }
    /// The descriptor of `ps`, if it exists.
    pub fn power_state(&self, ps: u8) -> Option<&PowerState> {
        self.power_states.iter().find(|p| p.index == ps)
    }
}

/// Parses `id-ctrl -o json` of any nvme-cli version. Fails when there is no readable `npss` or
/// `psds` (not an id-ctrl); other unreadable fields are left out and named in `problems`.
pub fn parse_id_ctrl(stdout: &str) -> Result<IdCtrl, String> {
    let root: Value = serde_json::from_str(stdout).map_err(|e| format!("not JSON: {e}"))?;
    if !root.is_object() {
        return Err("not a JSON object".into());
    }
    let npss: u8 = field_num(&root, "", "npss").map_err(|p| p.to_string())?.ok_or("no `npss`")?;
    let psds = root.get("psds").and_then(Value::as_array).ok_or("no `psds` array")?;
    let mut pr = Problems::default();
    // Descriptors beyond NPSS are not valid (§5.1); nvme-cli prints 0..=npss but be strict.
    let mut power_states = Vec::new();
    for (i, psd) in psds.iter().take(usize::from(npss) + 1).enumerate() {
        power_states.push(parse_psd(i, psd, &mut pr)?);
    }
    // Thresholds and capabilities: 0 is the NVMe specification's "not reported"; unreadable is the same plus
    // a problem line.
    let mut u16_of = |k: &str| pr.take(field_num::<u16>(&root, "", k)).unwrap_or(0);
    let vid = u16_of("vid");
    let ssvid = u16_of("ssvid");
    let wctemp_kelvin = u16_of("wctemp");
    let cctemp_kelvin = u16_of("cctemp");
    let hctma = u16_of("hctma");
    let mntmt_kelvin = u16_of("mntmt");
    let mxtmt_kelvin = u16_of("mxtmt");
    let oncs = u16_of("oncs");
    let apsta = pr.take(field_num::<u8>(&root, "", "apsta")).unwrap_or(0);
    let capacity_bytes = pr.take(field_num::<u128>(&root, "", "tnvmcap")).filter(|c| *c != 0);
    Ok(IdCtrl {
        vid,
        ssvid,
        serial: field_str(&root, "sn").unwrap_or_default(),
        model: field_str(&root, "mn").unwrap_or_default(),
        firmware: field_str(&root, "fr").unwrap_or_default(),
        npss,
        apsta,
        wctemp_kelvin,
        cctemp_kelvin,
        hctma,
        mntmt_kelvin,
        mxtmt_kelvin,
        oncs,
        capacity_bytes,
        power_states,
        problems: pr.0,
    })
}

fn parse_psd(index: usize, psd: &Value, pr: &mut Problems) -> Result<PowerState, String> {
    let index = u8::try_from(index).map_err(|_| format!("power state index {index} out of range"))?;
    let path = format!("psds[{index}]");
    let mut get = |k: &str| pr.take(field_num::<u64>(psd, &path, k));
    // A descriptor without a readable max power cannot be used by the governor: fail loudly.
    let mp = field_num::<u64>(psd, &path, "max_power").map_err(|p| p.to_string())?.ok_or_else(|| format!("psds[{index}] has no max_power"))?;
    // MXPS / NOPS: `flags` up to 2.5, separate keys from 2.6.
    let (mxps, nops) = match get("flags") {
        Some(flags) => (flags & 1 != 0, flags & 2 != 0),
        None => {
            let nops_key = if psd.get("non-operational_state").is_some() { "non-operational_state" } else { "non_operational_state" };
            (get("max_power_scale").unwrap_or(0) & 1 != 0, get(nops_key).unwrap_or(0) != 0)
        }
    };
    let max_power = (mp != 0).then(|| Watts::from_units(mp, if mxps { 10_000 } else { 100 }));

    let idle_scale = get("idle_scale").map(shifted_scale);
    let (active_scale, apw) = match (get("active_scale"), get("active_work_scale")) {
        (Some(s), _) => (Some(shifted_scale(s)), get("active_power_work").unwrap_or(0)),
        // ≤ 2.0: one key; 1.x raw byte carries APW in bits 2:0, 2.0 only the shifted scale.
        (None, Some(raw)) if raw >= 4 => (Some(raw >> 6), raw & 7),
        (None, Some(s)) => (Some(s), 0),
        (None, None) => (None, 0),
    };
    let idle_power = get("idle_power");
    let active_power = get("active_power");
    let mut small = |k: &str| pr.take(field_num::<u32>(psd, &path, k)).unwrap_or(0);
    let entry_latency_us = small("entry_lat");
    let exit_latency_us = small("exit_lat");
    let mut rank = |k: &str| pr.take(field_num::<u8>(psd, &path, k)).unwrap_or(0);
    Ok(PowerState {
        index,
        max_power,
        max_power_fine: mxps,
        operational: !nops,
        entry_latency_us,
        exit_latency_us,
        relative_read_throughput: rank("read_tput"),
        relative_read_latency: rank("read_lat"),
        relative_write_throughput: rank("write_tput"),
        relative_write_latency: rank("write_lat"),
        idle_power: scaled_power(idle_power, idle_scale),
        active_power: scaled_power(active_power, active_scale),
        active_power_workload: u8::try_from(apw & 7).unwrap_or(0),
    })
}

/// IPS/APS as printed: ≥ 2.1 gives 0/1/2; ≤ 2.0 may give the raw byte (scale in bits 7:6).
fn shifted_scale(v: u64) -> u64 {
    if v >= 4 {
        v >> 6
    } else {
        v
    }
}

/// IPS/APS coding: 1 → 0.0001 W, 2 → 0.01 W, 0/3 → unknown (§5.2; not the MXPS coding!).
fn scaled_power(raw: Option<u64>, scale: Option<u64>) -> Option<Watts> {
    let raw = raw.filter(|r| *r != 0)?;
    match scale? {
        1 => Some(Watts::from_units(raw, 10_000)),
        2 => Some(Watts::from_units(raw, 100)),
        _ => None,
    }
}
