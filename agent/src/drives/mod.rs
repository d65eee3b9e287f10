//! Storage devices of this host:
//! - `block`: the sysfs block inventory (no root, no tools);
//! - `tools`: nvme-cli and smartctl (probed once, "not available" when missing) and what they
//!   discover, merged into the inventory;
//! - `monitor`: SMART polling → drive temperatures (`nvme_cli`, `smartctl`), `nvme_smart`,
//!   power modes (`-n standby`), critical-warning events; `identify`: the identity of a disk
//!   asleep at discovery, read when a poll finds it awake; `reading`: one drive's tool calls and
//!   record conversions; `pool`: the bounded worker pool `run` reads the drives with, each on its
//!   own interval, so a hung drive delays only itself;
//! - `governor`: one NVMe controller's power states (show, set, Intel mode) with the crash-safe
//!   restore guard; `changes`: the records of every change and the restore after a crash;
//! - `sweep`: the uFLIP patterns a governor sweep measures per power state (the sweep itself is
//!   `probes::power_sweep`, since it runs probes);
//! - `config`: `[drives]` of the agent config; `report`: what `inventory` prints about drives.
//!
//! A new drive tool is a sibling module called from `tools` (discovery, through the injected
//! `CommandRunner`) or `monitor` (periodic readings), with its switch and path in `config`.

pub mod block;
pub mod changes;
pub mod config;
pub mod governor;
pub mod identify;
pub mod monitor;
pub mod pool;
pub mod reading;
pub mod report;
pub mod sweep;
pub mod tools;

pub use config::DrivesConfig;
