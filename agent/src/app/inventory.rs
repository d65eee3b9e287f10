//! `wattflip-agent inventory`: the storage devices, power sources and temperature sensors this host
//! has (the `Hello` inventory `run` would send) plus one SMART poll of the drives, as a table or
//! JSON. A new section is a field in [`inventory_json`] and a block in [`inventory_table`].

use super::session::hello;
use crate::clock::Clock;
use crate::config::Config;
use crate::drives::report::DriveReport;
use crate::sensors::discover_all;
use std::path::PathBuf;

/// `inventory`: the config's sources (or the defaults), `sysfs_root` overriding the config's.
pub fn command(config: Option<PathBuf>, sysfs_root: Option<PathBuf>, json: bool) -> anyhow::Result<()> {
    let mut cfg = match config {
        Some(c) => Config::from_file(&c)?,
        None => Config::defaults()?,
    };
    if let Some(root) = sysfs_root {
        cfg.sysfs_root = root;
    }
    let clock = Clock::new();
    let runner: std::sync::Arc<dyn wattflip_drives::CommandRunner> = std::sync::Arc::new(wattflip_drives::SystemRunner::new());
    let mut found = discover_all(&cfg.sysfs_root, &cfg.kinds, &runner);
    let drives = DriveReport::gather(&cfg.drives, &cfg.sysfs_root, runner, &clock);
    let hello = hello(&cfg, &found, &drives.inventory, drives.sensors.clone(), &clock);
    let inv = hello.inventory.unwrap_or_default();
    if json {
        let mut v = inventory_json(&inv, &mut found);
        v["drives"] = drives.json();
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}{}", inventory_table(&inv, &mut found), drives.table());
    }
    Ok(())
}

pub fn inventory_json(inv: &wattflip_proto::v1::Inventory, found: &mut crate::sensors::Discovered) -> serde_json::Value {
    use serde_json::json;
    let temps: Vec<_> = found
        .temperature
        .iter_mut()
        .map(|t| {
            let d = t.describe();
            let reading = t.read();
            json!({"source": d.source, "device": d.device, "sensor": d.sensor, "path": d.path,
                   "celsius": reading.as_ref().ok().map(|c| c.0),
                   "error": reading.err().map(|e| e.to_string())})
        })
        .collect();
    json!({
        "storage_devices": inv.storage_devices.iter().map(|d| json!({
            "name": d.name, "model": d.model, "serial": d.serial, "firmware": d.firmware,
            "capacity_bytes": d.capacity_bytes, "logical_block_size": d.logical_block_size,
            "transport": d.transport, "rotational": d.rotational, "controller": d.controller,
            "sysfs_address": d.sysfs_address})).collect::<Vec<_>>(),
        "power_sources": inv.power_sources.iter().map(|p| json!({
            "source": p.source, "zone": p.zone, "scope": p.scope, "counter": p.counter,
            "path": p.path, "usable": p.enabled, "enabled": p.enabled, "note": p.note})).collect::<Vec<_>>(),
        "temperature_sensors": temps,
        "not_available": found.unavailable,
    })
}

pub fn inventory_table(inv: &wattflip_proto::v1::Inventory, found: &mut crate::sensors::Discovered) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "Storage devices ({})", inv.storage_devices.len());
    let _ = writeln!(s, "  {:<12} {:<28} {:<20} {:>12} {:>6} {:<9} {:<10} SYSFS", "DEVICE", "MODEL", "SERIAL", "CAPACITY", "LBS", "TRANSPORT", "CONTROLLER");
    for d in &inv.storage_devices {
        let _ = writeln!(
            s,
            "  {:<12} {:<28} {:<20} {:>12} {:>6} {:<9} {:<10} {}",
            d.name,
            d.model,
            d.serial,
            // Unknown (no source reported it) shows as `?`, not as 0.
            d.capacity_bytes.map_or("?".into(), |c| format!("{:.1}GB", c as f64 / 1e9)),
            d.logical_block_size.map_or("?".into(), |b| b.to_string()),
            d.transport,
            d.controller,
            d.sysfs_address
        );
    }
    let _ = writeln!(s, "Power sources ({})", inv.power_sources.len());
    for p in &inv.power_sources {
        // Usable is what discovery's test read said (`enabled`); a usable source's note (read
        // faster than it updates, an estimated period) is a note, not a verdict.
        let state = match (p.enabled, p.note.is_empty()) {
            (true, true) => "ok".to_string(),
            (true, false) => format!("ok; note: {}", p.note),
            (false, _) => format!("NOT USABLE: {}", p.note),
        };
        let _ = writeln!(s, "  {:<6} {:<24} {:<8} {}", p.source, p.zone, p.scope, state);
    }
    let _ = writeln!(s, "Temperature sensors ({})", found.temperature.len());
    for t in found.temperature.iter_mut() {
        let d = t.describe();
        let reading = match t.read() {
            Ok(c) => format!("{c}"),
            Err(e) => format!("ERROR: {e}"),
        };
        let _ = writeln!(s, "  {:<6} {:<20} {:<16} {}", d.source, d.device, d.sensor, reading);
    }
    for n in &found.unavailable {
        let _ = writeln!(s, "Not available on this host: {n}");
    }
    s
}
