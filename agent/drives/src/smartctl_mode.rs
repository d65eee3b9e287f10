//! smartctl's power-mode words, parsed without running anything: [`PowerCheck`] (`-n POWERMODE`),
//! [`PowerMode`] (what a drive said), the mode a report printed and a skipped read
//! (`smartctl.8`, `--nocheck`). A leaf below the smartctl wrapper and `powermode` (which runs the
//! checked read and re-exports these), so both read modes without importing each other. To
//! support another mode name, extend [`PowerMode::from_smartctl`].

use serde_json::Value;

/// `-n POWERMODE`: below which power mode smartctl leaves the drive alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PowerCheck {
    /// Always read (may spin a sleeping disk up).
    Never,
    /// Skip a drive in SLEEP.
    Sleep,
    /// Skip a drive in SLEEP or STANDBY (spun down): what Telegraf's smart input does by default.
    #[default]
    Standby,
    /// Skip a drive in SLEEP, STANDBY or IDLE.
    Idle,
}

impl PowerCheck {
    /// The man page's word, as the config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            PowerCheck::Never => "never",
            PowerCheck::Sleep => "sleep",
            PowerCheck::Standby => "standby",
            PowerCheck::Idle => "idle",
        }
    }

    /// From the config's word; `None` for anything else.
    pub fn parse(s: &str) -> Option<PowerCheck> {
        [PowerCheck::Never, PowerCheck::Sleep, PowerCheck::Standby, PowerCheck::Idle].into_iter().find(|c| c.as_str() == s)
    }
}

/// A drive's power mode as smartctl reports it, in four words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowerMode {
    Active,
    Idle,
    Standby,
    Sleep,
}

impl PowerMode {
    /// The word stored (`active`, `idle`, `standby`, `sleep`).
    pub fn as_str(self) -> &'static str {
        match self {
            PowerMode::Active => "active",
            PowerMode::Idle => "idle",
            PowerMode::Standby => "standby",
            PowerMode::Sleep => "sleep",
        }
    }

    /// From smartctl's names: ATA `SLEEP`, `STANDBY`, `STANDBY_Y`, `IDLE`, `IDLE_A/B/C`,
    /// `ACTIVE or IDLE` (CHECK POWER MODE 0xFF cannot tell them apart: active), `ACTIVE_NV_*`;
    /// SCSI `LOW POWER`, `IDLE BY TIMER`, `STANDBY BY COMMAND`, `ACTIVE`…; `STANDBY (OS)`.
    pub fn from_smartctl(name: &str) -> Option<PowerMode> {
        let n = name.trim().to_ascii_uppercase();
        if n.starts_with("ACTIVE") {
            Some(PowerMode::Active)
        } else if n.starts_with("SLEEP") || n.starts_with("LOW POWER") {
            Some(PowerMode::Sleep)
        } else if n.starts_with("STANDBY") {
            Some(PowerMode::Standby)
        } else if n.starts_with("IDLE") {
            Some(PowerMode::Idle)
        } else {
            None
        }
    }
}
/// The power mode a report printed (`power_mode.name`), if any.
pub fn report_mode(stdout: &str) -> Option<PowerMode> {
    let v: Value = serde_json::from_str(stdout).ok()?;
    v.get("power_mode")?.get("name")?.as_str().and_then(PowerMode::from_smartctl)
}

/// A skip: exit bit 1 with an `information` message `Device is in MODE mode, exit(N)`. The mode
/// is `power_mode.name` when printed, else the message's. `None` when this is not a skip.
pub fn parse_skip(stdout: &str) -> Option<PowerMode> {
    let v: Value = serde_json::from_str(stdout).ok()?;
    let sc = v.get("smartctl")?;
    let exit = sc.get("exit_status").and_then(Value::as_u64).unwrap_or(0);
    if exit & 0x02 == 0 {
        return None;
    }
    let said = sc.get("messages")?.as_array()?.iter().find_map(|m| {
        let text = m.get("string")?.as_str()?;
        let rest = text.strip_prefix("Device is in ")?;
        (m.get("severity").and_then(Value::as_str) == Some("information")).then_some(())?;
        Some(rest.split(" mode, exit(").next()?.to_string())
    })?;
    v.get("power_mode").and_then(|p| p.get("name")).and_then(Value::as_str).and_then(PowerMode::from_smartctl).or_else(|| PowerMode::from_smartctl(&said))
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names() {
        let m = |s: &str| PowerMode::from_smartctl(s).map(PowerMode::as_str);
        assert_eq!(
            [m("ACTIVE or IDLE"), m("STANDBY"), m("STANDBY_Y"), m("STANDBY (OS)"), m("SLEEP"), m("IDLE_B"), m("IDLE BY TIMER"), m("LOW POWER"), m("bogus")],
            [Some("active"), Some("standby"), Some("standby"), Some("standby"), Some("sleep"), Some("idle"), Some("idle"), Some("sleep"), None]
        );
        assert_eq!(PowerCheck::parse("standby"), Some(PowerCheck::Standby));
        assert_eq!(PowerCheck::parse("STANDBY"), None);
    }
}
