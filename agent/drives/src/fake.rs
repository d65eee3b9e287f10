//! Test doubles for [`CommandRunner`], compiled only with the `test-support` feature (enabled
//! from the dev-dependencies of the crates whose tests use them; never in a shipped binary):
//! - [`ScriptedRunner`]: replies to an exact, ordered list of argv (recorded outputs);
//! - [`FakeNvme`]: an in-memory nvme-cli 2.3 that keeps per-controller feature values and
//!   prints exactly what nvme-cli prints (`00000000` without `0x`, `NVMe status: …(0x410e)`), with
//!   per-controller [`SetBehaviour`]: honour, refuse (QEMU), silently ignore, permission denied.
//!
//! To emulate another subcommand, add an arm to `FakeNvme::dispatch`.

use crate::command::{command_line, CommandError, CommandOutput, CommandRunner, Exit};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// A scripted reply.
#[derive(Debug, Clone)]
enum Reply {
    Output { code: i32, stdout: String, stderr: String },
    Timeout,
}

/// Replies to argv in the order they were scripted.
#[derive(Debug, Default)]
pub struct ScriptedRunner {
    script: Mutex<VecDeque<(Vec<String>, Reply)>>,
    calls: Mutex<Vec<Vec<String>>>,
}

impl ScriptedRunner {
    /// Empty script.
    pub fn new() -> Self {
        Self::default()
    }

    /// Expect `argv` next; reply with exit `code`, `stdout`, `stderr`.
    pub fn expect(&self, argv: &[&str], code: i32, stdout: &str, stderr: &str) -> &Self {
        self.push(argv, Reply::Output { code, stdout: stdout.into(), stderr: stderr.into() })
    }

    /// Expect `argv` next; reply as if the deadline passed.
    pub fn expect_timeout(&self, argv: &[&str]) -> &Self {
        self.push(argv, Reply::Timeout)
    }

    fn push(&self, argv: &[&str], reply: Reply) -> &Self {
        let mut s = self.script.lock().unwrap_or_else(|p| p.into_inner());
        s.push_back((argv.iter().map(|a| a.to_string()).collect(), reply));
        self
    }

    /// Every argv run so far.
    pub fn calls(&self) -> Vec<Vec<String>> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Scripted replies not used yet.
    pub fn remaining(&self) -> usize {
        self.script.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl CommandRunner for ScriptedRunner {
    fn run(&self, argv: &[String], timeout: Duration) -> Result<CommandOutput, CommandError> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).push(argv.to_vec());
        let next = self.script.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
        let command = command_line(argv);
        match next {
            None => Err(CommandError::Unscripted { command, expected: "nothing more".into() }),
            Some((want, _)) if want != argv => Err(CommandError::Unscripted { command, expected: command_line(&want) }),
            Some((_, Reply::Timeout)) => Err(CommandError::Timeout { command, timeout, stderr: String::new() }),
            Some((_, Reply::Output { code, stdout, stderr })) => Ok(CommandOutput { argv: argv.to_vec(), exit: Exit::Code(code), stdout, stderr }),
        }
    }
}

/// How a fake controller answers Set Features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetBehaviour {
    /// Applies the value (read-back shows it).
    Honour,
    /// Rejects with `Feature Not Changeable (0x410e)`, like QEMU 7.2 for FID 02h.
    Refuse,
    /// Prints success but keeps the old value (a drive that silently ignores the request).
    Ignore,
    /// The caller lacks CAP_SYS_ADMIN: every admin command fails with `Permission denied`.
    PermissionDenied,
}

#[derive(Debug, Clone)]
struct FakeController {
    id_ctrl_json: String,
    smart_log_json: String,
    npss: u8,
    features: BTreeMap<u8, u32>,
    behaviour: SetBehaviour,
}

#[derive(Debug, Default)]
struct FakeState {
    controllers: BTreeMap<String, FakeController>,
    list_json: String,
    calls: Vec<Vec<String>>,
    set_calls: usize,
}

/// An nvme-cli 2.3 emulator. See the module docs.
#[derive(Debug, Default)]
pub struct FakeNvme {
    state: Mutex<FakeState>,
}

const NOT_CHANGEABLE: &str = "NVMe status: Feature Not Changeable: The Feature Identifier is not able to be changed(0x410e)\n";
const INVALID_FIELD: &str = "NVMe status: Invalid Field in Command: A reserved coded value or an unsupported value in a defined field(0x4002)\n";

impl FakeNvme {
    /// No controllers; `nvme list` prints `{"Devices":[]}`.
    pub fn new() -> Self {
        let f = FakeNvme::default();
        f.lock().list_json = "{\n  \"Devices\":[]\n}\n".into();
        f
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a controller (`/dev/nvme0`) answering `id-ctrl` with `id_ctrl_json`, FID 02h starting
    /// at `power_value`. `npss` is read from the JSON (PS > npss gets Invalid Field, like a real
    /// controller).
    pub fn with_controller(self, device: &str, id_ctrl_json: &str, power_value: u32, behaviour: SetBehaviour) -> Self {
        let npss = crate::nvme_cli::parse_id_ctrl(id_ctrl_json).map(|i| i.npss).unwrap_or(0);
        let mut features = BTreeMap::new();
        features.insert(crate::nvme_cli::FID_POWER_MANAGEMENT, power_value);
        self.lock()
            .controllers
            .insert(device.to_string(), FakeController { id_ctrl_json: id_ctrl_json.to_string(), smart_log_json: String::new(), npss, features, behaviour });
        self
    }

    /// Makes `device` support another feature (e.g. Intel C6h) with an initial value.
    pub fn with_feature(self, device: &str, fid: u8, value: u32) -> Self {
        if let Some(c) = self.lock().controllers.get_mut(device) {
            c.features.insert(fid, value);
        }
        self
    }

    /// What `smart-log` prints for `device`.
    pub fn with_smart_log(self, device: &str, json: &str) -> Self {
        if let Some(c) = self.lock().controllers.get_mut(device) {
            c.smart_log_json = json.to_string();
        }
        self
    }

    /// What `nvme list -o json` prints.
    pub fn with_list(self, json: &str) -> Self {
        self.lock().list_json = json.to_string();
        self
    }

    /// Changes how `device` answers Set Features.
    pub fn set_behaviour(&self, device: &str, behaviour: SetBehaviour) {
        if let Some(c) = self.lock().controllers.get_mut(device) {
            c.behaviour = behaviour;
        }
    }

    /// Current value of a feature.
    pub fn feature(&self, device: &str, fid: u8) -> Option<u32> {
        self.lock().controllers.get(device).and_then(|c| c.features.get(&fid).copied())
    }

    /// Number of `set-feature` calls received.
    pub fn set_calls(&self) -> usize {
        self.lock().set_calls
    }

    /// Every argv received.
    pub fn calls(&self) -> Vec<Vec<String>> {
        self.lock().calls.clone()
    }

    fn dispatch(&self, args: &[String]) -> (i32, String, String) {
        let mut st = self.lock();
        st.calls.push(args.to_vec());
        let ok = |s: String| (0, s, String::new());
        let err = |s: &str| (1, String::new(), s.to_string());
        let Some(sub) = args.get(1) else {
            return err("usage: nvme <command> [<device>] [<args>]\n");
        };
        if sub == "version" {
            return ok("nvme version 2.3 (git 2.3)\nlibnvme version 1.3 (git 1.3)\n".into());
        }
        if sub == "list" {
            return ok(st.list_json.clone());
        }
        let Some(dev) = args.get(2) else {
            return err("requires a device argument\n");
        };
        let opts = parse_opts(&args[3..]);
        if sub == "set-feature" {
            st.set_calls += 1;
        }
        let Some(c) = st.controllers.get_mut(dev) else {
            return err(&format!("Failed to open {dev}: No such file or directory\n"));
        };
        if c.behaviour == SetBehaviour::PermissionDenied {
            return err(&format!("{sub}: Permission denied\n"));
        }
        match sub.as_str() {
            "id-ctrl" => ok(c.id_ctrl_json.clone()),
            "smart-log" if !c.smart_log_json.is_empty() => ok(c.smart_log_json.clone()),
            "get-feature" => {
                let Some(fid) = opts.fid else {
                    return err("feature-id required param\n");
                };
                let Some(&value) = c.features.get(&fid) else {
                    return err(INVALID_FIELD);
                };
                let (label, shown) = match opts.sel {
                    3 => {
                        let caps = if c.behaviour == SetBehaviour::Refuse { 0 } else { 4 };
                        ("Supported capabilities", caps)
                    }
                    1 => ("Default", 0),
                    2 => ("Saved", 0),
                    _ => ("Current", value),
                };
                ok(format!("get-feature:{fid:#04x} ({}), {label} value:{}\n", feature_name(fid), c_hex(shown)))
            }
            "set-feature" => {
                let (Some(fid), Some(value)) = (opts.fid, opts.value) else {
                    return err("feature-id required param\n");
                };
                if !c.features.contains_key(&fid) {
                    return err(INVALID_FIELD);
                }
                if fid == crate::nvme_cli::FID_POWER_MANAGEMENT && (value & 0x1f) > u32::from(c.npss) {
                    return err(INVALID_FIELD);
                }
                match c.behaviour {
                    SetBehaviour::Refuse => return err(NOT_CHANGEABLE),
                    SetBehaviour::Honour => {
                        c.features.insert(fid, value);
                    }
                    SetBehaviour::Ignore | SetBehaviour::PermissionDenied => {}
                }
                ok(format!("set-feature:{fid:#04x} ({}), value:{}, cdw12:00000000, save:0\n", feature_name(fid), c_hex(value)))
            }
            _ => err(&format!("fake nvme: {sub} not emulated\n")),
        }
    }
}

/// C `%#0*x` with width 10 (8 for zero), as nvme-cli prints feature values: zero has no `0x`.
fn c_hex(v: u32) -> String {
    if v == 0 {
        "00000000".into()
    } else {
        format!("{v:#010x}")
    }
}

fn feature_name(fid: u8) -> &'static str {
    match fid {
        0x02 => "Power Management",
        0x04 => "Temperature Threshold",
        0x0c => "Autonomous Power State Transition",
        0x10 => "Host Controlled Thermal Management",
        _ => "Unknown",
    }
}

#[derive(Default)]
struct Opts {
    fid: Option<u8>,
    sel: u8,
    value: Option<u32>,
}

/// Long and short options as nvme-cli 2.3 accepts them (`--feature-id=2`, `-f 2`, `--value=1`,
/// `-v 1`, `--sel=3`, `-s 3`); numbers in C `strtoul(.., 0)` style.
fn parse_opts(args: &[String]) -> Opts {
    let mut o = Opts::default();
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let (key, val) = match a.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (a, None),
        };
        let takes = matches!(key, "--feature-id" | "-f" | "--value" | "-v" | "-V" | "--sel" | "-s");
        let val = if takes && val.is_none() {
            i += 1;
            args.get(i).cloned()
        } else {
            val
        };
        let num = val.as_deref().and_then(strtoul);
        match key {
            "--feature-id" | "-f" => o.fid = num.and_then(|n| u8::try_from(n).ok()),
            "--value" | "-v" | "-V" => o.value = num,
            "--sel" | "-s" => o.sel = num.and_then(|n| u8::try_from(n).ok()).unwrap_or(0),
            _ => {}
        }
        i += 1;
    }
    o
}

fn strtoul(s: &str) -> Option<u32> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

impl CommandRunner for FakeNvme {
    fn run(&self, argv: &[String], _timeout: Duration) -> Result<CommandOutput, CommandError> {
        if argv.is_empty() {
            return Err(CommandError::EmptyArgv);
        }
        let (code, stdout, stderr) = self.dispatch(argv);
        Ok(CommandOutput { argv: argv.to_vec(), exit: Exit::Code(code), stdout, stderr })
    }
}
