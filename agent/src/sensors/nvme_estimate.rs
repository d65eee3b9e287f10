//! The "datasheet" power of an NVMe drive: the maximum power (MP) of its current power state from
//! the Power State Descriptor table, labelled `estimated`. The uFLIP energy paper shows that this
//! kind of estimate (datasheet watts × time) is off from measured energy by 2–3× (docs/uflip-method.md §11.7);
//! wattflip reports it next to the measured sources so the difference can be shown, and uses it
//! as the `datasheet_ratio` of per-run energy. The current state is re-read at most every
//! `min_interval` (an admin command per read), since the governor may change it.

use super::{Flags, PowerReading, PowerSensor, SensorError};
use std::time::Duration;
use wattflip_drives::{Governor, NvmeCli, PowerState};
use wattflip_proto::units::Watts;
use wattflip_proto::v1;

pub struct NvmeEstimate {
    governor: Governor,
    controller: String,
    states: Vec<PowerState>,
}

impl NvmeEstimate {
    /// `None` when the drive reports no power states.
    pub fn new(nvme: NvmeCli, controller: &str, states: Vec<PowerState>) -> Option<Self> {
        let governor = Governor::power_state(nvme, controller, states.clone()).ok()?;
        Some(NvmeEstimate { governor, controller: controller.to_string(), states })
    }

    /// Max power of the current state, and the state.
    pub fn current(&self) -> Result<(u32, Watts), SensorError> {
        let command = format!("nvme get-feature {} --feature-id=2", self.controller);
        let state = self.governor.current().map_err(|e| SensorError::Command { command: command.clone(), message: e.to_string() })?;
        let mp = self
            .states
            .iter()
            .find(|p| u32::from(p.index) == state)
            .and_then(|p| p.max_power)
            .ok_or_else(|| SensorError::Command { command, message: format!("power state {state} has no maximum power in the PSD table") })?;
        Ok((state, Watts(mp.0)))
    }
}

impl PowerSensor for NvmeEstimate {
    fn describe(&self) -> v1::PowerSource {
        v1::PowerSource {
            source: "nvme_estimate".into(),
            zone: self.controller.trim_start_matches("/dev/").to_string(),
            scope: "drive".into(),
            method: v1::Method::Estimated as i32,
            counter: false,
            path: format!("{} PSD max power of the current state", self.controller),
            enabled: true,
            note: String::new(),
            shunt_ohms: 0.0,
        }
    }

    fn read(&mut self, _now_ns: u64) -> Result<Option<PowerReading>, SensorError> {
        let (_, w) = self.current()?;
        Ok(Some(PowerReading { watts: w, joules: None, interval_ns: 0, flags: Flags::NONE }))
    }

    fn min_interval(&self) -> Duration {
        Duration::from_secs(10)
    }
}
