//! The completed JSON fixtures must keep every line of the verbatim captures (docs/sources-and-drives.md
//! Appendix A) unchanged.

use crate::util::fixture;

fn assert_contains_captured(captured: &str, completed: &[&str]) {
    let captured = fixture(captured);
    let completed: Vec<String> = completed.iter().map(|f| fixture(f)).collect();
    let mut checked = 0;
    for line in captured.lines() {
        let t = line.trim();
        // JSON key lines only: the capture also holds `-H` text and `…` ellipses.
        if !t.starts_with('"') {
            continue;
        }
        checked += 1;
        assert!(completed.iter().any(|c| c.lines().any(|l| l.trim() == t)), "captured line {t:?} is missing from {completed:?}");
    }
    assert!(checked > 0);
}

#[test]
fn completed_fixtures_contain_every_captured_line() {
    assert_contains_captured("nvme/qemu-nvme-cli-2.3-list.captured.txt", &["nvme/qemu-nvme-cli-2.3-list.json"]);
    assert_contains_captured("nvme/qemu-nvme-cli-2.3-id-ctrl.captured.txt", &["nvme/qemu-nvme-cli-2.3-id-ctrl.json"]);
    assert_contains_captured(
        "nvme/qemu-nvme-cli-2.3-smart-log.captured.txt",
        &["nvme/qemu-nvme-cli-2.3-smart-log.json", "nvme/qemu-nvme-cli-2.3-smart-log-H.json"],
    );
    assert_contains_captured("smartctl/qemu-smartctl-7.3-nvme-H-A.captured.txt", &["smartctl/qemu-smartctl-7.3-nvme-H-A.json"]);
}

#[test]
fn split_feature_outputs_are_verbatim_parts_of_the_capture() {
    let capture = fixture("nvme/qemu-nvme-cli-2.3-features.captured.txt");
    for f in [
        "nvme/qemu-nvme-cli-2.3-get-feature-f2-H.stdout.txt",
        "nvme/qemu-nvme-cli-2.3-get-feature-f2-s3-H.stdout.txt",
        "nvme/qemu-nvme-cli-2.3-set-feature-f2-v1.stderr.txt",
        "nvme/qemu-nvme-cli-2.3-set-feature-f2-v0-s.stderr.txt",
        "nvme/qemu-nvme-cli-2.3-get-feature-f4-s3-H.stdout.txt",
        "nvme/qemu-nvme-cli-2.3-set-feature-f4-v0x13f.stdout.txt",
        "nvme/qemu-nvme-cli-2.3-get-feature-f4-H.stdout.txt",
    ] {
        assert!(capture.contains(&fixture(f)), "{f} is not a verbatim part of the capture");
    }
}
