//! fio iolog v2 emission (spec §10): the exact IO sequence of a run, for byte-identical replay with
//! `read_iolog=<file> replay_no_stall=1 direct=1 ioengine=psync iodepth=1` (+ `sync=dsync` for
//! writes). One file per process; pauses are not encoded (use fio's `thinktime*` options).
//!
//! To support iolog v3 (timestamps, fio ≥ 3.31), add a writer that prefixes each line with the
//! planned submission time.

use crate::pattern::Io;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The iolog v2 text for `ios` on `device`.
pub fn iolog_text(device: &Path, ios: &[Io]) -> String {
    let d = device.display();
    let mut s = String::with_capacity(40 + ios.len() * 48);
    let _ = writeln!(s, "fio version 2 iolog");
    let _ = writeln!(s, "{d} add");
    let _ = writeln!(s, "{d} open");
    for io in ios {
        let _ = writeln!(s, "{d} {} {} {}", io.mode.as_str(), io.offset, io.len);
    }
    let _ = writeln!(s, "{d} close");
    s
}

/// File name for run `run_id` / process `proc_id` (of `degree`): `00012-granularity_SR-v4096-r0.iolog`.
pub fn iolog_name(run_id: usize, experiment: &str, value: f64, repetition: u32, proc_id: u32, degree: u32) -> String {
    let exp: String = experiment.chars().map(|c| if c.is_ascii_alphanumeric() || c == '.' || c == '-' { c } else { '_' }).collect();
    let p = if degree > 1 { format!("-p{proc_id}") } else { String::new() };
    format!("{run_id:05}-{exp}-v{value}-r{repetition}{p}.iolog")
}

/// Write `text` to `dir/name` (creating `dir`).
pub fn write_file(dir: &Path, name: &str, text: &str) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let p = dir.join(name);
    std::fs::write(&p, text)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::Mode;

    #[test]
    fn v2_format_exact() {
        let ios = [
            Io { offset: 1048576, len: 32768, mode: Mode::Write },
            Io { offset: 1081344, len: 32768, mode: Mode::Write },
            Io { offset: 0, len: 4096, mode: Mode::Read },
        ];
        assert_eq!(
            iolog_text(Path::new("/dev/nvme0n1"), &ios),
            "fio version 2 iolog\n/dev/nvme0n1 add\n/dev/nvme0n1 open\n/dev/nvme0n1 write 1048576 32768\n/dev/nvme0n1 write 1081344 32768\n/dev/nvme0n1 read 0 4096\n/dev/nvme0n1 close\n"
        );
        assert_eq!(iolog_name(12, "mix/SR-RW", -4.0, 1, 0, 1), "00012-mix_SR-RW-v-4-r1.iolog");
        assert_eq!(iolog_name(3, "parallelism/RR", 8.0, 0, 7, 8), "00003-parallelism_RR-v8-r0-p7.iolog");
    }
}
