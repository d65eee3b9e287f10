//! What to tell an operator after an OS error on a probe target, shared by the probe's errors
//! (`error`) and the target's (`target`), so neither imports the other. To advise on another
//! errno, add its case to [`write_advice`] with the action that fixes it.

/// What to do after an IO on a target failed with `e`: a target the kernel refuses to write
/// because it is in use (ETXTBSY: an active swap file, a running program) is not a health problem.
pub fn write_advice(e: &std::io::Error, otherwise: &'static str) -> &'static str {
    if e.raw_os_error() == Some(libc::ETXTBSY) {
        "it is in use as swap or as an executable (the kernel refuses writes to it): swapoff it or stop the program, or probe another target"
    } else {
        otherwise
    }
}
