//! Every document reference in the repository resolves: a clone of the project can follow what its
//! code, tests and docs cite. Checked in every source, script, config and document of the
//! repository (`target/` and hidden folders aside):
//!
//! - a mention of a `*.md` path (`docs/sources-and-drives.md`, `tests/fleet/README.md`, `../README.md`,
//!   `$ROOT/docs/benchmarks.md`) names a file that exists, relative to the mentioning file's folder
//!   or to the repository root; a bare name (`PROVENANCE.md`) names a document somewhere in the
//!   repository;
//! - a relative markdown link (`[text](path#anchor)`) in a document points at an existing file or
//!   folder;
//! - nothing names the background material that never was part of the product (its four
//!   documents and its folder, [`GONE_STEMS`]): those references became `docs/uflip-method.md`,
//!   `docs/conventions.md` and `docs/sources-and-drives.md` with the same section numbers. The
//!   last kept a background document's name until stop 48, so a citation of it could not be told
//!   from one of the background; it was renamed, and the old name is now refused everywhere. The
//!   names are put together at run time, so that no text of the repository, this guard's
//!   included, names those documents.
//!
//! Public URLs (anything after `scheme://`, and `owner/repo:path` citations of other projects) are
//! not checked. Extend it by adding a file extension to [`SCANNED`] or a rule to [`line_problems`].

use std::path::{Path, PathBuf};

/// File extensions whose text is scanned.
const SCANNED: &[&str] = &["rs", "md", "toml", "sh", "yml", "yaml", "json", "py", "go", "proto", "j2", "service", "expected"];

/// The background documents' names less `.md`, and the folder that held them (its two parts):
/// none may appear at all ([`GONE`]).
const GONE_STEMS: &[&str] = &["ufip", "influx-grafana-ansible", "test-recipes", "hardware"];
const GONE_FOLDER: [&str; 2] = ["shared", "docs/"];

/// Names that must not appear at all: documents outside the repository (the folder last).
static GONE: std::sync::LazyLock<Vec<String>> =
    std::sync::LazyLock::new(|| GONE_STEMS.iter().map(|s| format!("{s}.md")).chain([GONE_FOLDER.join("/")]).collect());

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn scanned_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || name == "target" || name == "wattflip-out" {
            continue;
        }
        // Not through symlinks: the sysfs fixtures link devices in cycles, as the kernel does
        // (`hwmonN/device` -> the device that holds `hwmon/hwmonN`), and following them never ends.
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_symlink() {
            continue;
        }
        if kind.is_dir() {
            scanned_files(&path, out);
        } else if path.extension().and_then(|e| e.to_str()).is_some_and(|e| SCANNED.contains(&e)) {
            out.push(path);
        }
    }
}

fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-')
}

/// What a check needs to know about the repository.
struct Repo {
    root: PathBuf,
    /// The file names of every document in it (`README.md`, `PROVENANCE.md`, …).
    md_names: Vec<String>,
}

/// Does `token` name an existing document: a path from `dir` or from the root, or a bare name of
/// one somewhere in the repository?
fn resolves(repo: &Repo, dir: &Path, token: &str) -> bool {
    let rel = token.trim_start_matches('/');
    if !rel.contains('/') {
        return repo.md_names.iter().any(|n| n == rel);
    }
    dir.join(rel).exists() || repo.root.join(rel).exists()
}

/// The `*.md` mentions of one line: (token, whether it is external).
fn md_mentions(line: &str) -> Vec<(String, bool)> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 <= chars.len() {
        let is_md = chars[i] == '.' && chars[i + 1] == 'm' && chars[i + 2] == 'd';
        let ends = chars.get(i + 3).is_none_or(|c| !(c.is_ascii_alphanumeric() || *c == '_'));
        if is_md && ends {
            let mut start = i;
            while start > 0 && path_char(chars[start - 1]) {
                start -= 1;
            }
            // `$ROOT/docs/x.md`, `${DIR}/x.md`: the variable is the root or a folder; drop it.
            if start > 0 && matches!(chars[start - 1], '$' | '{' | '}') {
                while start <= i && chars[start] != '/' {
                    start += 1;
                }
            }
            let token: String = chars[start..i + 3].iter().collect();
            // The whole word around it: a URL or an `owner/repo:path` citation is external.
            let mut word_start = start;
            while word_start > 0 && !chars[word_start - 1].is_whitespace() {
                word_start -= 1;
            }
            let word: String = chars[word_start..i + 3].iter().collect();
            let external = word.contains("://") || chars.get(start.wrapping_sub(1)) == Some(&':');
            let stem = token.trim_start_matches(['.', '/']).trim_end_matches(".md");
            if !stem.is_empty() && !stem.ends_with('/') {
                out.push((token, external));
            }
        }
        i += 1;
    }
    out
}

/// The relative targets of the markdown links of one line (`](target)`), anchors dropped.
fn link_targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split('#').next().unwrap_or("").trim();
        let external = target.contains("://") || target.starts_with("mailto:");
        if !target.is_empty() && !external && !target.contains(' ') {
            out.push(target.to_string());
        }
        rest = &after[end..];
    }
    out
}

/// What is wrong with one line of a file in folder `dir`.
fn line_problems(repo: &Repo, dir: &Path, is_markdown: bool, line: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let folder = GONE.last().map_or("", String::as_str);
    if !line.contains(".md") && !line.contains("](") && !line.contains(folder) {
        return problems;
    }
    for gone in GONE.iter() {
        if line.contains(gone) {
            problems.push(format!("names `{gone}`, which is not in the repository (see docs/)"));
        }
    }
    for (token, external) in md_mentions(line) {
        if external || GONE.iter().any(|g| token.ends_with(g.as_str())) {
            continue;
        }
        if !resolves(repo, dir, &token) {
            problems.push(format!("mentions `{token}`, which does not exist"));
        }
    }
    if is_markdown {
        for target in link_targets(line) {
            if !dir.join(&target).exists() {
                problems.push(format!("links to `{target}`, which does not exist"));
            }
        }
    }
    problems
}

fn repo(files: &[PathBuf]) -> Repo {
    let mut md_names: Vec<String> =
        files.iter().filter(|f| f.extension().is_some_and(|e| e == "md")).filter_map(|f| f.file_name().map(|n| n.to_string_lossy().into_owned())).collect();
    md_names.sort();
    md_names.dedup();
    Repo { root: root(), md_names }
}

fn all_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    scanned_files(&root(), &mut files);
    files.sort();
    files
}

#[test]
fn every_document_reference_resolves() {
    let root = root();
    let files = all_files();
    let repo = repo(&files);
    let this = Path::new(file!()).file_name().map(|n| n.to_os_string());
    let mut problems = Vec::new();
    let mut mentions = 0usize;
    for file in &files {
        if file.file_name().map(|n| n.to_os_string()) == this {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(file) else { continue };
        let dir = file.parent().unwrap_or(&root);
        let is_markdown = file.extension().is_some_and(|e| e == "md");
        let rel = file.strip_prefix(&root).unwrap_or(file).display().to_string();
        for (n, line) in text.lines().enumerate() {
            mentions += md_mentions(line).len();
            for p in line_problems(&repo, dir, is_markdown, line) {
                problems.push(format!("{rel}:{}: {p}", n + 1));
            }
        }
    }
    // A scanner that finds nothing would pass everything: the repository cites its docs widely.
    assert!(files.len() > 300 && mentions > 100, "scanned {} files, {mentions} mentions", files.len());
    assert!(problems.is_empty(), "{} dangling document references:\n{}", problems.len(), problems.join("\n"));
}

#[test]
fn the_scanner_reads_known_lines() {
    let repo = repo(&all_files());
    let docs = repo.root.join("docs");
    let found = |line: &str| line_problems(&repo, &docs, true, line);
    assert_eq!(found("see `docs/uflip-method.md` §4.3 and [hw](sources-and-drives.md#1-rapl)"), Vec::<String>::new());
    assert_eq!(found("see (sources-and-drives.md §1.2)"), Vec::<String>::new(), "a bare name beside the file");
    assert_eq!(found("[x](https://example.org/a.md) and owner/repo:docs/CHANGELOG.md"), Vec::<String>::new());
    assert_eq!(found("\"$ROOT/docs/benchmarks.md\" and PROVENANCE.md"), Vec::<String>::new());
    let [ufip, hw] = [GONE_STEMS[0], GONE_STEMS[3]].map(|s| format!("{s}.md"));
    assert_eq!(found(&format!("see `{ufip}` §4.3")), vec![format!("names `{ufip}`, which is not in the repository (see docs/)")]);
    assert_eq!(
        found("see docs/nope.md and [a](missing/)"),
        vec!["mentions `docs/nope.md`, which does not exist".to_string(), "links to `missing/`, which does not exist".to_string(),]
    );
    assert_eq!(found("see nope.md"), vec!["mentions `nope.md`, which does not exist".to_string()]);
    // The old name of docs/sources-and-drives.md was a background document's: refused bare, in
    // `docs/` and anywhere.
    let src = repo.root.join("agent/src/sensors");
    assert_eq!(
        line_problems(&repo, &src, false, &format!("//! ({hw} §1.1), docs/sources-and-drives.md §2")),
        vec![format!("names `{hw}`, which is not in the repository (see docs/)")]
    );
    assert_eq!(
        found(&format!("[hw]({hw}) §9")),
        vec![format!("names `{hw}`, which is not in the repository (see docs/)"), format!("links to `{hw}`, which does not exist")]
    );
}
