//! A Hello the collector refused as too large (issue 32 §3): sending the same one again would be
//! refused for ever, so the exporter makes it fit. The collector answers `resource_exhausted` with
//! its limit in the status metadata ([`LIMIT_BYTES`], [`REFUSED_MESSAGE`] = `hello`, the collector's
//! `service::oversized`); [`shrink`] then leaves entries out of the end of the Hello's longest
//! inventory lists until it fits with a margin, and returns a `hello_truncated` event saying what
//! was left out (samples still flow; only those inventory entries are missing at the collector).
//!
//! To let another inventory list be shortened, add it to [`LISTS`], [`len_of`] and [`pop`].

use crate::events::event;
use prost::Message as _;
use wattflip_proto::v1;

/// Status metadata: the collector's message size limit in bytes (`service::oversized` there).
pub const LIMIT_BYTES: &str = "wattflip-limit-bytes";
/// Status metadata: which message the collector refused.
pub const REFUSED_MESSAGE: &str = "wattflip-refused-message";

/// Room left below the limit: `time_ns` (at most 10 bytes) changes with every connection.
const MARGIN: usize = 64;

/// The collector's limit when `status` refuses our Hello for its size.
pub fn refused_limit(status: &tonic::Status) -> Option<usize> {
    let md = status.metadata();
    let hello = md.get(REFUSED_MESSAGE).and_then(|v| v.to_str().ok()) == Some("hello");
    (status.code() == tonic::Code::ResourceExhausted && hello).then(|| md.get(LIMIT_BYTES)?.to_str().ok()?.parse().ok()).flatten()
}

/// The inventory lists that can be shortened, by name (the event's attribute names).
const LISTS: [&str; 4] = ["temperature_sensors", "power_sources", "storage_devices", "drive_thermal_limits"];

fn len_of(inv: &v1::Inventory, list: &str) -> usize {
    match list {
        "temperature_sensors" => inv.temperature_sensors.len(),
        "power_sources" => inv.power_sources.len(),
        "storage_devices" => inv.storage_devices.len(),
        _ => inv.drive_thermal_limits.len(),
    }
}

fn pop(inv: &mut v1::Inventory, list: &str) {
    match list {
        "temperature_sensors" => drop(inv.temperature_sensors.pop()),
        "power_sources" => drop(inv.power_sources.pop()),
        "storage_devices" => drop(inv.storage_devices.pop()),
        _ => drop(inv.drive_thermal_limits.pop()),
    }
}

/// Shrinks `hello` below `limit` bytes (less [`MARGIN`]) by leaving out the last entries of its
/// longest inventory list, one at a time. Returns the event to report, or `Err` with why it cannot
/// fit (labels alone too large, or a limit below the margin).
pub fn shrink(hello: &mut v1::Hello, limit: usize, now_ns: i64) -> Result<v1::Event, String> {
    let before = hello.encoded_len();
    let budget = limit.saturating_sub(MARGIN);
    let mut dropped = [0usize; LISTS.len()];
    let mut inv = hello.inventory.take().unwrap_or_default();
    let rest = hello.encoded_len();
    // Field 6 of Hello; recomputed per entry left out: a Hello has at most a few thousand.
    while rest + prost::encoding::message::encoded_len(6, &inv) > budget {
        let Some(i) = (0..LISTS.len()).filter(|&i| len_of(&inv, LISTS[i]) > 0).max_by_key(|&i| len_of(&inv, LISTS[i])) else {
            hello.inventory = Some(inv);
            return Err(format!("even without any inventory entries the Hello is above the collector's limit of {limit} bytes: shorten the agent's labels, or raise the collector's limits.max_message_bytes"));
        };
        pop(&mut inv, LISTS[i]);
        dropped[i] += 1;
    }
    hello.inventory = Some(inv);
    let after = hello.encoded_len();
    let left_out: Vec<String> = LISTS.iter().zip(dropped).filter(|(_, n)| *n > 0).map(|(l, n)| format!("{n} {}", l.replace('_', " "))).collect();
    let msg = format!(
        "the collector refused the Hello of {before} bytes (its limit: {limit} bytes, limits.max_message_bytes); sent one of {after} bytes without the last {} of the inventory: their samples are still sent, only their inventory entries are missing; raise the collector's limit to send them all",
        left_out.join(", ")
    );
    let mut e = event(now_ns, "hello_truncated", v1::Severity::Warning, "", msg);
    e.attributes.insert("hello_bytes".into(), before.to_string());
    e.attributes.insert("sent_bytes".into(), after.to_string());
    e.attributes.insert("limit_bytes".into(), limit.to_string());
    for (l, n) in LISTS.iter().zip(dropped) {
        e.attributes.insert(format!("dropped_{l}"), n.to_string());
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sensor(i: usize) -> v1::TemperatureSensor {
        v1::TemperatureSensor { sensor: format!("sensor {i} {}", "x".repeat(200)), ..Default::default() }
    }

    /// 1,100 temperature sensors with long labels and 2 power sources against a 64 KiB limit: only
    /// temperature sensors go (the longest list), from the end, until it fits.
    #[test]
    fn leaves_out_the_end_of_the_longest_list_until_it_fits() {
        let inv = v1::Inventory {
            temperature_sensors: (0..1100).map(sensor).collect(),
            power_sources: vec![v1::PowerSource { zone: "psu".into(), ..Default::default() }; 2],
            ..Default::default()
        };
        let mut h = v1::Hello { agent_id: "a".into(), inventory: Some(inv), ..Default::default() };
        let before = h.encoded_len();
        let e = shrink(&mut h, 64 << 10, 5).unwrap();
        let after = h.encoded_len();
        let kept = h.inventory.as_ref().unwrap().temperature_sensors.len();
        // The largest prefix that fits: the next sensor would not have.
        let one = prost::encoding::message::encoded_len(3, &sensor(kept));
        assert!(after <= (64 << 10) - MARGIN && after + one > (64 << 10) - MARGIN, "{after} + {one}");
        assert_eq!(h.inventory.as_ref().unwrap().temperature_sensors.last().unwrap().sensor, sensor(kept - 1).sensor);
        assert_eq!(h.inventory.as_ref().unwrap().power_sources.len(), 2);
        assert_eq!(e.kind, "hello_truncated");
        assert_eq!(e.attributes["dropped_temperature_sensors"], (1100 - kept).to_string());
        assert_eq!(e.attributes["dropped_power_sources"], "0");
        assert_eq!((e.attributes["hello_bytes"].as_str(), e.attributes["sent_bytes"].as_str()), (before.to_string().as_str(), after.to_string().as_str()));
        assert!(e.message.contains(&format!("without the last {} temperature sensors", 1100 - kept)), "{}", e.message);
        // Labels alone above the limit: it says so and changes nothing it cannot.
        let mut big = v1::Hello { labels: [("k".to_string(), "v".repeat(4096))].into(), ..Default::default() };
        assert!(shrink(&mut big, 2048, 5).unwrap_err().contains("shorten the agent's labels"));
    }

    #[test]
    fn only_a_hello_refusal_with_a_limit_counts() {
        let mut s = tonic::Status::resource_exhausted("too big");
        assert_eq!(refused_limit(&s), None);
        s.metadata_mut().insert(REFUSED_MESSAGE, "hello".parse().unwrap());
        s.metadata_mut().insert(LIMIT_BYTES, "4194304".parse().unwrap());
        assert_eq!(refused_limit(&s), Some(4_194_304));
        let mut other = tonic::Status::invalid_argument("x");
        *other.metadata_mut() = s.metadata().clone();
        assert_eq!(refused_limit(&other), None);
    }
}
