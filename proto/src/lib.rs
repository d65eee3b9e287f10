//! wattflip's wire format, and only that: the gRPC messages of `wattflip.v1` ([`v1`]), their
//! checked domain form ([`domain`]), the InfluxDB schema ([`schema`]) and line protocol
//! ([`lineproto`], [`encoder`]). Add a message in `proto/wattflip/v1/*.proto` (new field numbers
//! only, never reuse one) and it appears in [`v1`].
//!
//! Units live in `wattflip-units` (re-exported as [`units`] so `wattflip_proto::units::Watts` and
//! the domain types keep one definition); TLS, config loading, metrics and CLI plumbing live in
//! `wattflip-infra`.

pub mod codec;
pub mod domain;
pub mod encoder;
pub mod lineproto;
pub mod schema;
pub use wattflip_units as units;

/// Generated prost messages and tonic client/server for package `wattflip.v1`: generated from
/// `wattflip/v1/ingest.proto` into `generated/` and committed (`tests/generated.rs` keeps it
/// equal to what the .proto gives; `WATTFLIP_REGENERATE=1` rewrites it).
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    include!("../generated/wattflip.v1.rs");
}

impl v1::ProbeRun {
    /// The optional per-run energy fields (docs/uflip-method.md §11.4) by their schema name: validated and
    /// encoded from this one list.
    pub fn energy_fields(&self) -> [(&'static str, Option<f64>); 14] {
        [
            ("energy_j", self.energy_j),
            ("energy_above_idle_j", self.energy_above_idle_j),
            ("background_energy_j", self.background_energy_j),
            ("background_s", self.background_s),
            ("idle_baseline_w", self.idle_baseline_w),
            ("idle_spread_w", self.idle_spread_w),
            ("j_per_mib", self.j_per_mib),
            ("j_per_io", self.j_per_io),
            ("datasheet_ratio", self.datasheet_ratio),
            ("energy_u95_j", self.energy_u95_j),
            ("energy_above_idle_u95_j", self.energy_above_idle_u95_j),
            ("background_energy_u95_j", self.background_energy_u95_j),
            ("idle_u95_w", self.idle_u95_w),
            ("j_per_mib_u95", self.j_per_mib_u95),
        ]
    }

    /// The optional governor-sweep power fields (W) by their schema name: validated and encoded
    /// from this one list, like [`Self::energy_fields`].
    pub fn sweep_power_fields(&self) -> [(&'static str, Option<f64>); 2] {
        [("power_state_max_w", self.power_state_max_w), ("power_w", self.power_w)]
    }
}

impl v1::EfficiencyPhase {
    /// The optional metrics of an efficiency phase by their schema name, in field-number order
    /// (each `<metric>` followed by its `<metric>_u95` where it has one): validated, encoded and
    /// exported from this one list.
    pub fn metric_fields(&self) -> [(&'static str, Option<f64>); 20] {
        [
            ("watts", self.watts),
            ("watts_u95", self.watts_u95),
            ("watts_per_tb", self.watts_per_tb),
            ("watts_per_tb_u95", self.watts_per_tb_u95),
            ("gb_per_watt", self.gb_per_watt),
            ("gb_per_watt_u95", self.gb_per_watt_u95),
            ("iops", self.iops),
            ("mib_per_s", self.mib_per_s),
            ("iops_per_watt", self.iops_per_watt),
            ("iops_per_watt_u95", self.iops_per_watt_u95),
            ("mib_per_s_per_watt", self.mib_per_s_per_watt),
            ("mib_per_s_per_watt_u95", self.mib_per_s_per_watt_u95),
            ("joules_per_io", self.joules_per_io),
            ("joules_per_io_u95", self.joules_per_io_u95),
            ("joules_per_mib", self.joules_per_mib),
            ("joules_per_mib_u95", self.joules_per_mib_u95),
            ("joules_per_io_above_idle", self.joules_per_io_above_idle),
            ("joules_per_io_above_idle_u95", self.joules_per_io_above_idle_u95),
            ("joules_per_mib_above_idle", self.joules_per_mib_above_idle),
            ("joules_per_mib_above_idle_u95", self.joules_per_mib_above_idle_u95),
        ]
    }

    /// Sets the metric named `name` (one of [`Self::metric_fields`]); false for another name.
    pub fn set_metric(&mut self, name: &str, v: f64) -> bool {
        let slot = match name {
            "watts" => &mut self.watts,
            "watts_u95" => &mut self.watts_u95,
            "watts_per_tb" => &mut self.watts_per_tb,
            "watts_per_tb_u95" => &mut self.watts_per_tb_u95,
            "gb_per_watt" => &mut self.gb_per_watt,
            "gb_per_watt_u95" => &mut self.gb_per_watt_u95,
            "iops" => &mut self.iops,
            "mib_per_s" => &mut self.mib_per_s,
            "iops_per_watt" => &mut self.iops_per_watt,
            "iops_per_watt_u95" => &mut self.iops_per_watt_u95,
            "mib_per_s_per_watt" => &mut self.mib_per_s_per_watt,
            "mib_per_s_per_watt_u95" => &mut self.mib_per_s_per_watt_u95,
            "joules_per_io" => &mut self.joules_per_io,
            "joules_per_io_u95" => &mut self.joules_per_io_u95,
            "joules_per_mib" => &mut self.joules_per_mib,
            "joules_per_mib_u95" => &mut self.joules_per_mib_u95,
            "joules_per_io_above_idle" => &mut self.joules_per_io_above_idle,
            "joules_per_io_above_idle_u95" => &mut self.joules_per_io_above_idle_u95,
            "joules_per_mib_above_idle" => &mut self.joules_per_mib_above_idle,
            "joules_per_mib_above_idle_u95" => &mut self.joules_per_mib_above_idle_u95,
            _ => return false,
        };
        *slot = Some(v);
        true
    }
}

impl v1::NvmeSmart {
    /// The optional counters by their schema name, in field-number order: validated and encoded
    /// from this one list. Absent means the drive or tool did not report it (or it was unreadable).
    pub fn counters(&self) -> [(&'static str, Option<u64>); 11] {
        [
            ("data_units_read", self.data_units_read),
            ("data_units_written", self.data_units_written),
            ("warning_temp_time_min", self.warning_temp_time_min),
            ("critical_temp_time_min", self.critical_temp_time_min),
            ("thm_temp1_trans_count", self.thm_temp1_trans_count),
            ("thm_temp2_trans_count", self.thm_temp2_trans_count),
            ("thm_temp1_total_time_s", self.thm_temp1_total_time_s),
            ("thm_temp2_total_time_s", self.thm_temp2_total_time_s),
            ("power_on_hours", self.power_on_hours),
            ("unsafe_shutdowns", self.unsafe_shutdowns),
            ("media_errors", self.media_errors),
        ]
    }
}

/// Version of the wire protocol this build speaks (sent in `Hello.protocol_version`).
pub const PROTOCOL_VERSION: u32 = 1;
