//! Issue 38's config cases against the real binaries: `check-config` refuses what `run` would
//! trip on (a duration past any clock, a key file holding a certificate, a directory setting that
//! names a file) with the dotted key, and `run` stops at once with the same message instead of
//! retrying forever; neither binary reads a config without bound (`--config /dev/zero`). A new
//! case is one `refused` call with the key and the message expected.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;
use wattflip_e2e::*;

/// Runs `cmd` to its end, or kills it after `limit` (then None: it hung).
fn within(cmd: &mut Command, limit: Duration) -> Option<Output> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start");
    match wait_for(limit, || child.try_wait().ok().flatten()) {
        Some(_) => Some(child.wait_with_output().expect("output")),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            None
        }
    }
}

fn agent(args: &[&str]) -> Command {
    let mut c = Command::new(bin("wattflip-agent", "wattflip-agent"));
    c.args(args);
    c
}

fn collector(args: &[&str]) -> Command {
    let mut c = Command::new(bin("wattflip-collector", "wattflip-collector"));
    c.args(args);
    c
}

/// `cmd` ends within 20 s, failing, with `line` in its stderr.
fn refused(mut cmd: Command, line: &str) {
    let out = within(&mut cmd, Duration::from_secs(20)).unwrap_or_else(|| panic!("{cmd:?} did not end within 20 s"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{cmd:?} accepted it:\n{}{stderr}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr.contains(line), "{cmd:?}: expected `{line}` in:\n{stderr}");
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const PLAIN: &str = "[tls]\ninsecure_plaintext_loopback_only = true\n";

#[test]
fn durations_past_any_clock_are_refused_with_the_key_and_the_range() {
    let tmp = tempfile::tempdir().unwrap();
    let a = write(tmp.path(), "agent.toml", &format!("[sources]\ncommand_timeout = \"500000000000y\"\n{PLAIN}"));
    refused(agent(&["check-config", "--config", a.to_str().unwrap()]), "sources.command_timeout: `500000000000y` is outside 100ms..=1h");
    let c = write(tmp.path(), "collector.toml", &format!("[influx]\nflush_interval = \"500000000000y\"\n{PLAIN}"));
    refused(collector(&["--config", c.to_str().unwrap(), "check-config"]), "influx.flush_interval: `500000000000y` is outside 1ms..=1h");
}

#[test]
fn config_reads_are_bounded() {
    refused(collector(&["--config", "/dev/zero", "check-config"]), "/dev/zero: 1 problem(s):\n  - is not a regular file");
    refused(agent(&["check-config", "--config", "/dev/zero"]), "/dev/zero: 1 problem(s):\n  - is not a regular file");
    let tmp = tempfile::tempdir().unwrap();
    let big = write(tmp.path(), "big.toml", &"#".repeat(2 << 20));
    refused(collector(&["--config", big.to_str().unwrap(), "check-config"]), "is 2097152 bytes; a config file may be at most 1048576 bytes (1 MiB)");
}

#[test]
fn directory_settings_that_name_a_file_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let file = write(tmp.path(), "a-file", "x");
    let f = file.display();
    let c = write(tmp.path(), "collector.toml", &format!("[influx]\ndead_letter_dir = \"{f}\"\n{PLAIN}"));
    refused(collector(&["--config", c.to_str().unwrap(), "check-config"]), &format!("influx.dead_letter_dir: {f} exists and is not a directory"));
    let a = write(tmp.path(), "agent.toml", &format!("[spool]\ndir = \"{f}/spool\"\n{PLAIN}"));
    refused(agent(&["check-config", "--config", a.to_str().unwrap()]), &format!("spool.dir: {f}/spool cannot be created: {f} is not a directory"));
}

/// `run` used to retry forever on "Error parsing TLS private key"; check-config passed.
#[test]
fn a_key_file_holding_a_certificate_is_refused_before_run_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let (cert, _) = pki().issue("agent-keyless", &["keyless"], None);
    let tls = format!("[tls]\nca_file = \"{}\"\ncert_file = \"{1}\"\nkey_file = \"{1}\"\n", pki().ca().display(), cert.display());
    let a = write(tmp.path(), "agent.toml", &format!("agent_id = \"keyless\"\n[collector]\nurl = \"https://127.0.0.1:1\"\n{tls}"));
    let msg =
        "tls.key_file: Error parsing TLS private key: no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block (it holds a certificate: is this cert_file?)";
    refused(agent(&["check-config", "--config", a.to_str().unwrap()]), msg);
    refused(agent(&["run", "--config", a.to_str().unwrap()]), msg);
    let c = write(tmp.path(), "collector.toml", &format!("listen = \"127.0.0.1:1\"\n{tls}"));
    refused(collector(&["--config", c.to_str().unwrap(), "check-config"]), msg);
}

/// `check-config` passed a `tls.crl_file` that `run` could not use: it only looked that the file
/// existed. Now it reads and parses it as `run` does, and lists its problem with the others.
#[test]
fn check_config_parses_the_crl_file_as_run_does() {
    let tmp = tempfile::tempdir().unwrap();
    let crl = write(tmp.path(), "agents.crl", "not a revocation list\n");
    let c = write(
        tmp.path(),
        "collector.toml",
        &format!("listen = \"127.0.0.1:1\"\n[influx]\nflush_interval = \"0s\"\n{}crl_file = \"{}\"\n", pki().collector_tls(), crl.display()),
    );
    let bad = format!(
        "  - tls.crl_file: {}: not a certificate revocation list (Parsing Error: NomError(Eof)); give the certificate revocation list of the agents' CA, PEM (`-----BEGIN X509 CRL-----`) or DER, e.g. from `openssl ca -gencrl`, or remove tls.crl_file",
        crl.display()
    );
    refused(collector(&["--config", c.to_str().unwrap(), "check-config"]), &bad);
    // Listed with every other problem of the file.
    refused(collector(&["--config", c.to_str().unwrap(), "check-config"]), "2 problem(s):\n  - influx.flush_interval: `0s` is outside");
    refused(collector(&["--config", c.to_str().unwrap()]), &bad);

    // A CRL the collector's CA signed, as the revocation test writes it: accepted.
    std::fs::write(&crl, pki().crl(1, &[1001])).unwrap();
    let c = write(tmp.path(), "collector.toml", &format!("listen = \"127.0.0.1:1\"\n{}crl_file = \"{}\"\n", pki().collector_tls(), crl.display()));
    let out = within(&mut collector(&["--config", c.to_str().unwrap(), "check-config"]), Duration::from_secs(20)).expect("check-config ended");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("config OK: listen 127.0.0.1:1 (mutual TLS)"), "{}", String::from_utf8_lossy(&out.stdout));
}
