//! Get/Set Features: the text nvme-cli prints (stable 1.16 → 2.16, docs/sources-and-drives.md §6.2) and the FID
//! 02h encoding (§5.3). The NVMe status it prints on errors is `crate::nvme_status` (re-exported
//! here), below the command runner that also reads it.
//!
//! To add a feature, add its FID constant and, if its value has fields, a small decoder like
//! [`PowerManagement`].

pub use crate::nvme_status::NvmeStatus;

/// FID 02h Power Management (bits 4:0 PS, 7:5 workload hint).
pub const FID_POWER_MANAGEMENT: u8 = 0x02;
/// FID C6h Intel PowerGovernorMode (vendor; 0 = 25 W, 1 = 20 W, 2 = 10 W on DC P3700, §5.3).
pub const FID_INTEL_POWER_GOVERNOR: u8 = 0xC6;

/// Get Features SEL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FeatureSelect {
    /// The value in effect.
    Current = 0,
    /// The factory default.
    Default = 1,
    /// The saved value.
    Saved = 2,
    /// Capabilities: bit 0 saveable, 1 per-namespace, 2 changeable.
    Supported = 3,
}

/// One parsed `get-feature` first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureValue {
    /// The FID printed before the name.
    pub fid: Option<u8>,
    /// `Current`, `Default`, `Saved` or `Supported capabilities`.
    pub select: String,
    /// The 32-bit result (DW0).
    pub value: u32,
}

/// Parses `get-feature:0x02 (Power Management), Current value:0x00000003`.
///
/// nvme-cli prints the value with C `%#0*x`, so zero comes out as `00000000` **without** `0x`
/// ([verified] on 2.3): the hex prefix is optional. Lines after the first (`-H` details,
/// `Feature is changeable`) are ignored.
pub fn parse_get_feature(stdout: &str) -> Result<FeatureValue, String> {
    let line =
        stdout.lines().find(|l| l.contains("get-feature:") && l.contains("value:")).ok_or_else(|| format!("no `get-feature:… value:` line in {stdout:?}"))?;
    let (head, tail) = line.rsplit_once("value:").ok_or_else(|| format!("no `value:` in {line:?}"))?;
    let hex = tail.trim();
    let hex = hex.strip_prefix("0x").or_else(|| hex.strip_prefix("0X")).unwrap_or(hex);
    let hex: String = hex.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
    let value = u32::from_str_radix(&hex, 16).map_err(|e| format!("bad value in {line:?}: {e}"))?;
    let fid = head.split("get-feature:").nth(1).and_then(|s| s.split_whitespace().next()).and_then(|s| {
        let s = s.trim_end_matches(',');
        let h = s.strip_prefix("0x").unwrap_or(s);
        u8::from_str_radix(h, 16).ok()
    });
    let select = head.rsplit_once(',').map(|(_, s)| s.trim().to_string()).unwrap_or_default();
    Ok(FeatureValue { fid, select, value })
}

/// SEL = 3 result bits (nvme-cli `nvme_show_select_result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureCapabilities(pub u32);

impl FeatureCapabilities {
    /// Bit 0: a saved value is supported.
    pub fn saveable(self) -> bool {
        self.0 & 1 != 0
    }
    /// Bit 1: the feature is per namespace.
    pub fn per_namespace(self) -> bool {
        self.0 & 2 != 0
    }
    /// Bit 2: the feature can be changed. QEMU reports 0 for FID 02h and refuses every set (§10).
    pub fn changeable(self) -> bool {
        self.0 & 4 != 0
    }
}

/// FID 02h value: bits 4:0 power state, bits 7:5 workload hint (libnvme
/// `NVME_FEAT_PWRMGMT_PS_MASK = 0x1f`, `WH_SHIFT = 5`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowerManagement {
    /// Power state (PS).
    pub ps: u8,
    /// Workload hint (WH), coded like APW.
    pub workload_hint: u8,
}

impl PowerManagement {
    /// Decodes DW0.
    pub fn from_value(value: u32) -> Self {
        PowerManagement { ps: (value & 0x1f) as u8, workload_hint: ((value >> 5) & 0x7) as u8 }
    }
    /// Encodes CDW11.
    pub fn to_value(self) -> u32 {
        (u32::from(self.workload_hint & 0x7) << 5) | u32::from(self.ps & 0x1f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_without_prefix() {
        let v =
            parse_get_feature("get-feature:0x02 (Power Management), Current value:00000000\n\tWorkload Hint (WH): 0 - No Workload\n\tPower State   (PS): 0\n");
        assert_eq!(v, Ok(FeatureValue { fid: Some(2), select: "Current".into(), value: 0 }));
        let v = parse_get_feature("get-feature:0x02 (Power Management), Current value:0x00000003\n");
        assert_eq!(v.map(|v| v.value), Ok(3));
        let v = parse_get_feature("get-feature:0x04 (Temperature Threshold), Supported capabilities value:0x00000004\n  Feature is changeable\n");
        assert_eq!(v.map(|v| (v.fid, v.select, v.value)), Ok((Some(4), "Supported capabilities".into(), 4)));
        assert!(parse_get_feature("NVMe status: ...").is_err());
    }

    #[test]
    fn power_management_bits() {
        let pm = PowerManagement::from_value(0x43);
        assert_eq!(pm, PowerManagement { ps: 3, workload_hint: 2 });
        assert_eq!(pm.to_value(), 0x43);
    }
}
