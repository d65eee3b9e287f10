//! RAPL energy counters through powercap (`<sysfs>/class/powercap/intel-rapl:*`). Every zone is
//! reported on its own, never summed: package ⊇ core + uncore and psys ⊇ package (docs/sources-and-drives.md §1.1).
//! `energy_uj` is a 32-bit hardware counter scaled to µJ that wraps at `max_energy_range_uj`; deltas
//! are wrap-aware (Kepler's rule, docs/sources-and-drives.md §1.2). Since Linux 5.10 (PLATYPUS, CVE-2020-8694)
//! `energy_uj` is root-only, reported as a clear permission error with the usual fixes.
//! Zone identity includes the control type: `intel-rapl` (MSR) zones keep their kernel names,
//! `intel-rapl-mmio` zones are prefixed `mmio:`; an MMIO package that the MSR interface also has
//! gets scope `package_mmio`, so a fleet sum over scope `package` counts each package once
//! (docs/schema.md, "Zone identity"). The open `energy_uj` notices replacement (see `Attr`), and a
//! counter that stops while its siblings move makes its handle check the path again.
//! To support the perf PMU, add a sibling module.

use super::{read_attr, read_int, Attr, Discovered, Flags, PowerReading, PowerSensor, SensorError};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wattflip_proto::units::MicroJoules;
use wattflip_proto::v1;

const ZONE_PREFIXES: &[&str] = &["intel-rapl:", "intel-rapl-mmio:"];
const MMIO_PREFIX: &str = "intel-rapl-mmio:";
/// The hardware adds to the counter about every 976 µs (docs/sources-and-drives.md §1.2).
pub const UPDATE_PERIOD: Duration = Duration::from_micros(976);
/// A counter that has moved before and then stays still this long while a sibling moves is
/// suspect: its handle checks the path again.
const FROZEN_NS: u64 = 50_000_000;
pub const PERMISSION_HINT: &str = "energy_uj is root-only since Linux 5.10 (CVE-2020-8694); run the agent as root, \
give it CAP_DAC_READ_SEARCH (systemd AmbientCapabilities=), or add a udev/sysfsutils rule granting a group read access";

/// One RAPL zone with its wrap-aware accumulator state.
pub struct RaplZone {
    id: String,
    zone: String,
    scope: String,
    energy: Attr,
    max_range_uj: Option<u64>,
    last: Option<(u64, u64)>, // (counter µJ, monotonic ns)
    /// Monotonic ns of the last read at which any zone of this host's RAPL moved (shared).
    siblings_moved: Arc<AtomicU64>,
    /// Monotonic ns at which this counter last changed (None: it never moved yet).
    moved: Option<u64>,
    /// The stale-handle check for the current freeze was asked already.
    freeze_checked: bool,
    /// Inventory note (an MMIO duplicate of an MSR package says so).
    note: String,
}

impl RaplZone {
    /// Energy between two counter values. Wraps once at most: the sampler polls far more often
    /// than the ≥ 60 s a counter needs to wrap at 1 kW (docs/sources-and-drives.md §1.2).
    pub fn delta(prev: u64, cur: u64, max_range: Option<u64>) -> Option<MicroJoules> {
        if cur >= prev {
            Some(MicroJoules(cur - prev))
        } else {
            max_range.filter(|&m| m >= prev).map(|m| MicroJoules(m - prev + cur))
        }
    }
}

impl PowerSensor for RaplZone {
    fn describe(&self) -> v1::PowerSource {
        v1::PowerSource {
            source: "rapl".into(),
            zone: self.zone.clone(),
            scope: self.scope.clone(),
            method: v1::Method::Measured as i32,
            counter: true,
            path: self.energy.path().display().to_string(),
            enabled: true,
            note: self.note.clone(),
            shunt_ohms: 0.0,
        }
    }

    fn read(&mut self, now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
        let cur = self.energy.read_counter("an unsigned integer (µJ)", self.last.map(|l| l.0))?;
        self.account(cur, now_ns)
    }

    fn read_timed(&mut self, now: &mut dyn FnMut() -> u64) -> (u64, Result<Option<PowerReading>, SensorError>) {
        let t0 = now();
        let cur = self.energy.read_counter("an unsigned integer (µJ)", self.last.map(|l| l.0));
        let t1 = now();
        // The value was sampled somewhere within [t0, t1]: the midpoint is off by at most half
        // the read's own duration, however late the read started.
        let t = t0 + t1.saturating_sub(t0) / 2;
        (t, cur.and_then(|c| self.account(c, t)))
    }

    fn update_period(&self) -> Duration {
        UPDATE_PERIOD
    }
}

impl RaplZone {
    fn account(&mut self, cur: u64, now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
        let prev = self.last.replace((cur, now_ns));
        self.watch_freeze(prev.map(|p| p.0), cur, now_ns);
        let Some((prev_uj, prev_ns)) = prev else { return Ok(None) };
        let interval_ns = now_ns.saturating_sub(prev_ns);
        let Some(d) = RaplZone::delta(prev_uj, cur, self.max_range_uj) else {
            return Err(SensorError::CounterReset { path: self.energy.path().to_owned(), prev: prev_uj, cur });
        };
        let joules = d.to_joules();
        match joules.over_nanos(interval_ns) {
            Some(watts) => Ok(Some(PowerReading { watts, joules: Some(joules), interval_ns, flags: Flags::NONE })),
            None => Ok(None),
        }
    }

    /// A counter that moved before and is now still while a sibling moves has probably lost its
    /// file (replaced behind an open descriptor): have the next read check the path.
    fn watch_freeze(&mut self, prev: Option<u64>, cur: u64, now_ns: u64) {
        if prev.is_some_and(|p| p != cur) {
            self.moved = Some(now_ns);
            self.freeze_checked = false;
            self.siblings_moved.fetch_max(now_ns, Ordering::Relaxed);
            return;
        }
        let Some(moved) = self.moved else { return };
        let sibling = self.siblings_moved.load(Ordering::Relaxed);
        if !self.freeze_checked && now_ns.saturating_sub(moved) > FROZEN_NS && sibling > moved + FROZEN_NS {
            tracing::debug!(zone = %self.zone, "counter still while its siblings move: checking its file");
            self.energy.recheck_now();
            self.freeze_checked = true;
        }
    }
}

/// Finds every RAPL zone under `sysfs_root`. Disabled zones and zones whose counter cannot be
/// read are listed as unusable with the reason; a host without powercap gets an "unavailable" note.
/// Counters check that their path still names the open file every `recheck` ([`super::Attr`]).
pub fn discover(sysfs_root: &Path, recheck: std::time::Duration, out: &mut Discovered) {
    let dir = sysfs_root.join("class/powercap");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        out.unavailable
            .push(format!("rapl: {} does not exist: no powercap on this host (VM, unsupported CPU, or intel_rapl module not loaded)", dir.display()));
        return;
    };
    let mut ids: Vec<String> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| ZONE_PREFIXES.iter().any(|p| n.starts_with(p)))
        .collect();
    if ids.is_empty() {
        out.unavailable.push(format!("rapl: no intel-rapl zones under {}", dir.display()));
        return;
    }
    // Sort numerically by the zone path (intel-rapl:10 after intel-rapl:9); MSR zones first.
    ids.sort_by_key(|id| zone_key(id));
    // Names the MSR interface has, so an MMIO zone of the same package is not a second `package`.
    let msr_names: Vec<String> = ids
        .iter()
        .filter(|id| !id.starts_with(MMIO_PREFIX) && parent_id(id).is_none())
        .filter_map(|id| read_attr(&dir.join(id).join("name"), PERMISSION_HINT).ok())
        .collect();
    let siblings_moved = Arc::new(AtomicU64::new(0));
    for id in ids {
        let zdir = dir.join(&id);
        let name = match read_attr(&zdir.join("name"), PERMISSION_HINT) {
            Ok(n) if !n.is_empty() => n,
            _ => continue,
        };
        let (zone, scope, note) = identity(&dir, &id, &name, &msr_names);
        let max_range_uj = read_int::<u64>(&zdir.join("max_energy_range_uj"), PERMISSION_HINT, "µJ").ok();
        let mut zone_src = RaplZone {
            id: id.clone(),
            zone,
            scope,
            energy: Attr::new(zdir.join("energy_uj"), PERMISSION_HINT, recheck),
            max_range_uj,
            last: None,
            siblings_moved: siblings_moved.clone(),
            moved: None,
            freeze_checked: false,
            note,
        };
        let mut src = zone_src.describe();
        let enabled = read_attr(&zdir.join("enabled"), PERMISSION_HINT).map(|s| s != "0").unwrap_or(true);
        if !enabled {
            src.enabled = false;
            src.note = format!("zone {id} is disabled ({}/enabled = 0)", zdir.display());
            out.unusable_power.push(src);
            continue;
        }
        // Probe the counter once now, so a permission problem is reported at start, once.
        if let Err(e) = read_attr(&zdir.join("energy_uj"), PERMISSION_HINT) {
            // Not usable (`enabled` false, as a disabled zone): no budget counts on its scope.
            src.enabled = false;
            src.note = e.to_string();
            out.unusable_power.push(src);
            continue;
        }
        if max_range_uj.is_none() {
            tracing::warn!(zone = %id, "no max_energy_range_uj: a counter wrap will skip one interval");
        }
        zone_src.energy = Attr::new(zdir.join("energy_uj"), PERMISSION_HINT, recheck);
        out.power.push(Box::new(zone_src));
    }
}

/// A zone's identity: its `zone` tag (name path, `mmio:`-prefixed for the MMIO control type), its
/// scope (`<kind>_mmio` for an MMIO zone whose package the MSR interface also has) and its
/// inventory note.
fn identity(dir: &Path, id: &str, name: &str, msr_names: &[String]) -> (String, String, String) {
    let mmio = id.starts_with(MMIO_PREFIX);
    let path_name = match parent_id(id) {
        Some(parent) => {
            let pname = read_attr(&dir.join(parent).join("name"), PERMISSION_HINT).unwrap_or_else(|_| parent.to_string());
            format!("{pname}/{name}")
        }
        None => name.to_string(),
    };
    let zone = if mmio { format!("mmio:{path_name}") } else { path_name };
    let kind = name.split('-').next().unwrap_or(name).to_string();
    if !mmio || !msr_names.contains(&path_name_root(&zone)) {
        return (zone, kind, String::new());
    }
    let note = match parent_id(id) {
        None => format!("{name} through MMIO ({id}); the MSR zone {name} is the same package and the one fleet sums use"),
        Some(_) => String::new(),
    };
    (zone, format!("{kind}_mmio"), note)
}

/// `package-0` of `mmio:package-0/core`.
fn path_name_root(zone: &str) -> String {
    zone.trim_start_matches("mmio:").split('/').next().unwrap_or("").to_string()
}

fn parent_id(id: &str) -> Option<&str> {
    let (head, _) = id.rsplit_once(':')?;
    head.contains(':').then_some(head)
}

fn zone_key(id: &str) -> (String, Vec<u32>) {
    let (prefix, rest) = id.split_once(':').unwrap_or((id, ""));
    (prefix.to_string(), rest.split(':').filter_map(|n| n.parse().ok()).collect())
}

impl std::fmt::Debug for RaplZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RaplZone({} {})", self.id, self.zone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrap_aware_delta() {
        assert_eq!(RaplZone::delta(100, 250, Some(1000)), Some(MicroJoules(150)));
        assert_eq!(RaplZone::delta(900, 50, Some(1000)), Some(MicroJoules(150)));
        assert_eq!(RaplZone::delta(900, 50, None), None);
        assert_eq!(RaplZone::delta(u64::from(u32::MAX), 0, Some(u64::from(u32::MAX))), Some(MicroJoules(0)));
    }

    #[test]
    fn parents_and_ordering() {
        assert_eq!(parent_id("intel-rapl:0:1"), Some("intel-rapl:0"));
        assert_eq!(parent_id("intel-rapl:0"), None);
        let mut v = vec!["intel-rapl:10", "intel-rapl:9", "intel-rapl:0:1", "intel-rapl:0"];
        v.sort_by_key(|id| zone_key(id));
        assert_eq!(v, vec!["intel-rapl:0", "intel-rapl:0:1", "intel-rapl:9", "intel-rapl:10"]);
    }
}
