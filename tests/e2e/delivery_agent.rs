//! Issue 15, agent side, with the real agent binary, collector and influxd: a damaged spool loses
//! only its damaged record and says so exactly (scenario 4), a full spool counts every lost batch
//! (scenario 5), odd files in the spool folder are skipped with an event instead of a crash loop, a
//! hang or gigabytes of memory (scenario 6), SIGTERM during a probe keeps its completed runs
//! (scenario 8), a config that is not a small regular file is refused (scenario 9), and a second
//! agent on the same spool refuses to start (issue 32 §1), and an agent whose Hello is too large for
//! the collector sends a smaller one instead of the same one for ever (issue 32 §3), and a spool
//! filesystem that fails mid-run keeps the count of what it lost (issue 32 §2). Counts are checked against
//! the agent's own ledger lines (`wattflip::ledger`, one per stored batch).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use wattflip_e2e::*;

fn agent_cfg(dir: &Path, sys: &Path, host: &str, url: &str) -> std::path::PathBuf {
    agent_config(
        dir,
        &format!(
            "agent_id = \"{host}\"\n[collector]\nurl = \"{url}\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"300ms\"\nconnect_timeout = \"1s\"\n\
             [sampling]\ninterval = \"100ms\"\n[sources]\nsysfs_root = \"{}\"\nrapl = false\n[spool]\ndir = \"{}\"\n{}",
            sys.display(),
            dir.join("spool").display(),
            pki().agent_tls(host)
        ),
    )
}

/// Removes ANSI colour sequences (the log may be coloured).
fn plain(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\u{1b}' {
            for d in it.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// sequence → (power, temperature), in order, from the agent's ledger lines.
fn ledger(dir: &Path) -> BTreeMap<u64, (u64, u64)> {
    let stderr = plain(&std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default());
    let mut m = BTreeMap::new();
    for line in stderr.lines().filter(|l| l.contains("wattflip::ledger") && l.contains("stored")) {
        let field = |k: &str| -> u64 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{k}=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {k} in ledger line {line:?}"))
        };
        m.insert(field("sequence"), (field("power"), field("temperature")));
    }
    m
}

fn count(influx: &Influx, db: &str, q: &str) -> u64 {
    influx.rows(db, q).first().and_then(|r| r[1].as_u64()).unwrap_or(0)
}

/// (offset, length) of every record of a current-format segment: `"WFB2" | len | crc | payload`.
fn records(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 12 <= bytes.len() {
        assert_eq!(&bytes[off..off + 4], b"WFB2", "record magic at {off}");
        let len = u32::from_le_bytes(bytes[off + 4..off + 8].try_into().unwrap()) as usize;
        out.push((off, 12 + len));
        off += 12 + len;
    }
    assert_eq!(off, bytes.len(), "whole records");
    out
}

fn segments(spool: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(spool).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().is_some_and(|x| x == "seg")).collect();
    v.sort();
    v
}

/// Scenario 4: one flipped byte in the middle of a segment and a half-written record at its end.
/// Only the damaged batch is lost; every intact record after it is delivered; the loss is counted
/// exactly in a `spool_truncated` event that reaches InfluxDB.
#[test]
fn scenario_4_a_corrupt_spool_record_loses_only_itself() {
    let (tmp, sys) = sysfs_tree(&["hwmon"]);
    let dir = tmp.path();
    let port = free_port();
    // First run: no collector yet, so everything stays in the spool.
    let cfg = agent_cfg(dir, &sys, "s4-agent", &format!("https://127.0.0.1:{port}"));
    let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "100000"]);
    let spooled = wait_for(Duration::from_secs(30), || (ledger(dir).len() >= 40).then_some(()));
    assert!(spooled.is_some(), "the agent spooled 40 batches within 30 s");
    signal(&a, "TERM");
    // It stops with its batches unacknowledged (exit status 1 says so); they stay in the spool.
    wait_child(&mut a, Duration::from_secs(20), dir);
    let first_run = ledger(dir);
    let segs = segments(&dir.join("spool"));
    assert_eq!(segs.len(), 1, "one segment");
    let mut bytes = std::fs::read(&segs[0]).unwrap();
    let recs = records(&bytes);
    assert_eq!(recs.len(), first_run.len(), "one record per ledger line");
    // Flip one byte in the middle of record 20 (its payload), then append half a record.
    let (k_off, k_len) = recs[20];
    bytes[k_off + k_len / 2] ^= 0x5a;
    let half = bytes[recs[0].0..recs[0].0 + recs[0].1 / 2].to_vec();
    bytes.extend_from_slice(&half);
    std::fs::write(&segs[0], &bytes).unwrap();
    let damaged_seq = *first_run.keys().nth(20).unwrap();

    let influx = Influx::start();
    let db = "wf_s4";
    let _c = Collector::start_on(port, &influx.url, db);
    let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "5"]);
    let st = wait_child(&mut a, Duration::from_secs(60), dir);
    assert!(st.success(), "second run:\n{}", std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default());
    let all = ledger(dir);
    let (mut power, mut temperature) = (0, 0);
    for (seq, (p, t)) in &all {
        if *seq != damaged_seq {
            power += p;
            temperature += t;
        }
    }
    let w = "host = 's4-agent'";
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(watts) FROM power WHERE {w}")), power, "every intact batch, once");
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(celsius) FROM temperature WHERE {w}")), temperature);
    let ev = influx.rows(db, &format!("SELECT attributes FROM event WHERE {w} AND kind = 'spool_truncated'"));
    assert_eq!(ev.len(), 1, "the event reached InfluxDB");
    let attrs = ev[0][1].as_str().unwrap();
    assert_eq!(attrs, format!("damaged_bytes={k_len} lost_batches=1 truncated_bytes={}", half.len()));
}

/// Issue 32 §1: the same config started twice at once (one spool folder). One agent owns the
/// spool; the other refuses at once and names the owner's pid; every sample of the one that ran
/// reaches InfluxDB exactly once (its ledger lines are the truth).
#[test]
fn two_agents_on_one_spool_one_refuses_naming_the_owner_and_nothing_is_lost() {
    let (tmp, sys) = sysfs_tree(&["hwmon"]);
    let (da, db_dir) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&da).unwrap();
    std::fs::create_dir_all(&db_dir).unwrap();
    let influx = Influx::start();
    let db = "wf_s32_spool";
    let port = free_port();
    let _c = Collector::start_on(port, &influx.url, db);
    let url = format!("https://127.0.0.1:{port}");
    // One config text, one spool (under `a`); each agent logs into its own folder.
    let cfg_a = agent_cfg(&da, &sys, "s32-agent", &url);
    let cfg_b = agent_config(&db_dir, &std::fs::read_to_string(&cfg_a).unwrap());
    let mut a = spawn_agent(&da, &["run", "--config", cfg_a.to_str().unwrap(), "--samples", "30"]);
    let mut b = spawn_agent(&db_dir, &["run", "--config", cfg_b.to_str().unwrap(), "--samples", "30"]);
    let (sa, sb) = (wait_child(&mut a, Duration::from_secs(60), &da), wait_child(&mut b, Duration::from_secs(60), &db_dir));
    assert_ne!(sa.success(), sb.success(), "exactly one agent runs: a {sa}, b {sb}");
    let (ran, refused, owner) = if sa.success() { (&da, &db_dir, a.id()) } else { (&db_dir, &da, b.id()) };
    let why = plain(&std::fs::read_to_string(refused.join("agent.stderr")).unwrap());
    let spool = da.join("spool");
    assert!(why.contains(&format!("spool {} is in use by pid {owner}", spool.display())), "the refusal names the owner:\n{why}");
    assert_eq!(why.matches("is in use by").count(), 1, "the refusal is said once:\n{why}");
    assert!(ledger(refused).is_empty(), "the refused agent stored nothing");
    let mine = ledger(ran);
    assert!(!mine.is_empty(), "the agent that ran stored its batches");
    let (power, temperature) = mine.values().fold((0, 0), |s, v| (s.0 + v.0, s.1 + v.1));
    let w = "host = 's32-agent'";
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(watts) FROM power WHERE {w}")), power, "every power sample, once");
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(celsius) FROM temperature WHERE {w}")), temperature);
}

/// Issue 32 §3, agent side: 300 extra hwmon chips make the `run` Hello (about 38 KB: each
/// sensor's path is in it) larger than the collector's 32 KiB limit, while a tick's batch (about
/// 27 KB) fits. The collector refuses the Hello once; the agent does not send it again but a
/// smaller one, says so at WARN and in a `hello_truncated` event, and delivers every sample.
#[test]
fn an_agent_whose_hello_is_too_large_sends_a_smaller_one_and_says_so() {
    let (tmp, sys) = sysfs_tree(&["hwmon"]);
    let dir = tmp.path();
    for i in 10..310 {
        let chip = sys.join(format!("class/hwmon/hwmon{i}"));
        std::fs::create_dir_all(&chip).unwrap();
        std::fs::write(chip.join("name"), format!("board_sensor_chip_{i}\n")).unwrap();
        std::fs::write(chip.join("temp1_input"), "41000\n").unwrap();
        std::fs::write(chip.join("temp1_label"), format!("inlet air temperature near slot {i}\n")).unwrap();
    }
    let influx = Influx::start();
    let db = "wf_s32_hello";
    let port = free_port();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let extra = format!("{}[limits]\nmax_message_bytes = 32768\n[metrics]\nlisten = \"{metrics_addr}\"\n", pki().collector_tls());
    let c = Collector::start_with(port, &influx.url, db, &extra);
    let cfg = agent_cfg(dir, &sys, "s32-hello", &format!("https://127.0.0.1:{port}"));
    let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "5"]);
    let st = wait_child(&mut a, Duration::from_secs(90), dir);
    let log = plain(&std::fs::read_to_string(dir.join("agent.stderr")).unwrap());
    assert!(st.success(), "every batch delivered:\n{log}\n{}", c.log());
    assert!(log.lines().any(|l| l.contains("WARN") && l.contains("the collector refused the Hello of")), "{log}");
    let m = reqwest::blocking::get(format!("http://{metrics_addr}/metrics")).unwrap().text().unwrap();
    assert!(m.lines().any(|l| l == "wattflip_collector_agents_rejected_total{reason=\"oversized_hello\"} 1"), "refused once, not again:\n{m}\n{log}");
    let w = "host = 's32-hello'";
    let ev = influx.rows(db, &format!("SELECT attributes FROM event WHERE {w} AND kind = 'hello_truncated'"));
    assert_eq!(ev.len(), 1, "the event reached InfluxDB");
    let attrs: BTreeMap<&str, u64> = ev[0][1].as_str().unwrap().split(' ').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k, v.parse().unwrap())).collect();
    assert!(attrs["hello_bytes"] > 32768 && attrs["sent_bytes"] <= 32768 - 64, "{attrs:?}");
    assert_eq!(attrs["limit_bytes"], 32768);
    assert!(attrs["dropped_temperature_sensors"] > 0 && attrs["dropped_power_sources"] == 0, "{attrs:?}");
    let temperature: u64 = ledger(dir).values().map(|v| v.1).sum();
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(celsius) FROM temperature WHERE {w}")), temperature, "every temperature sample arrived");
}

/// A 64 MiB ext4 image on a loop device, mounted `errors=remount-ro` at `mnt`; unmounted and
/// detached on drop.
struct FailingExt4 {
    mnt: std::path::PathBuf,
    dev: String,
}

impl FailingExt4 {
    fn new(dir: &Path, mnt: &Path) -> FailingExt4 {
        let img = dir.join("spool.img");
        std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
        let run = |c: &mut Command| {
            let o = c.output().unwrap_or_else(|e| panic!("{c:?}: {e} (e2fsprogs and mount are needed, and root)"));
            assert!(o.status.success(), "{c:?}: {}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        };
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&img));
        let dev = run(Command::new("losetup").args(["-f", "--show"]).arg(&img));
        std::fs::create_dir_all(mnt).unwrap();
        let fs = FailingExt4 { mnt: mnt.to_path_buf(), dev };
        fs.mount();
        fs
    }
    fn mount(&self) {
        let st = Command::new("mount").args(["-o", "errors=remount-ro", &self.dev]).arg(&self.mnt).status().unwrap();
        assert!(st.success(), "mount {}", self.dev);
    }
    /// A real filesystem error: ext4 remounts itself read-only (`errors=remount-ro`).
    fn fail(&self) {
        let name = self.dev.trim_start_matches("/dev/");
        std::fs::write(format!("/sys/fs/ext4/{name}/trigger_fs_error"), "1").expect("trigger_fs_error (Linux 6.x ext4 sysfs)");
    }
    /// Unmount, `e2fsck -fy`, mount again.
    fn repair(&self) {
        assert!(Command::new("umount").arg(&self.mnt).status().unwrap().success());
        let st = Command::new("e2fsck").args(["-fy", &self.dev]).output().unwrap().status;
        assert!(matches!(st.code(), Some(0 | 1)), "e2fsck: {st}");
        self.mount();
    }
}

impl Drop for FailingExt4 {
    fn drop(&mut self) {
        // Lazy: a test that failed may leave a process on it; the device goes when it lets go.
        let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}

/// An agent killed when its test fails (so it does not hold a mount).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Issue 32 §2: the spool's ext4 fails mid-run (a real error, remounted read-only). With the
/// network up the lost count and the failure (errno 30) reach InfluxDB while the spool still
/// fails; what is lost after the collector is gone too is kept in `<spool>.lost` and reported
/// after the repair and restart. Every "batch lost" line is counted in InfluxDB exactly once.
#[test]
fn a_spool_filesystem_that_fails_mid_run_keeps_the_count_of_what_it_lost() {
    let (tmp, sys) = sysfs_tree(&["hwmon"]);
    let dir = tmp.path();
    let fs = FailingExt4::new(dir, &dir.join("spool"));
    let influx = Influx::start();
    let db = "wf_s32_ro";
    let port = free_port();
    let c = Collector::start_on(port, &influx.url, db);
    let cfg = agent_cfg(dir, &sys, "s32-ro", &format!("https://127.0.0.1:{port}"));
    let mut a = KillOnDrop(spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "100000"]));
    assert!(wait_for(Duration::from_secs(30), || (ledger(dir).len() >= 10).then_some(())).is_some(), "10 batches spooled");
    fs.fail();
    let w = "host = 's32-ro'";
    let reported = |influx: &Influx| -> u64 {
        influx
            .try_rows(db, &format!("SELECT attributes FROM event WHERE {w} AND kind = 'backlog_dropped'"))
            .unwrap_or_default()
            .iter()
            .map(|r| r[1].as_str().unwrap().strip_prefix("dropped_batches=").unwrap().parse::<u64>().unwrap())
            .sum()
    };
    let lost_lines = || plain(&std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default()).matches("batch lost").count() as u64;
    let direct = wait_for(Duration::from_secs(60), || (reported(&influx) >= 5).then_some(()));
    assert!(direct.is_some(), "lost counts reached InfluxDB while the spool failed:\n{}", std::fs::read_to_string(dir.join("agent.stderr")).unwrap());
    let failed = influx.rows(db, &format!("SELECT attributes FROM event WHERE {w} AND kind = 'spool_write_failed'"));
    assert_eq!(failed.len(), 1, "one event per failure, not per batch");
    assert!(failed[0][1].as_str().unwrap().contains("errno=30 error=spool "), "{failed:?}");
    // The network goes too: what is lost now only the file can keep.
    drop(c);
    let before = lost_lines();
    assert!(wait_for(Duration::from_secs(30), || (lost_lines() >= before + 10).then_some(())).is_some());
    signal(&a.0, "TERM");
    wait_child(&mut a.0, Duration::from_secs(20), dir);
    let lost = lost_lines();
    let held: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("spool.lost")).expect("the loss file next to the spool")).unwrap();
    let in_file = held["dropped_batches"].as_u64().unwrap() + held["direct"]["dropped_batches"].as_u64().unwrap_or(0);
    assert!(in_file >= 10, "{held}");
    // Repaired and restarted with a collector: everything lost is counted, once.
    fs.repair();
    let _c = Collector::start_on(port, &influx.url, db);
    let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "3"]);
    let st = wait_child(&mut a, Duration::from_secs(60), dir);
    assert!(st.success(), "{}", std::fs::read_to_string(dir.join("agent.stderr")).unwrap());
    assert_eq!(reported(&influx), lost, "every lost batch counted exactly once in InfluxDB");
    assert!(!dir.join("spool.lost").exists(), "nothing left to report");
}

/// Issue 38: the agent stopped (SIGTERM) while its spool still fails and the collector is up.
/// What it lost since the last loss report the collector acknowledged (the count in a direct batch
/// still in flight, and what was lost after it) is kept in `<spool>.lost` and reported after the
/// repair and restart: InfluxDB's count equals the "batch lost" lines, exactly.
#[test]
fn a_spool_failing_at_sigterm_reports_everything_it_lost_after_the_restart() {
    let (tmp, sys) = sysfs_tree(&["hwmon"]);
    let dir = tmp.path();
    let fs = FailingExt4::new(dir, &dir.join("spool"));
    let influx = Influx::start();
    let db = "wf_s38_term";
    let port = free_port();
    let _c = Collector::start_on(port, &influx.url, db);
    let cfg = agent_cfg(dir, &sys, "s38-term", &format!("https://127.0.0.1:{port}"));
    let mut a = KillOnDrop(spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "100000"]));
    assert!(wait_for(Duration::from_secs(30), || (ledger(dir).len() >= 10).then_some(())).is_some(), "10 batches spooled");
    fs.fail();
    let w = "host = 's38-term'";
    let reported = |influx: &Influx| -> u64 {
        influx
            .try_rows(db, &format!("SELECT attributes FROM event WHERE {w} AND kind = 'backlog_dropped'"))
            .unwrap_or_default()
            .iter()
            .map(|r| r[1].as_str().unwrap().strip_prefix("dropped_batches=").unwrap().parse::<u64>().unwrap())
            .sum()
    };
    let lost_lines = || plain(&std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default()).matches("batch lost").count() as u64;
    assert!(wait_for(Duration::from_secs(60), || (reported(&influx) >= 5 && lost_lines() >= 20).then_some(())).is_some(), "losses reported while failing");
    // Stopped with the spool still failing and the collector up.
    signal(&a.0, "TERM");
    let st = wait_child(&mut a.0, Duration::from_secs(20), dir);
    assert!(st.code().is_some(), "stopped by its own shutdown, not killed: {st}");
    let lost = lost_lines();
    fs.repair();
    let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "3"]);
    let st = wait_child(&mut a, Duration::from_secs(60), dir);
    assert!(st.success(), "{}", std::fs::read_to_string(dir.join("agent.stderr")).unwrap());
    // With both runs' log: a count reported twice shows which batch was sent again (stop 58: the
    // in-flight direct batch, resent with a new time while the collector still wrote the first).
    let log = plain(&std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default());
    assert_eq!(reported(&influx), lost, "every lost batch counted exactly once in InfluxDB\n{log}");
    assert!(!dir.join("spool.lost").exists(), "nothing left to report");
}

/// Unmounts on drop.
struct Tmpfs(std::path::PathBuf);

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Scenario 5: the spool lives on a 512 KiB filesystem and the collector is down, so stores fail
/// with ENOSPC. Every lost batch is counted in `backlog_dropped` events that reach InfluxDB (their
/// `dropped_batches` add up to the "batch lost" log lines exactly), and every stored batch arrives.
#[test]
fn scenario_5_a_full_spool_counts_every_lost_batch() {
    let (tmp, sys) = sysfs_tree(&["hwmon"]);
    let dir = tmp.path();
    let spool = dir.join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    let st = Command::new("mount").args(["-t", "tmpfs", "-o", "size=512k", "wf-s5", spool.to_str().unwrap()]).status().expect("mount");
    assert!(st.success(), "mounting a 512 KiB tmpfs needs root (mount from util-linux)");
    let _mnt = Tmpfs(spool.clone());
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}");
    let cfg = agent_config(
        dir,
        &format!(
            "agent_id = \"s5-agent\"\n[collector]\nurl = \"{url}\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"200ms\"\nconnect_timeout = \"1s\"\n\
             [sampling]\ninterval = \"10ms\"\n[sources]\nsysfs_root = \"{}\"\nrapl = false\n[spool]\ndir = \"{}\"\nmax_bytes = 67108864\nsegment_bytes = 65536\n{}",
            sys.display(),
            spool.display(),
            pki().agent_tls("s5-agent")
        ),
    );
    let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "100000"]);
    let lost_lines = |dir: &Path| plain(&std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default()).matches("batch lost").count();
    let full = wait_for(Duration::from_secs(120), || (lost_lines(dir) >= 300).then_some(()));
    assert!(full.is_some(), "the spool filled up within 120 s:\n{}", std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default());
    let influx = Influx::start();
    let db = "wf_s5";
    let _c = Collector::start_on(port, &influx.url, db);
    // Delivered and no longer losing: the last ledger line comes after the last loss, and the
    // store holds the ledger.
    let w = "host = 's5-agent'";
    let settled = wait_for(Duration::from_secs(120), || {
        let log = plain(&std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default());
        let last_lost = log.rfind("batch lost")?;
        let last_stored = log.rfind("wattflip::ledger")?;
        let power: u64 = ledger(dir).values().map(|v| v.0).sum();
        (last_stored > last_lost && count(&influx, db, &format!("SELECT COUNT(watts) FROM power WHERE {w}")) == power).then_some(())
    });
    assert!(settled.is_some(), "the agent delivered its spool");
    signal(&a, "TERM");
    wait_child(&mut a, Duration::from_secs(20), dir);
    // What was stored after the last check and not yet sent is in the spool: a bounded run
    // delivers it.
    let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "2"]);
    let st = wait_child(&mut a, Duration::from_secs(60), dir);
    assert!(st.success(), "the spool was delivered");
    let lost = lost_lines(dir) as u64;
    let power: u64 = ledger(dir).values().map(|v| v.0).sum();
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(watts) FROM power WHERE {w}")), power, "every stored batch arrived");
    let reported: u64 = influx
        .rows(db, &format!("SELECT attributes FROM event WHERE {w} AND kind = 'backlog_dropped'"))
        .iter()
        .map(|r| r[1].as_str().unwrap().strip_prefix("dropped_batches=").unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(reported, lost, "every lost batch counted in events that reached InfluxDB");
}

/// Scenario 6: a directory, a FIFO and a 20 GB sparse file named like segments. The agent starts
/// (no crash loop), does not hang, stays small, delivers its data and reports each file.
#[test]
fn scenario_6_odd_files_in_the_spool_are_skipped_with_an_event() {
    let (tmp, sys) = sysfs_tree(&["hwmon"]);
    let dir = tmp.path();
    let spool = dir.join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    std::fs::create_dir(spool.join(format!("{:020}.seg", 1))).unwrap();
    let fifo = spool.join(format!("{:020}.seg", 2));
    assert!(Command::new("mkfifo").arg(&fifo).status().expect("mkfifo (coreutils)").success());
    std::fs::File::create(spool.join(format!("{:020}.seg", 3))).unwrap().set_len(20 << 30).unwrap();
    let influx = Influx::start();
    let db = "wf_s6";
    let c = Collector::start(&influx.url, db);
    let cfg = agent_cfg(dir, &sys, "s6-agent", &c.url);
    let started = std::time::Instant::now();
    let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "10"]);
    let mut peak_kib = 0u64;
    let st = loop {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{}/status", a.id())) {
            if let Some(v) = s.lines().find_map(|l| l.strip_prefix("VmHWM:")) {
                peak_kib = peak_kib.max(v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0));
            }
        }
        if let Some(st) = a.try_wait().unwrap() {
            break st;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "the agent hangs");
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default();
    assert!(st.success(), "{stderr}");
    eprintln!("scenario 6: agent peak RSS {peak_kib} KiB, run took {:?}", started.elapsed());
    assert!(peak_kib < 200 * 1024, "bounded memory: {peak_kib} KiB");
    let all = ledger(dir);
    let power: u64 = all.values().map(|v| v.0).sum();
    let w = "host = 's6-agent'";
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(watts) FROM power WHERE {w}")), power);
    let paths: Vec<String> = influx
        .rows(db, &format!("SELECT attributes FROM event WHERE {w} AND kind = 'spool_foreign_file'"))
        .iter()
        .map(|r| r[1].as_str().unwrap().to_string())
        .collect();
    let mut want: Vec<String> = (1..=3).map(|i| format!("path={}", spool.join(format!("{i:020}.seg")).display())).collect();
    want.sort();
    let mut got = paths.clone();
    got.sort();
    assert_eq!(got, want);
    // Left alone: they are the operator's files.
    assert!(spool.join(format!("{:020}.seg", 3)).exists());
}

/// Scenario 9 (agent side): `--config /dev/zero` and a 2 MiB file are refused at once, by name.
#[test]
fn scenario_9_a_config_that_is_not_a_small_regular_file_is_refused() {
    let agent = bin("wattflip-agent", "wattflip-agent");
    let t = std::time::Instant::now();
    let out = Command::new(&agent).args(["check-config", "--config", "/dev/zero"]).output().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "no endless read: {:?}", t.elapsed());
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/dev/zero") && err.contains("is not a regular file"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.toml");
    std::fs::write(&big, format!("# {}\n", "x".repeat(2 << 20))).unwrap();
    let out = Command::new(&agent).args(["run", "--config"]).arg(&big).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("big.toml") && err.contains("a config file may be at most 1048576 bytes (1 MiB)"), "{err}");
}

/// Scenario 8: SIGTERM while a scheduled probe writes its target. Probe IO stops at once (checked
/// between IOs), the agent exits promptly, and the runs that completed are kept: spooled, marked
/// interrupted, announced in a `probe_interrupted` event and the log, and sent at the next start.
#[test]
fn scenario_8_sigterm_during_a_probe_keeps_its_completed_runs() {
    let (tmp, sys) = sysfs_tree(&["hwmon"]);
    let dir = tmp.path();
    let influx = Influx::start();
    let db = "wf_s8";
    let c = Collector::start(&influx.url, db);
    let scratch = tempfile::Builder::new().prefix("wf-s8-").tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let body = std::fs::read_to_string(agent_cfg(dir, &sys, "s8-agent", &c.url)).unwrap();
    let cfg = agent_config(
        dir,
        &format!(
            "{body}[[probes]]\nname = \"every-second\"\nschedule = \"* * * * * *\"\ntarget = \"{}\"\nsize = \"64MiB\"\nquick = true\npower = false\n",
            scratch.path().join("scratch.dat").display()
        ),
    );
    let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "100000"]);
    let log = |dir: &Path| plain(&std::fs::read_to_string(dir.join("agent.stderr")).unwrap_or_default());
    // After one whole probe, wait for the next to be under way.
    let busy = wait_for(Duration::from_secs(60), || {
        let l = log(dir);
        let (started, finished) = (l.matches("scheduled probe starting").count(), l.matches("scheduled probe finished").count());
        (finished >= 1 && started > finished).then_some(())
    });
    assert!(busy.is_some(), "a scheduled probe was under way within 60 s:\n{}", log(dir));
    // Let a few of its runs complete.
    std::thread::sleep(Duration::from_millis(150));
    let t = std::time::Instant::now();
    signal(&a, "TERM");
    wait_child(&mut a, Duration::from_secs(20), dir);
    let stop_s = t.elapsed().as_secs_f64();
    eprintln!("scenario 8: agent exited {stop_s:.2} s after SIGTERM");
    assert!(stop_s < 3.0, "probe IO and the agent stop promptly: {stop_s:.2} s");
    let l = log(dir);
    assert!(l.contains("stopping the scheduled probe's IO"), "{l}");
    let kept: u64 = l
        .lines()
        .find(|x| x.contains("was stopped by the agent's shutdown"))
        .and_then(|x| x.split_whitespace().find_map(|w| w.strip_prefix("runs=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("the log says how many runs were kept:\n{l}"));
    eprintln!("scenario 8: {kept} completed run(s) kept");
    assert!(kept >= 1, "some runs completed before the signal");
    // Next start: the spooled runs and the event are sent.
    let mut a = spawn_agent(dir, &["run", "--config", cfg.to_str().unwrap(), "--samples", "3"]);
    wait_child(&mut a, Duration::from_secs(60), dir);
    let w = "host = 's8-agent'";
    let ev = influx.rows(db, &format!("SELECT attributes FROM event WHERE {w} AND kind = 'probe_interrupted'"));
    assert_eq!(ev.len(), 1, "the event reached InfluxDB");
    let attrs = ev[0][1].as_str().unwrap().to_string();
    assert!(attrs.contains(&format!("runs_kept={kept}")), "{attrs}");
    let probe_id = attrs.split_whitespace().find_map(|w| w.strip_prefix("probe_id=")).unwrap().to_string();
    let runs = influx.rows(db, &format!("SELECT run_id FROM probe_run WHERE {w} AND run_id =~ /^{probe_id}-/"));
    assert_eq!(runs.len() as u64, kept, "every completed run of the interrupted probe, once");
    // And nothing of what the agent spooled is missing: probe runs in InfluxDB = ledger.
    let ledger_runs: u64 = log(dir)
        .lines()
        .filter(|x| x.contains("wattflip::ledger") && x.contains("stored"))
        .filter_map(|x| x.split_whitespace().find_map(|w| w.strip_prefix("probe_runs=")).and_then(|v| v.parse::<u64>().ok()))
        .sum();
    assert_eq!(count(&influx, db, &format!("SELECT COUNT(mean_us) FROM probe_run WHERE {w}")), ledger_runs);
}
