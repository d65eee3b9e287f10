//! The records of NVMe power-state changes ([`ChangeLog`]): every attempted change is a
//! `PowerStateChange` plus an `event`, in the wire format, stamped by the caller's clock; and
//! [`recover_records`], which restores the state files a killed governor command left behind and
//! records each result (`run` and every governor command call it first). A new knob records
//! through [`ChangeLog::change_of`] with its own [`Knob`].

use super::tools::tag_of;
use crate::clock::Clock;
use crate::events::event;
use std::path::Path;
use wattflip_drives::{recover, Knob, NvmeCli, RestoreError};
use wattflip_proto::v1;
use wattflip_proto::v1::PowerStateOutcome as Outcome;

/// Collects what a governor command did, as the wire format carries it.
#[derive(Debug)]
pub struct ChangeLog {
    pub batch: v1::Batch,
    pub clock: Clock,
}

impl ChangeLog {
    pub fn new(clock: Clock) -> Self {
        ChangeLog { batch: v1::Batch::default(), clock }
    }

    /// A `PowerStateChange` and its `event`.
    #[allow(clippy::too_many_arguments)]
    pub fn change(&mut self, tag: &str, serial: &str, from: u32, to: u32, observed: u32, outcome: Outcome, detail: String) {
        self.change_of(Knob::PowerState, tag, serial, from, to, observed, outcome, detail)
    }

    /// A change of `knob`: the event names PS numbers for FID 02h and modes for Intel C6h.
    #[allow(clippy::too_many_arguments)]
    pub fn change_of(&mut self, knob: Knob, tag: &str, serial: &str, from: u32, to: u32, observed: u32, outcome: Outcome, detail: String) {
        let label = |v: u32| match knob {
            Knob::PowerState => format!("PS{v}"),
            Knob::IntelPowerGovernor => format!("Intel mode {v}"),
        };
        let t = self.clock.utc_now();
        let name = wattflip_proto::schema::outcome_name(outcome);
        self.batch.power_state_changes.push(v1::PowerStateChange {
            time_ns: t,
            device: tag.into(),
            serial: serial.trim().into(),
            from_state: from,
            to_state: to,
            observed_state: observed,
            outcome: outcome as i32,
            detail: detail.clone(),
        });
        let severity = match outcome {
            Outcome::Applied | Outcome::Restored => v1::Severity::Info,
            Outcome::Failed if to == from => v1::Severity::Critical,
            _ => v1::Severity::Warning,
        };
        let mut e = event(t, "power_state_change", severity, tag, format!("{tag}: {} -> {}: {name}: {detail}", label(from), label(to)));
        for (k, v) in [("outcome", name.to_string()), ("from", from.to_string()), ("to", to.to_string()), ("observed", observed.to_string())] {
            e.attributes.insert(k.into(), v);
        }
        tracing::info!("{}", e.message);
        self.batch.events.push(e);
    }

    /// Appends another recorder's records.
    pub fn absorb(&mut self, other: ChangeLog) {
        let b = other.batch;
        self.batch.power.extend(b.power);
        self.batch.temperature.extend(b.temperature);
        self.batch.probe_runs.extend(b.probe_runs);
        self.batch.power_state_changes.extend(b.power_state_changes);
        self.batch.events.extend(b.events);
        self.batch.nvme_smart.extend(b.nvme_smart);
    }

    pub fn event(&mut self, kind: &str, severity: v1::Severity, device: &str, message: String) {
        let e = event(self.clock.utc_now(), kind, severity, device, message);
        self.batch.events.push(e);
    }
}

/// Restores every state file a crashed run left behind, and records each result.
pub fn recover_records(state_dir: &Path, nvme: &NvmeCli, rec: &mut ChangeLog) {
    let found = match recover(state_dir, nvme) {
        Ok(f) => f,
        Err(e) => {
            rec.event("power_state_recover_failed", v1::Severity::Critical, "", e.to_string());
            tracing::error!("{e}");
            return;
        }
    };
    for r in found {
        let (device, serial) = r.record.as_ref().map(|s| (tag_of(&s.device), s.serial.clone())).unwrap_or_default();
        match r.result {
            Ok(rep) => {
                let detail = format!(
                    "recovered after an unclean exit from {} ({})",
                    r.path.display(),
                    if rep.wrote { "original state written back and verified" } else { "drive was already in it" }
                );
                tracing::warn!(device = %rep.device, "{detail}");
                // A C6h file restores an Intel mode: say so in the record (detail) and the event.
                let knob = Knob::from_feature_id(rep.feature_id).unwrap_or(Knob::PowerState);
                let detail = if knob == Knob::PowerState { detail } else { format!("{knob}: {detail}") };
                rec.change_of(knob, &tag_of(&rep.device), &serial, rep.state, rep.state, rep.state, Outcome::Restored, detail);
            }
            // A live command owns that guard and restores it itself: not a failure, and not ours.
            Err(e @ RestoreError::HeldByLiveOwner { .. }) => {
                tracing::warn!("{e}");
                rec.event("power_state_held", v1::Severity::Warning, &device, e.to_string());
            }
            Err(e) => {
                tracing::error!("{e}");
                rec.event("power_state_recover_failed", v1::Severity::Critical, &device, e.to_string());
            }
        }
    }
}
