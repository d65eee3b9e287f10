//! Shared helpers: fixture loading and a per-test copy of the fake `nvme` script.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use wattflip_drives::{NvmeCli, SystemRunner};

pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("fixtures")
}

pub fn fixture(rel: &str) -> String {
    let path = fixtures_dir().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A private copy of tests/fixtures/fake-nvme/nvme with its own state directory.
pub struct FakeScript {
    pub dir: tempfile::TempDir,
}

impl FakeScript {
    pub fn new(id_ctrl_fixture: &str, list_fixture: &str, power_value: u32, mode: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::install(dir.path(), id_ctrl_fixture, list_fixture, power_value, mode);
        FakeScript { dir }
    }

    pub fn install(dir: &Path, id_ctrl_fixture: &str, list_fixture: &str, power_value: u32, mode: &str) {
        use std::os::unix::fs::PermissionsExt;
        let script = dir.join("nvme");
        std::fs::copy(fixtures_dir().join("fake-nvme/nvme"), &script).expect("copy fake nvme");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        std::fs::write(dir.join("id-ctrl.json"), fixture(id_ctrl_fixture)).expect("id-ctrl");
        std::fs::write(dir.join("list.json"), fixture(list_fixture)).expect("list");
        std::fs::create_dir_all(dir.join("state")).expect("state dir");
        std::fs::write(dir.join("state/power_value"), format!("{power_value}\n")).expect("power_value");
        std::fs::write(dir.join("state/mode"), format!("{mode}\n")).expect("mode");
    }

    pub fn program(&self) -> String {
        self.dir.path().join("nvme").to_string_lossy().into_owned()
    }

    pub fn nvme(&self) -> NvmeCli {
        nvme_for_script(self.dir.path())
    }

    pub fn power_value_file(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("state/power_value")).expect("power_value")
    }

    pub fn set_mode(&self, mode: &str) {
        std::fs::write(self.dir.path().join("state/mode"), format!("{mode}\n")).expect("mode");
    }
}

pub fn nvme_for_script(dir: &Path) -> NvmeCli {
    NvmeCli::new(Arc::new(SystemRunner::new())).with_program(dir.join("nvme").to_string_lossy().into_owned()).with_timeout(Duration::from_secs(10))
}
