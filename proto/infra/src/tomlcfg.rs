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
    /// Reads and parses `file`. A missing file or a TOML syntax error is reported at once, since
    /// nothing else can be checked without a parse tree.
    pub fn from_file(file: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(file).map_err(|e| ConfigError {
            file: file.to_owned(),
            problems: vec![Problem { path: String::new(), message: format!("cannot read the config file: {e}") }],
        })?;
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

/// Parses a human duration such as `250ms`, `5s`, `2m` for config values.
pub fn parse_duration(path: &str, s: &str, loader: &mut Loader) -> Option<std::time::Duration> {
    match humantime_like(s) {
        Ok(d) => Some(d),
        Err(m) => {
            loader.problem(path, m);
            None
        }
    }
}

fn humantime_like(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("`{s}` is not a duration ({e}); write e.g. `500ms`, `5s` or `2m`"))
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
    fn durations_parse_or_name_the_key() {
        let mut l = Loader::from_str(Path::new("b.toml"), "").unwrap();
        assert_eq!(parse_duration("x", "250ms", &mut l), Some(std::time::Duration::from_millis(250)));
        assert_eq!(parse_duration("x", "2m", &mut l), Some(std::time::Duration::from_secs(120)));
        assert_eq!(parse_duration("s.interval", "fast", &mut l), None);
        let err = l.finish().unwrap_err();
        assert_eq!(err.problems[0].path, "s.interval");
    }

    #[test]
    fn syntax_errors_name_the_file() {
        let err = Loader::from_str(Path::new("c.toml"), "a = ").err().unwrap();
        assert!(err.to_string().starts_with("c.toml: 1 problem(s):"));
    }
}
