//! The workspace binaries the end-to-end tests run (agent, collector), built on demand by
//! `cargo build` so that a test never runs a stale one.
//!
//! Which `cargo build`: cargo's resolver 2 unifies dependency features over the packages and
//! targets of one command, so after `--workspace --all-targets` a `-p wattflip-agent --bin
//! wattflip-agent` compiled 45 dependencies again with other features (tests' dev-dependency
//! features left out) and the 7 workspace crates above them (docs/benchmarks.md, stop 52).
//! `tests/run.sh` therefore exports [`BUILD_ARGS_VAR`], the arguments of its own workspace build:
//! the harness repeats that build, which finds everything `Fresh` and leaves the binaries where
//! `bin()` looks. Without it (a developer running one test) only the one binary is built.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// The arguments after `cargo build` with which the workspace was built (tests/run.sh:
/// `--workspace --all-targets --locked`); unset, `bin()` builds `-p <package> --bin <name>`.
pub const BUILD_ARGS_VAR: &str = "WATTFLIP_E2E_CARGO_BUILD_ARGS";

/// Path of a workspace binary in the same profile as this test, built on demand.
pub fn bin(package: &str, name: &str) -> PathBuf {
    // `WATTFLIP_E2E_BIN_WATTFLIP_COLLECTOR=/path` runs the tests against another build of that
    // binary, e.g. the one before a fix (to see a new test fail without it).
    if let Ok(p) = std::env::var(format!("WATTFLIP_E2E_BIN_{}", name.to_uppercase().replace('-', "_"))) {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test-binary> → target/<profile>/<name>
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let release = dir.file_name().is_some_and(|n| n == "release");
    let workspace = std::env::var(BUILD_ARGS_VAR).ok().filter(|a| !a.trim().is_empty());
    let args = build_args(workspace.as_deref(), package, name, release);
    build_once(&args);
    dir.join(name)
}

/// The arguments after `cargo`: the workspace build's own (see the module comment), or one
/// binary of one package.
fn build_args(workspace: Option<&str>, package: &str, name: &str, release: bool) -> Vec<String> {
    let mut args: Vec<String> = vec!["build".into(), "--quiet".into()];
    match workspace {
        Some(w) => args.extend(w.split_whitespace().map(String::from)),
        None => args.extend(["-p", package, "--bin", name].map(String::from)),
    }
    if release && !args.iter().any(|a| a == "--release") {
        args.push("--release".into());
    }
    args
}

/// Runs `cargo <args>` the first time this test process asks for it: the sources do not change
/// under a running test binary (cargo built it from them a moment ago), and the workspace build
/// serves every binary. A failed build is not remembered, so every test that needs it says so.
fn build_once(args: &[String]) {
    static BUILT: Mutex<Vec<Vec<String>>> = Mutex::new(Vec::new());
    // Held during the build: parallel tests would wait for cargo's own target-dir lock anyway.
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if built.iter().any(|b| b == args) {
        return;
    }
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_for_this_test) {
            cmd.env_remove(name);
        }
    }
    let status = cmd.status().expect("run cargo build");
    assert!(status.success(), "`cargo {}` failed (its errors above); the tests need its binaries", args.join(" "));
    built.push(args.to_vec());
}

/// A variable that `cargo test` gives this test process (its own package's, cargo's manual:
/// "Environment variables Cargo sets for crates"), not one of the caller's settings. ring's build
/// script watches several (`rerun-if-env-changed=CARGO_PKG_NAME`, cargo issue 16134): passed on,
/// they made each build here and the next one from a shell recompile ring and everything above it.
fn set_for_this_test(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_BIN_EXE_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

#[cfg(test)]
mod tests {
    use super::{build_args, set_for_this_test};

    #[test]
    fn only_the_test_package_variables_are_left_out() {
        for v in ["CARGO_PKG_NAME", "CARGO_PKG_VERSION_MAJOR", "CARGO_MANIFEST_DIR", "CARGO_TARGET_TMPDIR", "CARGO_BIN_EXE_x", "OUT_DIR"] {
            assert!(set_for_this_test(v), "{v} is the test package's");
        }
        for v in ["CARGO_TARGET_DIR", "CARGO_HOME", "CARGO_INCREMENTAL", "CARGO_PROFILE_DEV_DEBUG", "RUSTC_WORKSPACE_WRAPPER", "CLIPPY_ARGS", "PATH"] {
            assert!(!set_for_this_test(v), "{v} is the caller's setting");
        }
    }

    #[test]
    fn one_binary_without_the_workspace_arguments() {
        assert_eq!(build_args(None, "wattflip-agent", "wattflip-agent", false), ["build", "--quiet", "-p", "wattflip-agent", "--bin", "wattflip-agent"]);
        assert_eq!(build_args(None, "p", "b", true).last().map(String::as_str), Some("--release"));
    }

    #[test]
    fn the_workspace_build_for_every_binary() {
        let ws = Some(" --workspace  --all-targets --locked ");
        let agent = build_args(ws, "wattflip-agent", "wattflip-agent", false);
        assert_eq!(agent, ["build", "--quiet", "--workspace", "--all-targets", "--locked"]);
        // One build serves both binaries, so build_once runs cargo once per test process.
        assert_eq!(agent, build_args(ws, "wattflip-collector", "wattflip-collector", false));
    }
}
