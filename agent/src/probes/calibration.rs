//! The calibration store (docs/uflip-method.md §6.2–6.3): IgnoreIO/IOCount per baseline from a target's
//! preparation runs, kept in a result folder and reused by later probes of the same target, from
//! the command line and from schedules.
//!
//! One file per target, `<out>/calibration/<key>.json`, keyed by the target's identity: the device
//! serial/wwid/`loop:<backing file>` of a block device (the identity destroy consent uses, stable
//! across `/dev/sdX` renames), or the canonical path of a file. So two devices calibrated into one
//! folder keep their own counts. `<out>/calibration.json` also holds the latest calibration, for
//! people and for stores written before the per-target files; lookups use it only when its target
//! is the one asked for.

#[cfg(test)]
use super::PauseChoice;
use super::{open_target_with, plan_options, run_plan, ProbeArgs, ProbeCmdError, Progress, ValuesProfile};
use indicatif::ProgressBar;
use std::path::{Path, PathBuf};
use wattflip_uflip::{self as uflip, ProbeReport, Target, TargetKind};

/// A calibration of one target.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StoredCalibration {
    /// The target's identity (serial, `loop:<file>`, or its path for a file).
    pub target: String,
    /// The store key: the identity of a block device, the canonical path of a file. Empty in
    /// stores written before keys existed.
    #[serde(default)]
    pub key: String,
    pub created_ns: u64,
    pub counts: uflip::BaselineTable,
    /// What the SPE run showed (reads after random writes slower, by how much, for how long);
    /// absent in stores written before SPE was one run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spe: Option<uflip::SpeEffect>,
}

/// The latest calibration of a result folder (and the whole store of older versions).
pub const CALIBRATION_FILE: &str = "calibration.json";
/// The folder of per-target calibrations inside a result folder.
pub const CALIBRATION_DIR: &str = "calibration";

fn identity(report: &ProbeReport) -> String {
    report.target.identity.clone().or_else(|| report.target.serial.clone()).unwrap_or_else(|| report.target.path.display().to_string())
}

fn canonical(path: &Path) -> String {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()).display().to_string()
}

/// The store key of an opened target.
pub fn key_of_target(t: &Target) -> String {
    key_of_info(&uflip::TargetInfo::from(t))
}

/// The store key of a report's target (the same key as [`key_of_target`] for the target opened).
pub fn key_of_info(t: &uflip::TargetInfo) -> String {
    match t.kind {
        TargetKind::Block => t.identity.clone().or_else(|| t.serial.clone()).unwrap_or_else(|| canonical(&t.path)),
        TargetKind::File => canonical(&t.path),
    }
}

/// The store key of the target at `path`, without opening it (same result as [`key_of_target`]).
pub fn key_of_path(path: &Path) -> String {
    Target::block_identity(path, &uflip::HostRoots::default()).unwrap_or_else(|| canonical(path))
}

/// Where the calibration of `key` lives in `out`.
pub fn calibration_path(out: &Path, key: &str) -> PathBuf {
    keyed_path(out, CALIBRATION_DIR, key)
}

/// The file of `key` in the per-target folder `dir` of `out`: the key made file-name safe, plus a
/// hash of the exact key so two keys that differ only in replaced characters never share a file.
pub fn keyed_path(out: &Path, dir: &str, key: &str) -> PathBuf {
    let safe: String =
        key.trim_start_matches('/').chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' }).take(100).collect();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    out.join(dir).join(format!("{safe}-{h:016x}.json"))
}

/// Writes `c` as the calibration of its key in `out` and as the folder's latest; returns the
/// per-target file. Each file is replaced by a rename, so a probe reading it concurrently sees
/// the old or the new calibration, never half of one.
pub fn store(out: &Path, c: &StoredCalibration) -> Result<PathBuf, ProbeCmdError> {
    let path = calibration_path(out, &c.key);
    let text = serde_json::to_vec_pretty(c).unwrap_or_default();
    for p in [&path, &out.join(CALIBRATION_FILE)] {
        let dir = p.parent().unwrap_or(out);
        std::fs::create_dir_all(dir).map_err(|e| ProbeCmdError::Output { path: dir.to_owned(), source: e })?;
        let tmp = p.with_extension("json.tmp");
        std::fs::write(&tmp, &text).map_err(|e| ProbeCmdError::Output { path: tmp.clone(), source: e })?;
        std::fs::rename(&tmp, p).map_err(|e| ProbeCmdError::Output { path: p.clone(), source: e })?;
    }
    Ok(path)
}

fn read(path: &Path) -> Option<StoredCalibration> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The stored calibration of `target` in `out`, with the file it came from.
pub fn stored_calibration(out: &Path, target: &Path) -> Option<(StoredCalibration, PathBuf)> {
    let key = key_of_path(target);
    let own = calibration_path(out, &key);
    if let Some(c) = read(&own).filter(|c| c.key == key) {
        return Some((c, own));
    }
    // A store from before per-target files: one calibration.json, matched by identity or path.
    let legacy = out.join(CALIBRATION_FILE);
    let c = read(&legacy)?;
    let path = target.display().to_string();
    let matches = if c.key.is_empty() { c.target == path || c.target == key } else { c.key == key };
    matches.then_some((c, legacy))
}

/// Gives `a` the stored calibration of its target from its result folder, unless the plan is the
/// quick one (its short demo runs ignore calibrations) or counts are already set. The one lookup
/// of the `probe` command and of scheduled probes.
pub fn apply_stored_calibration(a: &mut ProbeArgs) -> Option<(StoredCalibration, PathBuf)> {
    if a.profile() == ValuesProfile::Quick || a.counts.is_some() {
        return None;
    }
    let (c, path) = stored_calibration(&a.out, &a.target)?;
    a.counts = Some(c.counts.clone());
    Some((c, path))
}

/// Runs the preparation runs only (SPE and the four SIO runs), derives IgnoreIO and IOCount per
/// baseline, and stores them for this target in `<out>` (see the module docs); returns the file.
/// Each completed run is logged. When `a.stop` is set, the IO stops between two IOs and the
/// completed runs come back in `ProbeError::Interrupted`; nothing is stored then (a partial
/// calibration would size later probes with default counts for the baselines it missed).
pub fn calibrate(a: &ProbeArgs, show_progress: bool) -> Result<(ProbeReport, StoredCalibration, PathBuf), ProbeCmdError> {
    let target = open_target_with(&a.target, a.size, &a.destroy_consent, a.overwrite_signatures)?;
    let mut o = plan_options(a, target.size);
    o.benches = Vec::new();
    o.prepare = true;
    let plan = uflip::plan(&o);
    let bar = if show_progress { ProgressBar::new(plan.runs.len() as u64) } else { ProgressBar::hidden() };
    let mut progress = Progress { bar, planner: None, log_runs: true };
    let report = run_plan(&target, &plan, &mut progress, a.stop.as_deref());
    progress.bar.finish_and_clear();
    let report = report?;
    let counts = uflip::calibrate_from_report(&report, &uflip::CalibrationRule::default(), &o.counts);
    let spe = uflip::spe_from_report(&report, &uflip::CalibrationRule::default());
    let stored = StoredCalibration { target: identity(&report), key: key_of_target(&target), created_ns: report.started_ns, counts, spe };
    let path = store(&a.out, &stored)?;
    Ok((report, stored, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattflip_uflip::BaselineTable;

    fn cal(key: &str, io_count: [u64; 4]) -> StoredCalibration {
        StoredCalibration { target: key.into(), key: key.into(), created_ns: 1, counts: BaselineTable { io_count, ignore_io: [0, 1, 2, 3] }, spe: None }
    }

    fn args(target: &Path, out: &Path) -> ProbeArgs {
        ProbeArgs {
            target: target.to_owned(),
            size: 1 << 20,
            benches: vec![uflip::Bench::Granularity],
            quick: false,
            values: ValuesProfile::Small,
            overrides: Default::default(),
            format: None,
            repetitions: None,
            out: out.to_owned(),
            emit_fio_iolog: None,
            io_trace: None,
            destroy_consent: vec![],
            overwrite_signatures: false,
            seed: None,
            read_only: false,
            pause: PauseChoice::Plan,
            counts: None,
            stop: None,
        }
    }

    #[test]
    fn two_targets_in_one_store_keep_their_own_counts() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        let (a, b) = (dir.path().join("a.dat"), dir.path().join("b.dat"));
        std::fs::write(&a, b"").unwrap();
        std::fs::write(&b, b"").unwrap();
        let (ka, kb) = (key_of_path(&a), key_of_path(&b));
        assert_eq!(ka, std::fs::canonicalize(&a).unwrap().display().to_string(), "a file is keyed by its canonical path");
        store(&out, &cal(&ka, [100, 200, 300, 400])).unwrap();
        store(&out, &cal(&kb, [111, 222, 333, 444])).unwrap();
        assert_eq!(std::fs::read_dir(out.join(CALIBRATION_DIR)).unwrap().count(), 2, "one file per target");
        assert_eq!(stored_calibration(&out, &a).map(|c| c.0), Some(cal(&ka, [100, 200, 300, 400])));
        assert_eq!(stored_calibration(&out, &b).map(|c| c.0), Some(cal(&kb, [111, 222, 333, 444])));
        // Another spelling of the same file finds the same calibration; an uncalibrated one none.
        assert_eq!(stored_calibration(&out, &dir.path().join(".").join("a.dat")).unwrap().0.counts.io_count, [100, 200, 300, 400]);
        let c = dir.path().join("c.dat");
        std::fs::write(&c, b"").unwrap();
        assert_eq!(stored_calibration(&out, &c), None);
        // calibration.json holds the latest, B.
        let latest: StoredCalibration = serde_json::from_str(&std::fs::read_to_string(out.join(CALIBRATION_FILE)).unwrap()).unwrap();
        assert_eq!(latest.key, kb);

        // A later probe of A plans with A's counts; a quick one keeps its demo counts.
        let mut pa = args(&a, &out);
        let (_, from) = apply_stored_calibration(&mut pa).unwrap();
        assert_eq!(from, calibration_path(&out, &ka));
        assert_eq!(plan_options(&pa, 1 << 30).counts.io_count, [100, 200, 300, 400]);
        let mut quick = ProbeArgs { quick: true, ..args(&a, &out) };
        assert_eq!(apply_stored_calibration(&mut quick), None);
        assert_eq!(quick.counts, None);
    }

    #[test]
    fn a_store_from_before_keys_still_serves_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.dat");
        std::fs::write(&a, b"").unwrap();
        let old = format!("{{\"target\": \"{}\", \"created_ns\": 5, \"counts\": {{\"io_count\": [1, 2, 3, 4], \"ignore_io\": [0, 0, 0, 1]}}}}", a.display());
        std::fs::write(dir.path().join(CALIBRATION_FILE), old).unwrap();
        let (c, from) = stored_calibration(dir.path(), &a).unwrap();
        assert_eq!((c.counts.io_count, c.key.as_str(), from), ([1, 2, 3, 4], "", dir.path().join(CALIBRATION_FILE)));
        assert_eq!(stored_calibration(dir.path(), &dir.path().join("b.dat")), None);
    }

    #[test]
    fn a_block_device_is_keyed_by_its_identity() {
        let root = std::fs::read_to_string("/proc/self/status").unwrap().lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"));
        // No silent skip: without root or losetup the scenario cannot be set up, so the test fails.
        assert!(root, "this test creates a loop device: run it as root (tests/run.sh does)");
        assert!(
            std::process::Command::new("losetup").arg("--version").output().is_ok(),
            "losetup not found: install the Debian package mount (tests/run.sh does)"
        );
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("disk.img");
        std::fs::File::create(&img).unwrap().set_len(8 << 20).unwrap();
        let o = std::process::Command::new("losetup").args(["-f", "--show"]).arg(&img).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let dev = PathBuf::from(String::from_utf8(o.stdout).unwrap().trim());
        let key = key_of_path(&dev);
        let _ = std::process::Command::new("losetup").arg("-d").arg(&dev).status();
        // The consent identity of a loop device, not its /dev name (which the next losetup reuses).
        assert_eq!(key, format!("loop:{}", std::fs::canonicalize(&img).unwrap().display()));
    }

    #[test]
    fn keys_make_distinct_file_names() {
        let out = Path::new("/o");
        assert_eq!(calibration_path(out, "S5GXNX0T123456").parent(), Some(Path::new("/o/calibration")));
        assert!(calibration_path(out, "S5GXNX0T123456").display().to_string().starts_with("/o/calibration/S5GXNX0T123456-"));
        assert_ne!(calibration_path(out, "/a/b c"), calibration_path(out, "/a/b_c"));
    }
}
