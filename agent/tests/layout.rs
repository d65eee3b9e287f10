//! The layout gate of `agent/src`: imports run one way. Parses every `crate::…` and `super::…` path
//! of the library's files and `wattflip_agent::…` of `main.rs` (test modules, comments and strings
//! excluded; a parent naming its own child module by a relative path is the module tree, not an
//! import), builds the file graph and checks: no cycle among files, at most [`MAX_UPWARD`]
//! imports that run up the layers, every top-level module placed in [`LAYERS`], no source file
//! over [`MAX_LINES`] lines and no function over [`MAX_FN_LINES`].
//!
//! A new top-level module goes into [`LAYERS`] at the layer it belongs to; a failure names the
//! cycle (file → file → …) or the upward imports, so the fix is to move the shared piece down.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers from the top (0) down: a file may import its own layer's files (without a cycle) and
/// lower layers. `main.rs` is the binary and sits above everything.
const LAYERS: &[(&str, u32)] =
    &[("app", 1), ("config", 2), ("report", 3), ("probes", 4), ("drives", 5), ("energy", 5), ("export", 5), ("sensors", 6), ("clock", 6), ("events", 6)];

/// The issue's bound on imports that run upward (a lower layer reaching a higher one).
const MAX_UPWARD: usize = 2;

/// No source file longer than this (pure data tables would be listed here; there are none).
const MAX_LINES: usize = 600;

/// No function longer than this (declarative tables would be listed here; there are none).
const MAX_FN_LINES: usize = 80;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let read = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    let mut entries: Vec<_> = read.map(|e| e.unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display())).path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file: `drives/governor.rs` → [drives, governor]; `drives/mod.rs` →
/// [drives]; `lib.rs` and `main.rs` → [].
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.trim_end_matches(".rs").to_string();
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem);
    }
    parts
}

/// The code of a file without comments, string literals and `#[cfg(test)]` modules (which end the
/// file in this crate, so everything from the first one on is test code).
fn code_of(text: &str) -> String {
    let mut lines = Vec::new();
    let mut it = text.lines().peekable();
    while let Some(line) = it.next() {
        if line.trim() == "#[cfg(test)]" && it.peek().is_some_and(|n| n.trim_start().starts_with("mod ")) {
            break;
        }
        lines.push(line);
    }
    let joined = lines.join("\n");
    // Drop comments and string literals so paths in docs and messages do not count.
    let mut out = String::new();
    let b = joined.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' && !(i > 0 && b[i - 1] == b'\'') {
            // A raw string `r"…"`/`r#"…"#` has no escapes; a normal one may.
            let raw_hashes = raw_prefix(b, i);
            i += 1;
            match raw_hashes {
                Some(h) => {
                    let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', h)).collect();
                    while i < b.len() && !b[i..].starts_with(&close) {
                        i += 1;
                    }
                    i += close.len();
                }
                None => {
                    while i < b.len() && b[i] != b'"' {
                        i += if b[i] == b'\\' { 2 } else { 1 };
                    }
                    i += 1;
                }
            }
            out.push_str("\"\"");
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// `Some(hashes)` when the quote at `i` opens a raw string (`r"`, `r#"`, `br"`).
fn raw_prefix(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i;
    let mut hashes = 0;
    while j > 0 && b[j - 1] == b'#' {
        hashes += 1;
        j -= 1;
    }
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    (j > 0 && b[j - 1] == b'r' && (j < 2 || !is_ident(b[j - 2]) || b[j - 2] == b'b')).then_some(hashes)
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Paths after a prefix at `rest`: `a::b::C` → [[a, b, C]]; `{a::B, c::{D, E}}` → every leaf.
fn parse_paths(rest: &str) -> Vec<Vec<String>> {
    fn group(s: &[char], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut cur = prefix.clone();
        loop {
            while *i < s.len() && s[*i].is_whitespace() {
                *i += 1;
            }
            if *i >= s.len() {
                out.push(cur);
                return;
            }
            if s[*i] == '{' {
                *i += 1;
                loop {
                    group(s, i, cur.clone(), out);
                    while *i < s.len() && s[*i].is_whitespace() {
                        *i += 1;
                    }
                    match s.get(*i) {
                        Some(',') => {
                            *i += 1;
                            while *i < s.len() && s[*i].is_whitespace() {
                                *i += 1;
                            }
                            if s.get(*i) == Some(&'}') {
                                *i += 1;
                                return;
                            }
                        }
                        Some('}') => {
                            *i += 1;
                            return;
                        }
                        _ => return,
                    }
                }
            }
            let start = *i;
            while *i < s.len() && is_ident(s[*i]) {
                *i += 1;
            }
            if start == *i {
                out.push(cur);
                return;
            }
            cur.push(s[start..*i].iter().collect());
            if s.get(*i) == Some(&':') && s.get(*i + 1) == Some(&':') {
                *i += 2;
                continue;
            }
            out.push(cur);
            return;
        }
    }
    let chars: Vec<char> = rest.chars().take(2000).collect();
    let mut out = Vec::new();
    let mut i = 0;
    group(&chars, &mut i, Vec::new(), &mut out);
    out
}

/// Every path the code names with `prefix` (e.g. `crate::`) at a word boundary.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| is_ident(c) || c == ':') {
            continue;
        }
        out.extend(parse_paths(&code[at + prefix.len()..]));
    }
    out
}

struct Crate {
    /// Module path → file (relative to src).
    modules: BTreeMap<Vec<String>, PathBuf>,
    /// File → its code.
    code: BTreeMap<PathBuf, String>,
    /// File → line count.
    lines: BTreeMap<PathBuf, usize>,
}

fn load() -> Crate {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    let mut c = Crate { modules: BTreeMap::new(), code: BTreeMap::new(), lines: BTreeMap::new() };
    for f in files {
        let rel = f.strip_prefix(&root).unwrap_or(&f).to_path_buf();
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("cannot read {}: {e}", f.display()));
        c.lines.insert(rel.clone(), text.lines().count());
        if rel != Path::new("main.rs") {
            c.modules.insert(module_of(&rel), rel.clone());
        }
        c.code.insert(rel, code_of(&text));
    }
    c
}

/// The file a path names: the longest module prefix of `path` that is a file of the crate.
fn resolve(c: &Crate, path: &[String]) -> Option<PathBuf> {
    (0..=path.len()).rev().find_map(|n| c.modules.get(&path[..n]).cloned())
}

/// Edges file → file, each with the path that makes it.
fn edges(c: &Crate) -> BTreeMap<(PathBuf, PathBuf), String> {
    let mut e = BTreeMap::new();
    for (file, code) in &c.code {
        let is_main = file == Path::new("main.rs");
        let module = module_of(file);
        let mut named: Vec<Vec<String>> = Vec::new();
        let prefix = if is_main { "wattflip_agent::" } else { "crate::" };
        named.extend(paths_after(code, prefix));
        if !is_main {
            // `super::` from a file is its parent module; `super::super::` one more up.
            for p in paths_after(code, "super::") {
                let mut base = module.clone();
                base.pop();
                let mut p = p;
                while p.first().is_some_and(|s| s == "super") {
                    p.remove(0);
                    base.pop();
                }
                named.push(base.into_iter().chain(p).collect());
            }
        }
        for p in named {
            if let Some(target) = resolve(c, &p) {
                if &target != file && target != Path::new("lib.rs") {
                    e.entry((file.clone(), target)).or_insert_with(|| p.join("::"));
                }
            }
        }
    }
    e
}

fn layer(file: &Path) -> Option<u32> {
    if file == Path::new("main.rs") || file == Path::new("lib.rs") {
        return Some(0);
    }
    let top = file.iter().next()?.to_string_lossy().trim_end_matches(".rs").to_string();
    LAYERS.iter().find(|(m, _)| *m == top).map(|(_, l)| *l)
}

/// One cycle through the graph, if any (depth-first search; the cycle in file order).
fn find_cycle(graph: &BTreeMap<PathBuf, Vec<PathBuf>>) -> Option<Vec<PathBuf>> {
    fn visit(n: &PathBuf, graph: &BTreeMap<PathBuf, Vec<PathBuf>>, state: &mut BTreeMap<PathBuf, u8>, stack: &mut Vec<PathBuf>) -> Option<Vec<PathBuf>> {
        state.insert(n.clone(), 1);
        stack.push(n.clone());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m).copied().unwrap_or(0) {
                1 => {
                    // `m` is on the stack (state 1), so the cycle starts there.
                    let from = stack.iter().position(|x| x == m).unwrap_or(0);
                    let mut cycle = stack[from..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                0 => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(n.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if state.get(n).copied().unwrap_or(0) == 0 {
            if let Some(c) = visit(n, graph, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn graph(e: &BTreeMap<(PathBuf, PathBuf), String>) -> BTreeMap<PathBuf, Vec<PathBuf>> {
    let mut g: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
    for (a, b) in e.keys() {
        g.entry(a.clone()).or_default().push(b.clone());
    }
    g
}

fn show(cycle: &[PathBuf], e: &BTreeMap<(PathBuf, PathBuf), String>) -> String {
    cycle.windows(2).map(|w| format!("{} --({})--> {}", w[0].display(), e[&(w[0].clone(), w[1].clone())], w[1].display())).collect::<Vec<_>>().join("\n  ")
}

#[test]
fn no_import_cycle_among_the_agents_files() {
    let c = load();
    let e = edges(&c);
    assert!(e.len() > 50, "the parser found only {} imports in agent/src; it no longer reads the code", e.len());
    println!("{} imports between {} files", e.len(), c.code.len());
    let cycle = find_cycle(&graph(&e));
    assert!(cycle.is_none(), "import cycle in agent/src:\n  {}", show(&cycle.unwrap_or_default(), &e));
}

#[test]
fn imports_run_down_the_layers() {
    let c = load();
    let unplaced: BTreeSet<String> = c.code.keys().filter(|f| layer(f).is_none()).map(|f| f.iter().next().unwrap().to_string_lossy().into_owned()).collect();
    assert!(unplaced.is_empty(), "top-level modules not in LAYERS of agent/tests/layout.rs: {unplaced:?}; place each at its layer");
    let upward: Vec<String> =
        edges(&c).into_iter().filter(|((a, b), _)| layer(b) < layer(a)).map(|((a, b), p)| format!("{} -> {} ({p})", a.display(), b.display())).collect();
    println!("upward imports ({}):\n  {}", upward.len(), upward.join("\n  "));
    assert!(upward.len() <= MAX_UPWARD, "{} imports run upward (at most {MAX_UPWARD}):\n  {}", upward.len(), upward.join("\n  "));
}

#[test]
fn no_source_file_over_600_lines() {
    let c = load();
    let long: Vec<String> = c.lines.iter().filter(|(_, n)| **n > MAX_LINES).map(|(f, n)| format!("{} ({n} lines)", f.display())).collect();
    assert!(long.is_empty(), "agent/src files over {MAX_LINES} lines: {}; split them by concern", long.join(", "));
}

/// Functions of `code` longer than `max` lines: (name, first line, lines).
fn long_functions(code: &str, max: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let mut words = line.split_whitespace().skip_while(|w| w.starts_with("pub") || ["async", "const", "unsafe", "extern"].contains(w));
        if words.next() != Some("fn") {
            continue;
        }
        let name: String = words.next().unwrap_or_default().chars().take_while(|c| is_ident(*c)).collect();
        let (mut depth, mut opened) = (0i64, false);
        for (j, l) in lines[i..].iter().enumerate() {
            depth += l.matches('{').count() as i64 - l.matches('}').count() as i64;
            opened |= l.contains('{');
            if !opened && l.trim_end().ends_with(';') {
                break;
            }
            if opened && depth <= 0 {
                if j + 1 > max {
                    out.push((name.clone(), i + 1, j + 1));
                }
                break;
            }
        }
    }
    out
}

#[test]
fn no_function_over_80_lines() {
    let c = load();
    let long: Vec<String> = c
        .code
        .iter()
        .flat_map(|(f, code)| long_functions(code, MAX_FN_LINES).into_iter().map(move |(n, at, len)| format!("{}:{at}: fn {n} ({len} lines)", f.display())))
        .collect();
    assert!(long.is_empty(), "agent/src functions over {MAX_FN_LINES} lines: {}; split them", long.join(", "));
    assert_eq!(long_functions("fn a() {\n    x;\n}\npub async fn b() {\n}\n", 2), vec![("a".to_string(), 1, 3)]);
}

/// The parser itself, on known input: a gate that reads nothing would pass everything.
#[test]
fn the_parser_reads_groups_super_and_skips_comments_strings_and_tests() {
    assert_eq!(
        parse_paths("{a::B, c::{D, e::F}}; x"),
        vec![vec!["a", "B"], vec!["c", "D"], vec!["c", "e", "F"]].into_iter().map(|v| v.into_iter().map(String::from).collect::<Vec<_>>()).collect::<Vec<_>>()
    );
    let code = code_of("use crate::a::B; // crate::c::D\nlet s = \"crate::e\";\n#[cfg(test)]\nmod tests {\n use crate::f;\n}\n");
    assert_eq!(paths_after(&code, "crate::"), vec![vec!["a".to_string(), "B".to_string()]]);
    let mut g = BTreeMap::new();
    g.insert(PathBuf::from("a.rs"), vec![PathBuf::from("b.rs")]);
    g.insert(PathBuf::from("b.rs"), vec![PathBuf::from("a.rs")]);
    assert_eq!(find_cycle(&g), Some(vec![PathBuf::from("a.rs"), PathBuf::from("b.rs"), PathBuf::from("a.rs")]));
}
