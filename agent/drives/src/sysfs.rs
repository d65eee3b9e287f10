//! `/sys/class/nvme/*`: controllers and their namespaces, readable without privileges.
//!
//! The sysfs root (normally `/sys`) is a parameter so tests walk checked-in trees and containers
//! can mount the host's `/sys` elsewhere. Per controller we read `model`, `serial`,
//! `firmware_rev`, `transport`, `address`; per namespace directory (`nvme0n1`, or the hidden
//! path node `nvme0c0n1` under native multipath) `size` (always 512-byte sectors) and
//! `queue/logical_block_size`. Strings are space-padded by the controller; we trim.
//!
//! "No NVMe" (the class directory is missing) is an empty result, not an error. A controller
//! whose files cannot be read is reported in [`SysfsScan::problems`] and skipped; the others
//! are still returned. To read another attribute, add a field and one `read_trimmed` call.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// A namespace under a controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysfsNamespace {
    /// Block device name (`nvme0n1`); for a hidden path node `nvme0c1n1` this is the head `nvme0n1`.
    pub name: String,
    /// Directory name as found (`nvme0n1` or `nvme0c1n1`).
    pub sysfs_name: String,
    /// `size` × 512.
    pub capacity_bytes: Option<u64>,
    /// `queue/logical_block_size`.
    pub logical_block_size: Option<u32>,
}

/// One `/sys/class/nvme/nvmeN`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysfsController {
    /// `nvme0`.
    pub name: String,
    /// `model` (trimmed).
    pub model: String,
    /// `serial` (trimmed).
    pub serial: String,
    /// `firmware_rev` (trimmed).
    pub firmware: String,
    /// `transport` (`pcie`, `tcp`, `rdma`, `fc`, `loop`).
    pub transport: Option<String>,
    /// `address` (PCI address for pcie).
    pub address: Option<String>,
    /// Namespaces found under the controller directory.
    pub namespaces: Vec<SysfsNamespace>,
}

/// A sysfs file that could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}; check that the sysfs root is right and readable (it needs no privileges)")]
pub struct SysfsError {
    /// The file or directory.
    pub path: PathBuf,
    /// The OS error.
    #[source]
    pub source: io::Error,
}

/// What a scan found.
#[derive(Debug, Default)]
pub struct SysfsScan {
    /// Controllers, sorted by name.
    pub controllers: Vec<SysfsController>,
    /// Controllers skipped, with the reason.
    pub problems: Vec<SysfsError>,
}

/// Reads `<sysfs_root>/class/nvme/*`.
pub fn scan_nvme(sysfs_root: &Path) -> SysfsScan {
    let class = sysfs_root.join("class").join("nvme");
    let mut scan = SysfsScan::default();
    let entries = match fs::read_dir(&class) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return scan,
        Err(source) => {
            scan.problems.push(SysfsError { path: class, source });
            return scan;
        }
    };
    let mut names: Vec<String> =
        entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| is_controller_name(n)).collect();
    names.sort_by_key(|n| natural_key(n));
    for name in names {
        match read_controller(&class.join(&name), &name) {
            Ok(c) => scan.controllers.push(c),
            Err(e) => scan.problems.push(e),
        }
    }
    scan
}

fn is_controller_name(n: &str) -> bool {
    n.strip_prefix("nvme").is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// `nvme10` sorts after `nvme9`.
fn natural_key(n: &str) -> (usize, String) {
    (n.len(), n.to_string())
}

fn read_trimmed(path: &Path) -> Result<String, SysfsError> {
    fs::read_to_string(path).map(|s| s.trim().to_string()).map_err(|source| SysfsError { path: path.to_path_buf(), source })
}

fn read_optional(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn read_controller(dir: &Path, name: &str) -> Result<SysfsController, SysfsError> {
    let model = read_trimmed(&dir.join("model"))?;
    let serial = read_trimmed(&dir.join("serial"))?;
    let firmware = read_optional(&dir.join("firmware_rev")).unwrap_or_default();
    let mut namespaces = Vec::new();
    let entries = fs::read_dir(dir).map_err(|source| SysfsError { path: dir.to_path_buf(), source })?;
    let mut ns_names: Vec<String> =
        entries.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).filter_map(|n| head_name(&n).map(|_| n)).collect();
    ns_names.sort_by_key(|n| natural_key(n));
    for sysfs_name in ns_names {
        let ns_dir = dir.join(&sysfs_name);
        let capacity_bytes = read_optional(&ns_dir.join("size")).and_then(|s| s.parse::<u64>().ok()).and_then(|sectors| sectors.checked_mul(512));
        let logical_block_size = read_optional(&ns_dir.join("queue").join("logical_block_size")).and_then(|s| s.parse().ok());
        let Some(name) = head_name(&sysfs_name) else {
            continue;
        };
        namespaces.push(SysfsNamespace { name, sysfs_name, capacity_bytes, logical_block_size });
    }
    Ok(SysfsController {
        name: name.to_string(),
        model,
        serial,
        firmware,
        transport: read_optional(&dir.join("transport")),
        address: read_optional(&dir.join("address")),
        namespaces,
    })
}

/// `nvme0n1` → `nvme0n1`; `nvme0c1n1` → `nvme0n1`; anything else → None.
fn head_name(n: &str) -> Option<String> {
    let rest = n.strip_prefix("nvme")?;
    let subsys: String = rest.chars().take_while(char::is_ascii_digit).collect();
    if subsys.is_empty() {
        return None;
    }
    let mut after = &rest[subsys.len()..];
    if let Some(c) = after.strip_prefix('c') {
        let ctrl: String = c.chars().take_while(char::is_ascii_digit).collect();
        if ctrl.is_empty() {
            return None;
        }
        after = &c[ctrl.len()..];
    }
    let nsid = after.strip_prefix('n')?;
    if nsid.is_empty() || !nsid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(format!("nvme{subsys}n{nsid}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(head_name("nvme0n1").as_deref(), Some("nvme0n1"));
        assert_eq!(head_name("nvme0c1n2").as_deref(), Some("nvme0n2"));
        assert_eq!(head_name("nvme0"), None);
        assert_eq!(head_name("hwmon1"), None);
        assert_eq!(head_name("ng0n1"), None);
        assert!(is_controller_name("nvme12") && !is_controller_name("nvme-fabrics"));
    }
}
