//! Every nvme-cli output parser on arbitrary text (`list`, `id-ctrl`, `smart-log` JSON in the 2.3
//! and later layouts, `get-feature` and `version` text, NVMe status lines on stderr). They take
//! a drive's or a tool's word, so they must fail with a message, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use wattflip_drives::nvme_cli::{self, NvmeStatus};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = nvme_cli::parse_list(text);
    if let Ok(ctrl) = nvme_cli::parse_id_ctrl(text) {
        for ps in 0..=31u8 {
            let _ = ctrl.power_state(ps);
        }
        let _ = (ctrl.warning_temperature(), ctrl.critical_temperature());
    }
    if let Ok(log) = nvme_cli::parse_smart_log(text) {
        let _ = (log.bytes_read(), log.bytes_written());
    }
    let _ = nvme_cli::parse_get_feature(text);
    let _ = NvmeStatus::from_stderr(text);
    let _ = nvme_cli::parse_version(text);
});
