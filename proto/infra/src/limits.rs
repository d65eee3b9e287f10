//! Process limits a server with many connections needs: the open-file soft limit raised to the
//! hard limit at start (systemd and shells default the soft limit to 1,024, far below what a
//! collector holding thousands of agent streams needs), and from it how many streams fit. Add
//! another limit here the same way: read, raise within what the process may, report both.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors kept free for everything but streams: the listener, the sink's connections, the
/// dead-letter and log files, the metrics server, the runtime's own.
pub const RESERVED_FDS: u64 = 64;

/// The open-file limit before and after [`raise_nofile`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NofileLimit {
    pub soft_before: Option<u64>,
    /// The soft limit now in force (None: unlimited).
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

impl NofileLimit {
    /// Connections the process can hold with [`RESERVED_FDS`] kept free (each is one descriptor).
    pub fn connections(&self) -> u64 {
        self.soft.unwrap_or(1 << 20).saturating_sub(RESERVED_FDS)
    }
}

/// Raises the soft open-file limit to the hard one. A refusal leaves the old limit and returns it
/// with the error, so the caller can still size itself by what it has.
pub fn raise_nofile() -> (NofileLimit, Option<std::io::Error>) {
    let before = getrlimit(Resource::Nofile);
    let mut now = NofileLimit { soft_before: before.current, soft: before.current, hard: before.maximum };
    if before.current == before.maximum {
        return (now, None);
    }
    match setrlimit(Resource::Nofile, Rlimit { current: before.maximum, maximum: before.maximum }) {
        Ok(()) => {
            now.soft = getrlimit(Resource::Nofile).current;
            (now, None)
        }
        Err(e) => (now, Some(e.into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_ends_at_the_hard_limit() {
        let (l, err) = raise_nofile();
        assert!(err.is_none(), "{err:?}");
        assert_eq!(l.soft, l.hard);
        assert_eq!(getrlimit(Resource::Nofile).current, l.hard);
        assert_eq!(NofileLimit { soft_before: None, soft: Some(1024), hard: Some(4096) }.connections(), 960);
    }
}
