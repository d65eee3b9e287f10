//! Storage devices of this host. `block` reads the inventory from sysfs (no root, no tools);
//! richer sources (nvme-cli, smartctl, power states) plug in here as sibling modules.

pub mod block;
