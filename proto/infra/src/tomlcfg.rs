//! Strict TOML configuration loading shared by agent and collector: unknown keys are rejected and
//! every problem is reported at once with its dotted key path (`collector.url: ...`). A binary
//! deserialises its config section by section through [`Loader`], then adds its own semantic checks
//! with [`Loader::problem`] before calling [`Loader::finish`].

use serde::de::DeserializeOwned;
use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in a config file, located by its dotted key path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

/// Every problem found in one config file.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub file: PathBuf,
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} problem(s):", self.file.display(), self.problems.len())?;
        for p in &self.problems {
            if p.path.is_empty() {
                write!(f, "\n  - {}", p.message)?;
            } else {
                write!(f, "\n  - {}: {}", p.path, p.message)?;
            }
        }
        Ok(())
    }
}

/// Section-by-section deserialiser that collects problems instead of stopping at the first.
pub struct Loader {
    file: PathBuf,
    table: toml::Table,
    problems: Vec<Problem>,
}

impl Loader {
    /// Reads and parses `file`, a regular file of at most [`MAX_CONFIG_BYTES`] (see
    /// [`read_bounded`]). A missing file or a TOML syntax error is reported at once, since nothing
    /// else can be checked without a parse tree.
    pub fn from_file(file: &Path) -> Result<Self, ConfigError> {
        let text = read_bounded(file).map_err(|message| ConfigError { file: file.to_owned(), problems: vec![Problem { path: String::new(), message }] })?;
        Self::from_str(file, &text)
    }

    /// Parses `text`; `file` names it in errors.
    pub fn from_str(file: &Path, text: &str) -> Result<Self, ConfigError> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError {
            file: file.to_owned(),
            problems: vec![Problem { path: String::new(), message: format!("not valid TOML: {}", e.to_string().trim()) }],
        })?;
        Ok(Loader { file: file.to_owned(), table, problems: Vec::new() })
    }

    /// Takes top-level key `key` and deserialises it into `T`. A missing key gives `T::default()`;
    /// a wrong type or an unknown nested key is recorded and `T::default()` returned, so checking goes on.
    pub fn take<T: DeserializeOwned + Default>(&mut self, key: &str) -> T {
        let Some(value) = self.table.remove(key) else {
            return T::default();
        };
        self.parse(key, value)
    }

    /// Takes `key` out of the table `section` before the section is taken whole: a key that one
    /// binary adds to a section shared with the other (the collector's `tls.crl_file`).
    pub fn take_from<T: DeserializeOwned + Default>(&mut self, section: &str, key: &str) -> T {
        let Some(value) = self.table.get_mut(section).and_then(|t| t.as_table_mut()).and_then(|t| t.remove(key)) else {
            return T::default();
        };
        self.parse(&join(section, key), value)
    }

    fn parse<T: DeserializeOwned + Default>(&mut self, key: &str, value: toml::Value) -> T {
        let mut unknown = Vec::new();
        let mut on_unknown = |path: serde_ignored::Path<'_>| unknown.push(dotted(&path));
        let de = serde_ignored::Deserializer::new(value, &mut on_unknown);
        let result: Result<T, _> = serde_path_to_error::deserialize(de);
        for u in unknown {
            self.problems.push(Problem { path: join(key, &u), message: "unknown key (check the spelling; see the example config)".into() });
        }
        match result {
            Ok(v) => v,
            Err(e) => {
                let inner = e.path().to_string();
                let path = if inner == "." { key.to_string() } else { join(key, &inner) };
                self.problems.push(Problem { path, message: e.into_inner().to_string() });
                T::default()
            }
        }
    }

    /// Records a semantic problem found by the caller.
    pub fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem { path: path.into(), message: message.into() });
    }

    /// Fails with every problem found, including top-level keys nobody took.
    pub fn finish(mut self) -> Result<(), ConfigError> {
        let mut left: Vec<String> = self.table.keys().cloned().collect();
        left.sort();
        for k in left {
            self.problems.push(Problem { path: k, message: "unknown key (check the spelling; see the example config)".into() });
        }
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { file: self.file, problems: self.problems })
        }
    }

    /// Checks that directory setting `key` can be one: `path` is a directory, or does not exist
    /// yet and its nearest existing ancestor is a directory (the binary creates the rest at
    /// start). A regular file there would only be found out at the first write.
    pub fn check_dir(&mut self, key: &str, path: &Path) {
        let mut at = path;
        loop {
            match std::fs::metadata(at) {
                Ok(m) if m.is_dir() => return,
                Ok(_) if at == path => {
                    return self.problem(key, format!("{} exists and is not a directory; name a directory (created when missing)", path.display()));
                }
                Ok(_) => {
                    return self.problem(key, format!("{} cannot be created: {} is not a directory", path.display(), at.display()));
                }
                Err(_) => match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => at = p,
                    _ => return,
                },
            }
        }
    }

    pub fn file(&self) -> &Path {
        &self.file
    }
}

/// `a.b[2].c`, skipping serde_ignored's `?` markers for `Option` layers.
fn dotted(p: &serde_ignored::Path<'_>) -> String {
    use serde_ignored::Path;
    match p {
        Path::Root => String::new(),
        Path::Seq { parent, index } => format!("{}[{index}]", dotted(parent)),
        Path::Map { parent, key } => {
            let head = dotted(parent);
            if head.is_empty() {
                key.clone()
            } else {
                format!("{head}.{key}")
            }
        }
        Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => dotted(parent),
    }
}

fn join(a: &str, b: &str) -> String {
    if b.is_empty() || b == "?" {
        a.to_string()
    } else {
        format!("{a}.{b}")
    }
}

/// Largest config file read: configs are a few KiB; anything larger is a mistake (`/dev/zero`, a
/// log named by accident), refused before it is read into memory.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads a config file that is a regular file (or a symlink to one) of at most
/// [`MAX_CONFIG_BYTES`]: a device, FIFO or directory is refused without reading it, and a file
/// that grows while it is read is cut off at the bound, so no config makes a binary read forever.
pub fn read_bounded(file: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let meta = std::fs::metadata(file).map_err(|e| format!("cannot read the config file: {e}"))?;
    if !meta.is_file() {
        return Err("is not a regular file (a device, FIFO or directory); give the path of a TOML file".into());
    }
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(format!("is {} bytes; a config file may be at most {MAX_CONFIG_BYTES} bytes (1 MiB)", meta.len()));
    }
    let f = std::fs::File::open(file).map_err(|e| format!("cannot read the config file: {e}"))?;
    let mut bytes = Vec::new();
    f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot read the config file: {e}"))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(format!("grew past {MAX_CONFIG_BYTES} bytes while it was read; a config file may be at most 1 MiB"));
    }
    String::from_utf8(bytes).map_err(|e| format!("is not UTF-8 text: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    struct Net {
        url: String,
        #[serde(default)]
        retries: u32,
    }

    #[test]
    fn unknown_keys_and_type_errors_are_all_reported_with_paths() {
        let text = "name = \"a\"\nbogus = 1\n[net]\nurl = \"http://x\"\nretries = \"many\"\n[net2]\nurll = 1\n";
        let mut l = Loader::from_str(Path::new("a.toml"), text).unwrap();
        let name: String = l.take("name");
        let net: Net = l.take("net");
        let _net2: Option<Net> = l.take("net2");
        assert_eq!(name, "a");
        assert_eq!(net, Net::default());
        let err = l.finish().unwrap_err();
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(paths, vec!["net.retries", "net2.urll", "net2", "bogus"]);
        let text = err.to_string();
        assert!(text.starts_with("a.toml: 4 problem(s):"), "{text}");
        assert!(text.contains("net2.urll: unknown key"), "{text}");
    }

    #[test]
    fn directories_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let mut l = Loader::from_str(Path::new("d.toml"), "").unwrap();
        l.check_dir("a.dir", dir.path());
        l.check_dir("b.dir", &dir.path().join("new/deeper"));
        l.check_dir("c.dir", &file);
        l.check_dir("d.dir", &file.join("sub"));
        l.check_dir("e.dir", Path::new("relative/new"));
        let err = l.finish().unwrap_err();
        let got: Vec<(String, String)> = err.problems.into_iter().map(|p| (p.path, p.message)).collect();
        let f = file.display();
        assert_eq!(
            got,
            vec![
                ("c.dir".to_string(), format!("{f} exists and is not a directory; name a directory (created when missing)")),
                ("d.dir".to_string(), format!("{f}/sub cannot be created: {f} is not a directory")),
            ]
        );
    }

    #[test]
    fn config_reads_are_bounded() {
        let err = Loader::from_file(Path::new("/dev/zero")).err().unwrap();
        assert_eq!(err.to_string(), "/dev/zero: 1 problem(s):\n  - is not a regular file (a device, FIFO or directory); give the path of a TOML file");
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; (MAX_CONFIG_BYTES + 1) as usize]).unwrap();
        let err = Loader::from_file(&big).err().unwrap();
        assert_eq!(err.problems[0].message, "is 1048577 bytes; a config file may be at most 1048576 bytes (1 MiB)");
        let ok = dir.path().join("ok.toml");
        std::fs::write(&ok, "a = 1\n").unwrap();
        let mut l = Loader::from_file(&ok).unwrap();
        assert_eq!(l.take::<i64>("a"), 1);
    }

    #[test]
    fn syntax_errors_name_the_file() {
        let err = Loader::from_str(Path::new("c.toml"), "a = ").err().unwrap();
        assert!(err.to_string().starts_with("c.toml: 1 problem(s):"));
    }
}
