//! Which file a loop device serves, by identity: the backing file's `(device, inode)` as the loop
//! driver holds it (`LOOP_GET_STATUS64`'s `lo_device`/`lo_inode`), never its path. A path says
//! nothing once the image was deleted (`backing_file` then reads `m.img (deleted)`) or is reached
//! through a hard link or `/proc/PID/fd/N` (issue 32 §4).
//!
//! The numbers come from util-linux's `losetup --list --json -O NAME,BACK-MAJ:MIN,BACK-INO`
//! (which reads them with that ioctl) through the crate's [`CommandRunner`], so the crate stays
//! without `unsafe` and tests inject answers. To use another source of the same numbers, make
//! [`backing_ids`] read it; callers only see the map.

use crate::runner::CommandRunner;
use std::collections::BTreeMap;

/// A loop device's backing file: (major, minor) of its filesystem and its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackingId {
    /// `lo_device` split into (major, minor).
    pub dev: (u32, u32),
    /// `lo_inode`.
    pub ino: u64,
}

/// Backing identities of every attached loop device, by kernel name ("loop0"). `Err` says why
/// none could be read (losetup missing, failed, or printed something else).
pub fn backing_ids(runner: &dyn CommandRunner) -> Result<BTreeMap<String, BackingId>, String> {
    let out = runner.run("losetup", &["--list", "--json", "-O", "NAME,BACK-MAJ:MIN,BACK-INO"], None).map_err(|e| format!("cannot run losetup: {e}"))?;
    if !out.status.success() {
        return Err(format!("losetup failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim()));
    }
    // No loop device attached: losetup prints nothing at all.
    if out.stdout.iter().all(u8::is_ascii_whitespace) {
        return Ok(BTreeMap::new());
    }
    parse(&out.stdout)
}

/// Parses `losetup --json` output. Numbers may be JSON numbers or strings (util-linux versions
/// differ), and `back-maj:min` is padded with spaces.
fn parse(json: &[u8]) -> Result<BTreeMap<String, BackingId>, String> {
    let v: serde_json::Value = serde_json::from_slice(json).map_err(|e| format!("losetup printed something that is not its JSON list: {e}"))?;
    let devices = v.get("loopdevices").and_then(|d| d.as_array()).ok_or("losetup's JSON has no \"loopdevices\" list")?;
    let mut out = BTreeMap::new();
    for d in devices {
        let text = |k: &str| d.get(k).map(|x| x.as_str().map(str::to_string).unwrap_or_else(|| x.to_string()));
        let (Some(name), Some(majmin), Some(ino)) = (text("name"), text("back-maj:min"), text("back-ino")) else {
            return Err(format!("losetup's JSON entry {d} lacks name, back-maj:min or back-ino"));
        };
        let name = name.trim().trim_start_matches("/dev/").to_string();
        let dev = majmin.trim().split_once(':').and_then(|(a, b)| Some((a.trim().parse().ok()?, b.trim().parse().ok()?)));
        let (Some(dev), Ok(ino)) = (dev, ino.trim().parse::<u64>()) else {
            return Err(format!("losetup's JSON entry for {name} has an unreadable back-maj:min {majmin:?} or back-ino {ino:?}"));
        };
        out.insert(name, BackingId { dev, ino });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Output of util-linux 2.38.1's `losetup --list --json -O NAME,BACK-MAJ:MIN,BACK-INO` on this
    /// project's build machine, with the image deleted behind loop0 (padding as printed).
    const CAPTURE: &str = "{\n   \"loopdevices\": [\n      {\n         \"name\": \"/dev/loop0\",\n         \"back-maj:min\": \"     254:0  \",\n         \"back-ino\": 3366913\n      },\n      {\n         \"name\": \"/dev/loop7\",\n         \"back-maj:min\": \"259:3\",\n         \"back-ino\": \"12\"\n      }\n   ]\n}\n";

    #[test]
    fn parses_numbers_and_padded_strings() {
        let m = parse(CAPTURE.as_bytes()).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m["loop0"], BackingId { dev: (254, 0), ino: 3_366_913 });
        assert_eq!(m["loop7"], BackingId { dev: (259, 3), ino: 12 });
        let e = parse(b"{\"loopdevices\":[{\"name\":\"/dev/loop1\",\"back-maj:min\":\"x\",\"back-ino\":1}]}").unwrap_err();
        assert_eq!(e, "losetup's JSON entry for loop1 has an unreadable back-maj:min \"x\" or back-ino \"1\"");
        assert!(parse(b"nope").unwrap_err().starts_with("losetup printed something that is not its JSON list"));
    }
}
